"""`graphcost bench collect`: samples per minute and the noise ceiling of a collection
run in each mode, on the same programs, in one run. Modes: `off` (no pipeline: each
core compiles and times its own graphs), `on` (the pipeline with quiet timing: every
core compiles, one core times while every compile worker is paused), `shared` (the
pipeline pausing only the compile worker on the timing core) and `ray` (a local Ray
instance, one timing slot per core, each compiling and timing its own graphs; its start
is timed with the run). `MODE:N` runs a mode with N workers (Ray: N timing slots), so
`ray:1,ray:2` measures what a second worker adds.

The modes alternate (off, on, off, on, …) so that a drift of the machine during the
run falls on all; each mode's graphs are pooled over its repeats. The noise ceiling
is the mean per-graph Kendall τ between two timing rounds over distinct executables,
with a 95% bootstrap interval; `noise_diff` is each mode's paired difference from the
first mode over the same graphs, so "no loss of timing quality" is a claim its
interval can check.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphcost.bench import BenchResult
from graphcost.errors import UserError
from graphcost.stats import bootstrap_ci
from graphcost.xla.collect import collect
from graphcost.xla.plan import CollectSpec
from graphcost.xla.restart_log import read_log
from graphcost.xla.timing import Protocol

MODES = {"off": {"pipeline": False}, "on": {"pipeline": True, "quiet_timing": True},
         "shared": {"pipeline": True, "quiet_timing": False}, "ray": {"ray": "local"}}


def mode_settings(mode: str, workers: int) -> dict[str, Any]:
    """The CollectSpec fields of a mode `NAME` or `NAME:WORKERS`."""
    name, sep, count = mode.partition(":")
    if name not in MODES or (sep and not count.isdigit()):
        raise UserError(f"unknown mode {mode!r}; choose from {list(MODES)}, each optionally "
                        "with :WORKERS (e.g. ray:2)")
    return {"workers": int(count) if sep else workers, **MODES[name]}


@dataclass
class CollectResult(BenchResult):
    """`bench collect`'s figures: a row per (repeat, mode) and each mode's summary."""

    rows: list[dict[str, Any]]
    modes: list[str]  # the first is the baseline of `speedup` and `noise_diff`
    per_mode: dict[str, dict[str, Any]]  # samples_per_min, speedup, noise_tau, noise_diff

    def to_json(self) -> dict[str, Any]:
        """`rows`, `modes`, then each mode's summary under its own name, as the JSON
        was before (a mode is never called `rows` or `modes`: `mode_settings`)."""
        return {"rows": self.rows, "modes": self.modes, **self.per_mode}


def bench_collect(families: Sequence[str], per_family: int, kinds: Sequence[str],
                  num_configs: int, protocol: Protocol, repeats: int = 1,
                  workers: int = 0, modes: Sequence[str] = ("off", "on"),
                  on_row: Callable[[dict], Any] | None = None) -> CollectResult:
    """Collect the same programs `repeats` times per mode into temporary folders."""
    if not modes:
        raise UserError(f"no mode given; choose from {list(MODES)}")
    settings = {m: mode_settings(m, workers) for m in modes}
    rows: list[dict] = []
    taus: dict[str, dict[str, list[float]]] = {m: {} for m in modes}
    kwargs = {"per_family": per_family, "families": list(families)}
    for rep in range(repeats):
        for mode in modes:
            with tempfile.TemporaryDirectory(prefix=f"bench-collect-{mode}-") as tmp:
                spec = CollectSpec(out=tmp, program_kwargs=kwargs, kinds=list(kinds),
                                   num_configs=num_configs, protocol=protocol,
                                   **settings[mode])
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
    summary: dict[str, dict[str, Any]] = {}
    base = modes[0]
    for mode in modes:
        mine = [r for r in rows if r["mode"] == mode]
        per_graph = np.array([np.mean(v) for v in taus[mode].values()])
        both = sorted(set(taus[mode]) & set(taus[base]))
        diff = np.array([np.mean(taus[mode][g]) - np.mean(taus[base][g]) for g in both])
        summary[mode] = {"samples_per_min": float(np.mean([r["samples_per_min"] for r in mine])),
                         "noise_tau": bootstrap_ci(per_graph),
                         "noise_diff": bootstrap_ci(diff) if both else None}
    for mode in modes:
        summary[mode]["speedup"] = (summary[mode]["samples_per_min"]
                                    / summary[base]["samples_per_min"])
    return CollectResult(rows=rows, modes=list(modes), per_mode=summary)


HEADER = f"{'mode':8} {'rep':>3} {'graphs':>6} {'samples':>7} {'minutes':>7} " \
         f"{'samples/min':>11}  noise ceiling τ [95% CI]"


def format_row(r: dict) -> str:
    low, high = r["noise_ci"]
    return (f"{r['mode']:8} {r['repeat']:3d} {r['graphs']:6d} {r['samples']:7d} "
            f"{r['minutes']:7.2f} {r['samples_per_min']:11.1f}  {r['noise_tau']:.3f} "
            f"[{low:.3f}, {high:.3f}]")


def format_collect(result: CollectResult) -> str:
    """One line per mode: samples/min against the first mode, and the noise ceiling."""
    base, lines, s = result.modes[0], [], result.per_mode
    for m in result.modes:
        tau, diff = s[m]["noise_tau"], s[m]["noise_diff"]
        line = (f"mode {m}: {s[m]['samples_per_min']:.1f} samples/min "
                f"({s[m]['speedup']:.2f}x {base}), noise ceiling τ {tau[0]:.3f} "
                f"[{tau[1]:.3f}, {tau[2]:.3f}]")
        if m != base and diff:
            line += (f", paired difference from {base} {diff[0]:+.3f} "
                     f"[{diff[1]:+.3f}, {diff[2]:+.3f}]")
        lines.append(line)
    return "\n".join(lines)
