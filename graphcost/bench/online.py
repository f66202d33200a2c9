"""`graphcost bench online`: search strategies run live on programs, one budget each.

`bench search` judges strategies offline on a table; this runs them where a user would,
on programs measured now: for each program, `autotune.tune.autotune` with the
first strategy and the others compared beside it (taking turns, one budget each, all
bests confirmed together in fresh rounds). A program's figures:

- `found`: the speed-up over the default of each strategy's best, timed again;
- `speedup`: of each strategy's choice (its best only if confirmed faster, else the
  default): what a user of that strategy gets.

The summary is over the programs with headroom, geometric means with 95% t intervals:
each strategy's speed-up, and the first strategy's ratio to each other one, paired per
program. Headroom is judged on measurements made before, not on this run's (choosing
programs by this run's results would favour whichever strategy got lucky): the stored
best of each program in `--headroom-from` (a collection of the same programs), or, when
none is given, every program counts.

Rows are kept in OUT/online.json, rewritten atomically after each program; a rerun with
the same settings reuses them (a long run resumes).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from graphcost.bench import BenchResult, default_index, plot_anytime
from graphcost.errors import UserError
from graphcost.stats import geomean_ci, ratio_interval
from graphcost.xla.programs import Program
from graphcost.xla.timing import Protocol


@dataclasses.dataclass
class OnlineBenchResult(BenchResult):
    strategies: list[str]
    budget: int
    headroom: float
    rows: list[dict[str, Any]]  # per program: name, stored headroom, found, speedup, curves
    summary: dict[str, Any]  # "programs", "headroom_programs", per strategy and pair figures


def stored_headroom(collection: str | Path) -> dict[str, float]:
    """Each program's best stored runtime's speed-up over its default config's, from an
    options collection (every split)."""
    from graphcost.data.collection import open_collection
    from graphcost.eval.crossval import pooled_files
    from graphcost.formats.npz import read_graph

    out = {}
    for name, path in pooled_files(open_collection(collection)).items():
        g = read_graph(path)
        try:
            d = default_index(g)
        except UserError:  # no default among its configs: no headroom to judge
            continue
        rt = np.asarray(g.config_runtime, dtype=np.float64)
        out[name] = float(rt[d] / rt.min())
    return out


def online_rows(programs: Sequence[Program], out: Path, strategies: Sequence[str], budget: int,
                protocol: Protocol, confirm_rounds: int, core: int | None, seed: int,
                space: str, model: str | None,
                say: Callable[[str], Any]) -> list[dict[str, Any]]:
    """`autotune` on every program; OUT/online.json is rewritten after each, and a
    program already there is reused when it was run with the same settings."""
    from graphcost.atomic import write_json
    from graphcost.autotune.tune import autotune

    path = out / "online.json"
    try:
        done: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.exists() else {}
    except ValueError:
        raise UserError(f"{path} is not JSON; delete it to tune every program again") from None
    spec = {"strategies": list(strategies), "budget": budget, "seed": seed, "core": core,
            "confirm_rounds": confirm_rounds, "protocol": dataclasses.asdict(protocol),
            "space": space, "model": model}
    rows = []
    for n, (name, fn, args) in enumerate(programs, 1):
        prior = done.get(name)
        if prior and prior.get("spec") == spec:
            say(f"[{n}/{len(programs)}] {name}: reused from {path}")
            rows.append(prior)
            continue
        say(f"[{n}/{len(programs)}] {name}")
        try:
            r = autotune(fn, args, model, space=space, budget=budget,
                         strategy=strategies[0], compare=strategies[1:], name=name,
                         protocol=protocol, confirm_rounds=confirm_rounds, core=core,
                         seed=seed, log=say)
        except RuntimeError as e:  # the default config itself failed: nothing to tune
            say(f"  skipped: {e}")
            continue
        row = {"program": name, "found": r.found, "speedup": r.speedup,
               "bests": r.bests, "curves": {a: r.curve(a) for a in r.arms},
               "confirmed": r.confirmed, "seconds": r.seconds, "spec": spec}
        done[name] = row
        write_json(done, path)
        rows.append(row)
        say("  " + ", ".join(f"{a} {row['speedup'][a][0]:.3f}x" for a in strategies))
    return rows


def summarize_online(rows: Sequence[dict[str, Any]], strategies: Sequence[str],
                     headroom: dict[str, float] | None, least: float) -> dict[str, Any]:
    """Geometric means over the programs with `least` stored headroom (all programs when
    `headroom` is None) of each strategy's speed-up, and the first strategy's ratio to
    each other, paired per program; the same of the best found (`found`)."""
    chosen = [r for r in rows if headroom is None or headroom.get(r["program"], 0) >= least]
    first = strategies[0]
    out: dict[str, Any] = {"programs": len(rows), "headroom_programs": len(chosen),
                           "names": [r["program"] for r in chosen]}
    for what in ("speedup", "found"):
        out[what] = {a: geomean_ci([r[what][a][0] for r in chosen]) for a in strategies}
        out[f"{what}_over"] = {a: list(ratio_interval([r[what][first][0] for r in chosen],
                                                      [r[what][a][0] for r in chosen]))
                               if len(chosen) > 1 else [float("nan")] * 3
                               for a in strategies[1:]}
    return out


def bench_online(programs: Sequence[Program], out: str | Path,
                 strategies: Sequence[str] = ("coordinate", "random", "tpe"), budget: int = 10,
                 protocol: Protocol | None = None, confirm_rounds: int = 6,
                 core: int | None = None, seed: int = 0, headroom_from: str | None = None,
                 headroom: float = 1.10, space: str = "options", model: str | None = None,
                 log: Callable[[str], Any] | None = None) -> OnlineBenchResult:
    """Tune every program online with each strategy and summarize (module doc); `space`
    and `model` as `autotune` takes them."""
    from graphcost.xla.timing import AUTOTUNING

    if not strategies:
        raise UserError("name at least one strategy")
    stored = stored_headroom(headroom_from) if headroom_from else None
    rows = online_rows(programs, Path(out), strategies, budget, protocol or AUTOTUNING,
                       confirm_rounds, core, seed, space, model, log or (lambda _msg: None))
    for r in rows:
        r["stored_headroom"] = None if stored is None else stored.get(r["program"])
    return OnlineBenchResult(strategies=list(strategies), budget=budget, headroom=headroom,
                             rows=rows,
                             summary=summarize_online(rows, strategies, stored, headroom))


def format_online_bench(result: OnlineBenchResult) -> str:
    """Per program, then the summary."""
    s = result.summary
    names = result.strategies
    lines = [f"{'program':24} {'stored':>7} " + " ".join(f"{a:>18}" for a in names)]
    for r in result.rows:
        h = r.get("stored_headroom")
        lines.append(f"{r['program']:24} {'-' if h is None else f'{h:.2f}x':>7} "
                     + " ".join(f"{r['speedup'][a][0]:>9.3f} ({r['found'][a][0]:.3f})"
                                for a in names))
    lines.append(f"over {s['headroom_programs']} of {s['programs']} programs "
                 f"(stored headroom >= {result.headroom:.2f}x when known), budget "
                 f"{result.budget}: choice (best found), geometric mean [95% CI]")
    for a in names:
        x, f = s["speedup"][a], s["found"][a]
        lines.append(f"  {a:>16}: {x[0]:.3f}x [{x[1]:.3f}, {x[2]:.3f}]  "
                     f"({f[0]:.3f}x [{f[1]:.3f}, {f[2]:.3f}])")
    for a in names[1:]:
        x, f = s["speedup_over"][a], s["found_over"][a]
        lines.append(f"  {names[0]} ÷ {a}: {x[0]:.3f}x [{x[1]:.3f}, {x[2]:.3f}]  "
                     f"({f[0]:.3f}x [{f[1]:.3f}, {f[2]:.3f}])")
    return "\n".join(lines)


def plot_online(result: OnlineBenchResult, path: str | Path) -> Path:
    """Each strategy's best speed-up found so far (by the search's own timings) against
    the executables timed, over the summary's programs."""
    names = set(result.summary["names"])
    rows = [r for r in result.rows if r["program"] in names]
    return plot_anytime({a: [r["curves"][a] for r in rows] for a in result.strategies}, path,
                        f"searching while measuring: {len(rows)} programs, budget "
                        f"{result.budget}")
