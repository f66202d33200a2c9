"""`graphcost bench collect`: samples per minute and the noise ceiling of a collection
run with the pipeline off (each core compiles and times) and on (every core compiles,
one core only times), on the same programs, in one run.

The modes alternate (off, on, off, on, …) so that a drift of the machine during the
run falls on both; each mode's graphs are pooled over its repeats. The noise ceiling
is the mean per-graph Kendall τ between two timing rounds over distinct executables,
with a 95% bootstrap interval; `noise_diff` is the paired difference (on − off) over
the same graphs, so "no loss of timing quality" is a claim its interval can check.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from graphcost.eval.metrics import bootstrap_ci
from graphcost.xla.collect import collect, read_log
from graphcost.xla.measure import Protocol
from graphcost.xla.plan import CollectSpec

MODES = {"off": False, "on": True}


def bench_collect(families: Sequence[str], per_family: int, kinds: Sequence[str],
                  num_configs: int, protocol: Protocol, repeats: int = 1,
                  workers: int = 0, on_row: Callable[[dict], Any] | None = None) -> dict:
    """Collect the same programs `repeats` times per mode into temporary folders."""
    rows: list[dict] = []
    taus: dict[str, dict[str, list[float]]] = {m: {} for m in MODES}
    kwargs = {"per_family": per_family, "families": list(families)}
    for rep in range(repeats):
        for mode, pipeline in MODES.items():
            with tempfile.TemporaryDirectory(prefix=f"bench-collect-{mode}-") as tmp:
                spec = CollectSpec(out=tmp, program_kwargs=kwargs, kinds=list(kinds),
                                   num_configs=num_configs, protocol=protocol,
                                   workers=workers, pipeline=pipeline)
                result = collect(spec, command="graphcost bench collect")
                graph_taus = {Path(p).relative_to(tmp).as_posix(): e["noise_tau"]
                              for p, e in read_log(tmp).items()
                              if e["status"] == "ok" and e.get("noise_tau") is not None}
            for name, tau in graph_taus.items():
                taus[mode].setdefault(name, []).append(tau)
            mean, low, high = bootstrap_ci(np.array(list(graph_taus.values())))
            row = {"mode": mode, "repeat": rep, "graphs": result.written,
                   "failed": result.failed, "samples": result.samples,
                   "minutes": result.wall_s / 60,
                   "samples_per_min": result.samples_per_minute,
                   "noise_tau": mean, "noise_ci": [low, high]}
            rows.append(row)
            if on_row:
                on_row(row)
    summary: dict[str, Any] = {"rows": rows}
    for mode in MODES:
        mine = [r for r in rows if r["mode"] == mode]
        per_graph = np.array([np.mean(v) for v in taus[mode].values()])
        summary[mode] = {"samples_per_min": float(np.mean([r["samples_per_min"] for r in mine])),
                         "noise_tau": bootstrap_ci(per_graph)}
    both = sorted(set(taus["on"]) & set(taus["off"]))
    diff = np.array([np.mean(taus["on"][g]) - np.mean(taus["off"][g]) for g in both])
    summary["speedup"] = summary["on"]["samples_per_min"] / summary["off"]["samples_per_min"]
    summary["noise_diff"] = bootstrap_ci(diff) if both else None
    return summary


HEADER = f"{'pipeline':8} {'rep':>3} {'graphs':>6} {'samples':>7} {'minutes':>7} " \
         f"{'samples/min':>11}  noise ceiling τ [95% CI]"


def format_row(r: dict) -> str:
    low, high = r["noise_ci"]
    return (f"{r['mode']:8} {r['repeat']:3d} {r['graphs']:6d} {r['samples']:7d} "
            f"{r['minutes']:7.2f} {r['samples_per_min']:11.1f}  {r['noise_tau']:.3f} "
            f"[{low:.3f}, {high:.3f}]")


def format_collect(s: dict) -> str:
    lines = [f"pipeline {m}: {s[m]['samples_per_min']:.1f} samples/min, noise ceiling τ "
             f"{s[m]['noise_tau'][0]:.3f} [{s[m]['noise_tau'][1]:.3f}, "
             f"{s[m]['noise_tau'][2]:.3f}]" for m in MODES]
    lines.append(f"speed-up on/off: {s['speedup']:.2f}x")
    if s["noise_diff"]:
        d = s["noise_diff"]
        lines.append(f"noise ceiling on − off, paired over graphs: {d[0]:+.3f} "
                     f"[{d[1]:+.3f}, {d[2]:+.3f}]")
    return "\n".join(lines)
