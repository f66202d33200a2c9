"""`graphcost bench autotune`: autotune held-out programs and report measured speed-ups.

The model comes from one of three places, and the report says which:
- `model`: a saved model; its training families are unknown here, so the programs to
  tune must be named (their families should be ones it was not trained on);
- `data`: a collection (e.g. `build/sample/npz/layout/cpu/random`): a small ranker is
  trained on its train split (early-stopped on valid); the families of both splits are
  kept out of the tuned programs (test-split families may be tuned);
- neither: a small training set is measured on the spot (`train_families`, few configs
  and runs, on `core`) and a small ranker trained on it.
Every tuned program is of a zoo family not used for training, unless named explicitly.
`spread` is the larger inter-quartile range / median of the default and the chosen
config: a speed-up smaller than it is within the timing noise.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from graphcost.autotune.measure import pinned
from graphcost.autotune.tune import autotune
from graphcost.bench import BenchResult
from graphcost.kinds import graph_kind_of
from graphcost.stats import geomean, geomean_ci
from graphcost.xla.programs import FAMILIES, family_of, make_program
from graphcost.xla.timing import AUTOTUNING, COLLECTING, Protocol

TRAIN_FAMILIES = ("mlp", "cnn_nchw", "depthwise", "transformer")
SMALL_RANKER = {"hidden": 32, "opcode_dim": 16, "layers": 2, "ref_configs": 16}
UNKNOWN = "(unknown)"  # the training families of a loaded model


def _train(kind: str, train: list, valid: list | None, epochs: int, seed: int):
    from graphcost.models.model import Model
    from graphcost.train import TrainSettings, fit

    model = Model("ranker", kind, **SMALL_RANKER)
    fit(model, train, valid or None, TrainSettings(epochs=epochs, seed=seed, progress=False,
                                                   configs_per_graph=16, patience=epochs))
    return model


def model_from_collection(data: str, epochs: int = 30, seed: int = 0) -> tuple[Any, dict]:
    """A small ranker trained on a collection's train split; the families it holds."""
    from graphcost.data.collection import open_collection
    from graphcost.train.run import training_splits

    coll = open_collection(data)
    train, valid = training_splits(coll)  # refused without a train split, as `train` is
    model = _train(coll.kind, train, valid, epochs, seed)
    model.collection = coll.name  # autotune refuses a model of another space
    seen = sorted({family_of(g.name) for g in train + (valid or [])})
    return model, {"source": f"trained on {coll.name} ({data}): {len(train)} train graphs, "
                   f"{len(valid or [])} valid graphs for early stopping", "families_seen": seen,
                   "train_families": sorted({family_of(g.name) for g in train})}


def model_from_measurements(kind: str, families: Sequence[str], per_family: int = 3,
                            configs: int = 16, protocol: Protocol | None = None,
                            epochs: int = 30, seed: int = 0, core: int | None = None,
                            log: Callable[[str], Any] | None = None) -> tuple[Any, dict]:
    """Measure a few programs of `families` now and train a small ranker on them."""
    from graphcost.xla.prepare import measure_layout, measure_options

    say = log or (lambda _msg: None)
    protocol = protocol or COLLECTING
    graphs = []
    t0 = time.perf_counter()
    with pinned(core):
        for fam in families:
            for i in range(per_family):
                name, fn, args = make_program(fam, i)
                if kind == "layout":
                    g, _ = measure_layout(name, fn, args, "random", configs, seed, protocol)
                else:
                    g, _ = measure_options(name, fn, args, configs, seed, protocol)
                if g is not None:
                    graphs.append(g)
                say(f"measured {name} for training ({time.perf_counter() - t0:.0f}s)")
    if len(graphs) < 2:
        raise RuntimeError("fewer than two training graphs could be measured")
    model = _train(graph_kind_of(kind), graphs, None, epochs, seed)
    return model, {"source": f"trained on {len(graphs)} graphs measured now "
                   f"({configs} {kind} configs each, {protocol.runs} runs)",
                   "families_seen": sorted(set(families)), "train_families": sorted(set(families)),
                   "measure_train_s": round(time.perf_counter() - t0, 1)}


