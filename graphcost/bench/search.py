"""`graphcost bench search`: search strategies judged offline on a table of measured configs.

A *table* is an options collection whose programs were measured at many configs (the
bundled `options:cpu` holds 24 per program; `graphcost collect --kinds options
--configs N --cover` measures every single and pairwise knob change first). On a table a
measurement is a lookup, so every strategy of `autotune.strategy` runs on every
program, at every budget, in seconds (the NAS-Bench idea). The rules of the game:

- the default config is measured first and free; the budget K counts the *distinct
  executables* timed after it (a config that compiles to an executable already timed
  costs nothing, as a tuner that fingerprints before timing pays nothing for it);
- a strategy's result at K is the speed-up of the fastest config it has measured over
  the default (by the table's runtimes); the optimum is the table's fastest;
- with `cross_rounds`, each strategy is told half of the table's timing rounds (the
  minimum over the even rounds) and scored on the other half (the odd ones), then the
  other way round: a config that was fastest by one round's luck earns nothing,
  so the table's noise no longer flatters whatever found its lucky configs, and the
  optimum is what measuring every config finds, scored the same way (the programs with
  headroom are still chosen by the stored runtimes);
- model strategies use, for each program, a model that never saw its family: the fold
  models of `graphcost crossval` on the training collection (`eval.folds`, shared with
  `bench families`), one per seed, or with `ensemble` the seeds' models as one (the
  mean of their scores, as `graphcost ensemble` scores); a family the training
  collection lacks takes the first fold's;
- prior strategies use, for each program, the move prior (`autotune.table.move_prior`)
  of the table's programs of other families;
- the model-free strategies run `draws` seeds per program; every figure is a geometric
  mean over the programs with at least `headroom` over the default, with a 95% t
  interval, and each strategy is paired per program with each of `BASELINES` that ran.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from graphcost.autotune.strategy import STRATEGIES, Strategy, make_strategy
from graphcost.autotune.table import Table, move_prior, read_table, single_gains
from graphcost.bench import BenchResult, plot_anytime
from graphcost.data.collection import open_collection
from graphcost.data.families import family_of
from graphcost.errors import UserError
from graphcost.eval.crossval import pooled_files
from graphcost.eval.folds import fold_model, fold_runs
from graphcost.models.scorer import ConfigScorer
from graphcost.stats import geomean_ci, ratio_of_means_ci, t_interval
from graphcost.train.settings import TrainSettings
from graphcost.xla.options import OPTION_KNOBS
from graphcost.xla.timing import Protocol

BUDGETS = (1, 2, 3, 5, 10, 20, 50)
#: the searches a user tries first: every strategy is paired with each one run
BASELINES = ("random", "coordinate", "tpe")
CHOICES = [len(k.choices) for k in OPTION_KNOBS]


def anytime(strategy: Strategy, table: Table, budget: int, scored: np.ndarray | None = None
            ) -> tuple[np.ndarray, list[tuple[int, ...]]]:
    """Speed-up over the default of the best config measured after k = 1..budget
    executables timed (flat once the strategy has nothing left to ask), and that config
    after each k. The strategy is told the table's runtimes; the speed-up is by `scored`
    (default: the same runtimes), e.g. another timing round of the same configs."""
    row = {c: i for i, c in enumerate(table.configs)}
    base = table.runtime[table.default]
    worth = table.runtime if scored is None else np.asarray(scored, dtype=np.float64)
    strategy.tell(table.configs[table.default], base)
    timed = {int(table.executable[table.default])}
    best, curve, bests = table.default, [], []
    while len(curve) < budget:
        config = strategy.ask()
        if config is None:
            break
        i = row[config]
        strategy.tell(config, table.runtime[i])
        if int(table.executable[i]) in timed:
            continue
        timed.add(int(table.executable[i]))
        best = i if table.runtime[i] < table.runtime[best] else best
        curve.append(worth[table.default] / worth[best])
        bests.append(table.configs[best])
    short = budget - len(curve)
    return (np.array(curve + [curve[-1] if curve else 1.0] * short),
            bests + [bests[-1] if bests else table.configs[table.default]] * short)


@dataclasses.dataclass
class SearchBenchResult(BenchResult):
    """Anytime curves per program and strategy, and their summary over the headroom
    programs at each budget of `budgets`."""

    table: str
    data: str
    model: str  # what scores the configs of the model strategies
    seeds: list[int]
    draws: int
    headroom: float
    budgets: list[int]
    strategies: list[str]
    programs: list[dict[str, Any]]  # name, family, headroom, optimum, curves: strategy -> [K]
    summary: dict[str, dict[str, dict[str, list[float]]]]  # strategy -> K -> figures
    confirm_k: int = 0  # the budget whose choices were timed again (0: none)
    confirmed: dict[str, Any] | None = None  # `confirm_choices`
    cross_rounds: bool = False  # told half the timing rounds, scored on the other half
    table_rounds: int = 0  # only the table's first that many timing rounds (0: all)
    ensemble: bool = False  # the model strategies scored with the seeds' models as one


def summarize(programs: list[dict[str, Any]], strategies: Sequence[str],
              budgets: Sequence[int], headroom: float) -> dict[str, Any]:
    """Per strategy and budget, over the programs with `headroom`: the geometric mean
    speed-up, the mean share of the optimum's log speed-up per program and pooled (the
    mean log speed-up over the mean log optimum: defined where some program's optimum is
    near 1), and the geometric mean ratio to each search a user tries first (`BASELINES`
    run here), paired per program, each with its 95% interval."""
    rows = [p for p in programs if p["headroom"] >= headroom]
    out: dict[str, Any] = {}
    for s in strategies:
        out[s] = {}
        for k in budgets:
            speed = [p["curves"][s][k - 1] for p in rows]
            share = [np.log(p["curves"][s][k - 1]) / np.log(p["optimum"]) for p in rows]
            out[s][str(k)] = {
                "speedup": geomean_ci(speed),
                "share_of_optimum": list(t_interval(np.array(share))),
                "pooled_share": list(ratio_of_means_ci(np.log(speed),
                                                       [np.log(p["optimum"]) for p in rows])),
                **{f"over_{b}": geomean_ci([p["curves"][s][k - 1] / p["curves"][b][k - 1]
                                            for p in rows])
                   for b in BASELINES if b in strategies}}
    return {"programs": len(rows), "by_strategy": out}


def bench_search(table: str | Path, data: str | Path, out: str | Path,
                 strategies: Sequence[str] = STRATEGIES, seeds: Sequence[int] = (0, 1, 2),
                 draws: int = 10, budget: int = 50, headroom: float = 1.10, folds: int = 5,
                 settings: TrainSettings | None = None, confirm_k: int = 0,
                 protocol: Protocol | None = None, core: int | None = None,
                 model: str = "ranker", cross_rounds: bool = False,
                 table_rounds: int | None = None, ensemble: bool = False,
                 log: Callable[[str], Any] | None = None) -> SearchBenchResult:
    """Every strategy on every program of `table` (see the module docstring). Fold models
    (`model`: a model or rule `crossval` trains) are trained on `data` under `out` once
    and reused by a rerun. With `confirm_k`, each
    strategy's choice after that many measurements (its first seed's) is timed again
    with the default in fresh rounds on every headroom program (`confirm_choices`). With
    `table_rounds`, only the table's first that many timing rounds count: what a table
    timed in fewer rounds would have said."""
    say = log or (lambda _msg: None)
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise UserError(f"unknown strategy {unknown[0]!r}; expected some of "
                        f"{', '.join(STRATEGIES)}")
    if "random" not in strategies:
        strategies = ["random", *strategies]  # every strategy is paired with it
    coll = open_collection(table)
    if coll.kind != "tile" or not coll.name.startswith("options:"):
        raise UserError(f"{table}: {coll.name} is not an options collection; bench search "
                        "reads tables of compiler options")
    files = pooled_files(coll)
    models: list[Callable[[str], Any]] = []
    held_out: dict[str, str] = {}  # family -> a training program whose fold never saw it
    if any(s.startswith("model") for s in strategies):
        runs = fold_runs(data, model, seeds, Path(out), settings or TrainSettings(), folds,
                         say)
        models = [fold_model(r) for r in runs]
        graphs = runs[0]["graphs"]
        first = min(g["fold"] for g in graphs.values())
        fold0 = next(n for n in sorted(graphs) if graphs[n]["fold"] == first)
        held_out = {family_of(n): n for n in graphs}
        held_out = {f: held_out.get(f, fold0) for f in {family_of(n) for n in files}}
    tables = {name: read_table(files[name]) for name in sorted(files)}
    if table_rounds:  # as if the table had been timed in fewer rounds
        tables = {name: dataclasses.replace(t, runtime=_rounds(
            t, files[name], table_rounds, "--table-rounds").min(axis=1))
            for name, t in tables.items()}
    # each view: the runtimes a strategy is told, and those it is scored by
    views = {name: _views(t, files[name], cross_rounds, table_rounds)
             for name, t in tables.items()}
    gains = [{name: single_gains(v[i][0]) for name, v in views.items()}
             for i in range(len(next(iter(views.values()))))]
    programs = []
    for name, t in tables.items():
        say(f"{name}: {len(t.configs)} configs, {t.executables} "
            f"executables, optimum {t.optimum:.3f}x")
        scores = [ConfigScorer(m(held_out[family_of(name)]), t.graph).scores() for m in models]
        if ensemble and scores:
            scores = [np.mean(scores, axis=0)]
        priors = [move_prior(g for n, g in view.items() if family_of(n) != family_of(name))
                  for view in gains]
        curves: dict[str, list[float]] = {}
        choices: dict[str, list[int]] = {}
        for s in strategies:
            model_run = s.startswith("model")
            runs = [anytime(make_strategy(s, t.configs, CHOICES, seed,
                                          scores[i] if model_run else None, priors[v]),
                            told, budget, worth)
                    for v, (told, worth) in enumerate(views[name])
                    for i, seed in enumerate(seeds[:len(scores)] if model_run
                                              else range(draws))]
            curves[s] = np.exp(np.mean([np.log(c) for c, _ in runs], axis=0)).tolist()
            choices[s] = list(runs[0][1][min(confirm_k, budget) - 1])  # first seed's
        optimum = np.exp(np.mean([np.log(worth[t.default] / worth[np.argmin(told.runtime)])
                                  for told, worth in views[name]]))
        programs.append({"name": name, "family": family_of(name), "headroom": t.optimum,
                         "optimum": float(optimum), "configs": len(t.configs),
                         "executables": t.executables, "curves": curves,
                         "choices": choices})
    confirmed = (confirm_choices(programs, strategies, confirm_k, headroom,
                                 protocol or Protocol(rounds=6), core, say)
                 if confirm_k else None)
    budgets = [k for k in BUDGETS if k <= budget]
    return SearchBenchResult(table=coll.name, data=str(data), model=model, seeds=list(seeds),
                             draws=draws,
                             headroom=headroom, budgets=budgets, strategies=list(strategies),
                             programs=programs,
                             summary=summarize(programs, strategies, budgets, headroom),
                             confirm_k=confirm_k, confirmed=confirmed,
                             cross_rounds=cross_rounds, table_rounds=table_rounds or 0,
                             ensemble=ensemble)


def _rounds(t: Table, path: Path, first: int | None, option: str) -> np.ndarray:
    """The first `first` timing rounds of each config of a table (all with None)."""
    rounds = t.rounds
    least = max(2, first or 0)
    if rounds is None or np.ndim(rounds) != 2 or np.shape(rounds)[1] < least:
        raise UserError(f"{path}: no config_runtime_rounds with {least} rounds or more; "
                        f"{option} needs a table timed in rounds (graphcost collect --rounds)")
    return rounds[:, :first]


def _views(t: Table, path: Path, cross_rounds: bool, first: int | None
           ) -> list[tuple[Table, np.ndarray]]:
    """(the table a strategy is told, the runtimes it is scored by): the table's runtimes
    for both, or with `cross_rounds` the minimum over the even timing rounds (of the first
    `first`) and over the odd ones, each told once and scored by the other."""
    if not cross_rounds:
        return [(t, t.runtime)]
    rounds = _rounds(t, path, first, "--cross-rounds")
    halves = [rounds[:, h::2].min(axis=1) for h in (0, 1)]
    return [(dataclasses.replace(t, runtime=halves[a]), halves[1 - a]) for a in (0, 1)]


def confirm_choices(programs: list[dict[str, Any]], strategies: Sequence[str], k: int,
                    headroom: float, protocol: Protocol, core: int | None,
                    say: Callable[[str], Any]) -> dict[str, Any]:
    """The table chose each strategy's winner by stored timings, partly by their luck:
    on every program with `headroom` (a zoo program), the default and each strategy's
    choice after `k` measurements are compiled again and timed together in fresh rounds.
    Per strategy: the geometric mean confirmed speed-up over the default and the ratio
    to random search's choice, paired per program, with 95% t intervals."""
    from graphcost.autotune.choice import confirm
    from graphcost.autotune.program import load_target, prepare

    rows = []
    for p in [p for p in programs if p["headroom"] >= headroom]:
        name, fn, args = load_target(p["name"])
        t = prepare(name, fn, args, "options")
        picks = {"default": t.configs.default(),
                 **{s: tuple(p["choices"][s]) for s in strategies}}
        rounds = confirm(t, picks, protocol, core)
        speed = {s: float(np.exp(np.mean(np.log(rounds["default"]) - np.log(rounds[s]))))
                 for s in strategies}
        say(f"{name}: confirmed speed-up at K = {k}: "
            + ", ".join(f"{s} {v:.3f}x" for s, v in speed.items()))
        rows.append({"name": name, "speedup": speed})
    return {"k": k, "rounds": protocol.rounds, "programs": rows,
            "speedup": {s: geomean_ci([r["speedup"][s] for r in rows]) for s in strategies},
            "over_random": {s: geomean_ci([r["speedup"][s] / r["speedup"]["random"]
                                           for r in rows]) for s in strategies}}


