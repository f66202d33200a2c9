"""What a collection holds and how it was made, written after every run and merge.

Each collection folder gets a `manifest.json` (command, machine, JAX version, counts,
spread, the noise ceiling: mean per-graph τ between two timing rounds, with a 95%
interval) and OUT gets `summary.json`, every manifest's headline figures; both are read
from the run log (graphcost.xla.restart_log), so a merge of shards writes them alike.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import numpy as np

from graphcost.atomic import write_json
from graphcost.data.collection import SPLITS
from graphcost.xla.plan import CollectSpec, Task, collection_dir, collection_name, spec_dict
from graphcost.xla.programs import family_of
from graphcost.xla.restart_log import read_log


def _machine() -> dict[str, Any]:
    """Where the graphs were timed. The CPU model comes from /proc/cpuinfo: neither
    psutil nor `platform` reports it (`platform.processor()` is empty or the arch)."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"node": platform.node(), "cpu": cpu, "cores": len(os.sched_getaffinity(0)),
            "python": platform.python_version(), "platform": platform.platform()}


def collection_figures(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The headline figures of one collection's logged graphs: counts, distinct
    executables, runtime spread, samples per core-minute and the noise ceiling (mean
    per-graph τ between two timing rounds, with a 95% bootstrap interval)."""
    from graphcost.stats import bootstrap_ci

    ok = [e for e in entries if e["status"] == "ok"]
    if not ok:
        return {"graphs": 0}

    def median(key: str) -> float | None:
        values = [e[key] for e in ok if e.get(key) is not None]
        return float(np.median(values)) if values else None

    # a recovered graph (resumed from files with no log line) has lost its seconds: the
    # rate counts only the graphs this log timed
    timed = [e for e in ok if not e.get("recovered")]
    seconds = sum(e["compile_s"] + e["time_s"] for e in timed)
    noise = np.array([e["noise_tau"] for e in ok if e.get("noise_tau") is not None], dtype=float)
    tau, low, high = bootstrap_ci(noise) if noise.size else (None, None, None)
    spreads = np.array([e["runtime_max_over_min"] for e in ok])
    picks = [e["random_top5_score"] for e in ok if e.get("random_top5_score") is not None]
    return {
        "graphs": len(ok), "families_measured": len({family_of(e["name"]) for e in ok}),
        "configs": int(sum(e["kept"] for e in ok)),
        "configs_failed": int(sum(len(e.get("failed", [])) for e in ok)),
        "distinct_executables_median": median("distinct"),
        "graphs_exhausted": int(sum(bool(e.get("exhausted")) for e in ok)),
        "median_runtime_ms": median("median_runtime_ms"),
        "runtime_max_over_min_median": median("runtime_max_over_min"),
        "runtime_max_over_min_quartiles": [float(q) for q in np.percentile(spreads, [25, 75])],
        "median_spread": median("median_spread"),
        "random_top5_score": float(np.mean(picks)) if picks else None,
        "samples_per_minute_per_core": round(60 * sum(e["kept"] for e in timed) / seconds, 1)
        if seconds else None,
        "noise_ceiling_tau": tau,
        "noise_ceiling_ci": [low, high] if tau is not None else None,
    }


def write_manifest(spec: CollectSpec, tasks: list[Task], command: str | None = None
                   ) -> dict[str, dict[str, Any]]:
    """`manifest.json` in each collection's folder (how it was made, what it holds) and
    `OUT/summary.json` (every collection's figures)."""
    import jax
    import jaxlib

    logged = read_log(spec.out)
    common = {
        "what": "XLA:CPU measurements of JAX programs (graphcost.xla.collect)",
        "command": command or " ".join(sys.argv), "spec": spec_dict(spec),
        "machine": _machine(), "jax": jax.__version__, "jaxlib": jaxlib.__version__,
    }
    manifests = {}
    for kind in spec.kinds:
        mine = [t for t in tasks if t.kind == kind]
        splits: dict[str, int] = {}
        for t in mine:
            if t.path(spec.out).exists():
                splits[t.split] = splits.get(t.split, 0) + 1
        entries = [logged[str(t.path(spec.out))] for t in mine if str(t.path(spec.out)) in logged]
        m = dict(common, collection=collection_name(kind), splits=splits,
                 families={s: sorted({family_of(t.program) for t in mine if t.split == s})
                           for s in SPLITS},
                 graphs_failed=sorted(e["path"] for e in entries if e["status"] != "ok"),
                 **collection_figures(entries))
        folder = collection_dir(spec.out, kind)
        folder.mkdir(parents=True, exist_ok=True)
        write_json(m, folder / "manifest.json")
        manifests[m["collection"]] = m
    write_summary(spec.out)
    return manifests


#: the figures of a manifest that `summary.json` gathers
SUMMARY_KEYS = ("graphs", "families_measured", "splits", "distinct_executables_median",
                "graphs_exhausted", "median_runtime_ms", "runtime_max_over_min_median",
                "runtime_max_over_min_quartiles", "median_spread", "random_top5_score",
                "samples_per_minute_per_core", "noise_ceiling_tau", "noise_ceiling_ci")


def write_summary(out: str | Path) -> dict[str, dict[str, Any]]:
    """`OUT/summary.json`: the figures of every collection under OUT, from their
    manifests, so that a run of some kinds (`--kinds`) keeps the other collections'."""
    summary = {}
    for path in sorted(Path(out, "npz").rglob("manifest.json")):
        m = json.loads(path.read_text())
        if "collection" in m:
            summary[m["collection"]] = {k: m.get(k) for k in SUMMARY_KEYS}
    write_json(summary, Path(out) / "summary.json")
    return summary