def model_from_file(path: str) -> tuple[Any, dict]:
    """A saved model; the families it was trained on are unknown here."""
    from graphcost.models.model import Model

    return Model.load(path), {"source": f"loaded from {path}", "families_seen": [UNKNOWN]}


def choose_model(model_path: str | None = None, data: str | None = None, kind: str = "layout",
                 train_families: Sequence[str] = TRAIN_FAMILIES, epochs: int = 30,
                 seed: int = 0, log: Callable[[str], Any] | None = None) -> tuple[Any, dict]:
    """The model to tune with and where it came from (see the module docstring): a saved
    one, else a small ranker trained on `data`, else on `train_families` measured now."""
    if model_path:
        return model_from_file(model_path)
    if data:
        return model_from_collection(data, epochs, seed)
    return model_from_measurements(kind, train_families, epochs=epochs, seed=seed, log=log)


def held_out_programs(seen: Sequence[str], per_family: int,
                      families: Sequence[str] | None = None) -> list[str]:
    """Zoo program names of `families` (default: every family not in `seen`)."""
    fams = list(families) if families else [f for f in FAMILIES if f not in set(seen)]
    return [f"{f}.{i:03d}" for f in fams for i in range(per_family)]


def programs_to_tune(model_info: dict[str, Any], per_family: int = 1,
                     families: Sequence[str] | None = None,
                     programs: Sequence[str] | None = None) -> list[str]:
    """The `programs` named, else `per_family` of each of `families`, by default of every
    family the model was not trained on (every family, for a loaded model)."""
    if programs:
        return list(programs)
    seen = [f for f in model_info["families_seen"] if f != UNKNOWN]
    return held_out_programs(seen, per_family, families or None)


@dataclass
class AutotuneResult(BenchResult):
    """`bench autotune`'s figures: per-program rows and their geometric means, and how
    they were made."""

    model: dict[str, Any]  # where the model came from (`choose_model`'s info)
    rows: list[dict[str, Any]]  # one per program ({"program", "skipped"} where it failed)
    summary: dict[str, Any]  # geometric means with 95% intervals over the programs
    batches: int
    protocol: dict[str, Any]  # the timing protocol's fields
    samples: int | None
    evaluations: int | None
    core: int | None  # the core timings were pinned to