def format_search(result: SearchBenchResult) -> str:
    """The summary as a table: per budget K, each strategy's geometric mean speed-up over
    the default [95% CI], its share of the optimum's log speed-up (per program, and
    pooled), and its ratio to each baseline search that ran (paired per program)."""
    rows = [p for p in result.programs if p["headroom"] >= result.headroom]
    optimum = geomean_ci([p["optimum"] for p in rows]) if rows else [float("nan")] * 3
    what = ("told half the timing rounds, scored on the other half; optimum: every config "
            "measured"
            if result.cross_rounds else "optimum: the table's best")
    if result.table_rounds:
        what = f"its first {result.table_rounds} timing rounds; {what}"
    lines = [f"{result.table}: {len(result.programs)} programs, {len(rows)} with ≥ "
             f"{result.headroom:.2f}x headroom ({what}, {_ci(optimum)}x); model seeds "
             f"{result.seeds}{' as one ensemble' if result.ensemble else ''}, "
             f"{result.draws} draws of each model-free strategy",
             f"{'K':>3} {'strategy':17} {'speed-up [95% CI]':>24} {'share of optimum':>24} "
             f"{'pooled share':>24} "
             + " ".join(f"{'over ' + b:>24}" for b in BASELINES if b in result.strategies)]
    for k in result.budgets:
        for s in result.strategies:
            f = result.summary["by_strategy"][s][str(k)]
            lines.append(f"{k:>3} {s:17} {_ci(f['speedup']):>24} "
                         f"{_ci(f['share_of_optimum']):>24} {_ci(f['pooled_share']):>24} "
                         + " ".join(f"{_ci(f['over_' + b]):>24}" for b in BASELINES
                                    if b in result.strategies))
    c = result.confirmed
    if c:
        lines.append(f"timed again in {c['rounds']} fresh rounds, each strategy's choice after "
                     f"K = {c['k']} on {len(c['programs'])} programs: speed-up over the "
                     "default, and over random search's choice")
        lines += [f"    {s:16} {_ci(c['speedup'][s]):>24} {_ci(c['over_random'][s]):>24}"
                  for s in result.strategies]
    return "\n".join(lines)


def _ci(v: Sequence[float]) -> str:
    return f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]"


def plot_search(result: SearchBenchResult, path: str | Path) -> Path:
    """Anytime curves: the geometric mean speed-up of the best config found against the
    executables timed, one line per strategy, over the headroom programs."""
    rows = [p for p in result.programs if p["headroom"] >= result.headroom]
    return plot_anytime({s: [p["curves"][s] for p in rows] for s in result.strategies}, path,
                        f"{result.table}: {len(rows)} programs with ≥ {result.headroom:.2f}x "
                        "headroom" + ("\nscored on the timing rounds it was not told"
                                      if result.cross_rounds else ""),
                        [p["optimum"] for p in rows])