def bench_autotune(programs: Sequence[str], model: Any, model_info: dict[str, Any], k: int = 5,
                   samples: int | None = None, evaluations: int | None = None,
                   protocol: Protocol | None = None, seed: int = 0, core: int | None = None,
                   confirm_rounds: int = 5, batches: int = 1,
                   log: Callable[[str], Any] | None = None) -> AutotuneResult:
    """Autotune each program; per-program figures (from each program's confirmation
    round) and their geometric means with 95% intervals over programs."""
    say = log or (lambda _msg: None)
    rows = []
    for spec in programs:
        family, _, index = spec.rpartition(".")
        name, fn, args = make_program(family, int(index))
        try:
            r = autotune(fn, args, model, name=name, k=k, samples=samples,
                         evaluations=evaluations, protocol=protocol, seed=seed, core=core,
                         confirm_rounds=confirm_rounds, batches=batches,
                         compare_random=True)  # the benchmark is what checks the tuner
        except (ValueError, RuntimeError) as e:  # no configurable point; default failed
            say(f"{name}: skipped ({e})")
            rows.append({"program": name, "skipped": str(e)})
            continue
        row = {"program": name, "kind": r.kind, "units": r.space["units"],
               "nodes": r.space["graph_nodes"], "measured": len(r.measured),
               "failed": sum(not m.ok for m in r.measured), "default_us": r.default_ns / 1e3,
               "chosen_us": r.chosen_ns / 1e3, "random_best_us": r.random_best_ns / 1e3,
               "speedup_vs_default": r.speedup_vs_default,
               "speedup_vs_default_ci": list(r.speedup_vs_default_ci),
               "speedup_vs_random": r.speedup_vs_random,
               "speedup_vs_random_ci": list(r.speedup_vs_random_ci),
               "top1_speedup": r.selection["top1_speedup"],
               "tau": r.tau, "evaluations": r.search["evaluations"],
               "spread": max(r.measured[0].spread, r.measured[r.chosen].spread),
               "search_per_s": r.scoring.get("search_candidates_per_s"),
               "cached_per_s": r.scoring.get("cached_per_s"),
               "uncached_per_s": r.scoring.get("uncached_per_s"),
               "seconds": sum(r.seconds.values())}
        rows.append(row)
        say(f"{name}: {r.speedup_vs_default:.3f}x vs default, {r.speedup_vs_random:.3f}x vs "
            f"random-{k} (confirmed), top-1 {row['top1_speedup']:.3f}x, tau {r.tau:.3f}, "
            f"{row['cached_per_s']} cand/s cached vs {row['uncached_per_s']} uncached")
    done = [r for r in rows if "skipped" not in r]
    taus = [r["tau"] for r in done if not math.isnan(r["tau"])]
    summary = {
        "programs": len(done), "skipped": len(rows) - len(done), "k": k,
        "geomean_speedup_vs_default": geomean_ci([r["speedup_vs_default"] for r in done]),
        "geomean_speedup_vs_random": geomean_ci([r["speedup_vs_random"] for r in done]),
        "geomean_top1_speedup": geomean([r["top1_speedup"] for r in done]),
        "mean_tau": float(np.mean(taus)) if taus else float("nan"),
        "cached_per_s": float(np.mean([r["cached_per_s"] for r in done])) if done else None,
        "uncached_per_s": float(np.mean([r["uncached_per_s"] for r in done])) if done else None,
    }
    return AutotuneResult(model=model_info, rows=rows, summary=summary, batches=batches,
                          protocol=asdict(protocol or AUTOTUNING), samples=samples,
                          evaluations=evaluations, core=core)


def format_bench(result: AutotuneResult) -> str:
    """The per-program table and the geometric-mean summary line."""
    lines = [f"model: {result.model['source']}",
             f"families seen in training: {', '.join(result.model['families_seen'])}",
             f"{'program':22} {'units':>5} {'default us':>10} {'chosen us':>9} {'rand us':>8} "
             f"{'vs def':>7} {'vs rand':>7} {'top-1':>6} {'tau':>6} {'cand/s':>8} "
             f"{'uncached':>8} {'spread':>6}"]
    for r in result.rows:
        if "skipped" in r:
            lines.append(f"{r['program']:22} skipped: {r['skipped'][:70]}")
            continue
        lines.append(f"{r['program']:22} {r['units']:>5} {r['default_us']:>10.1f} "
                     f"{r['chosen_us']:>9.1f} {r['random_best_us']:>8.1f} "
                     f"{r['speedup_vs_default']:>6.3f}x {r['speedup_vs_random']:>6.3f}x "
                     f"{r['top1_speedup']:>5.3f}x {r['tau']:>6.3f} {r['cached_per_s']:>8.0f} "
                     f"{r['uncached_per_s']:>8.0f} {r['spread']:>6.3f}")
    s = result.summary
    if not s["programs"]:
        return "\n".join(lines + ["no program could be tuned"])
    d, r_ = s["geomean_speedup_vs_default"], s["geomean_speedup_vs_random"]
    lines.append(f"{s['programs']} programs (k={s['k']}), confirmation rounds: geomean "
                 f"{d[0]:.3f}x [{d[1]:.3f}, {d[2]:.3f}] vs default, "
                 f"{r_[0]:.3f}x [{r_[1]:.3f}, {r_[2]:.3f}] vs best of {s['k']} random "
                 "(+default), 95% intervals over programs; selection round "
                 f"model top-1 {s['geomean_top1_speedup']:.3f}x; mean tau {s['mean_tau']:.3f}; "
                 f"{s['cached_per_s']:.0f} candidates/s cached vs {s['uncached_per_s']:.0f} "
                 "uncached")
    return "\n".join(lines)
