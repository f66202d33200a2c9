"""`graphcost bench families`: leave-family-out autotuning, every family of a collection.

Each program of a measured collection (e.g. the bundled `options:cpu`) already has an
exhaustive pool: every one of its sampled configs was timed when the collection was
collected. Every program is tuned by a model that never saw its family (the folds of
`graphcost crossval`, one model per fold and seed), and each strategy picks from the
program's pool by the stored runtimes with the same measurement budget K:
- `pool`: the fastest config of the pool (exhaustive measurement);
- `model`: the fastest of the model's K best-scored configs;
- `portfolio`: the fastest of the K configs a rule that reads no program ranks first
  (options: `config-only`, a fixed ranking of option sets fitted to the training
  families; layout: the best layout heuristic, `fewest-changes`, `moved-bytes` or
  `changed-bytes`);
- `random`: the fastest of K configs drawn at random, as the exact expectation over
  every draw of its log speed-up (`expected_choice`);
- `default`: the compiler's choice.
The default is measured by every strategy and kept when nothing measured beats it.

The stored runtimes chose the winners, so they flatter them. With `confirm` the
programs are compiled again and every config a strategy can end on (the default, every
config measured faster than it, every model's and the portfolio's choice) is timed in
fresh interleaved rounds, with one more strategy:
- `search`: what `graphcost autotune` measures, the model's (first seed's) top K of
  `samples` fresh configs, most of them outside the pool; its choice (the fastest of
  them clearly faster than the default, else the default) is made in the first
  `SELECT_ROUNDS` rounds.
Every strategy that chooses ends on the fastest of its picks `clearly_faster` than the
default (by the stored rounds), else on the default, as `graphcost autotune` does.
Every headline figure comes from the rounds after those: each strategy's confirmed
speed-up over the default, random-K's as the expectation over draws of the log of each
draw's choice's confirmed speed-up (a geometric mean, as every other figure). A
program's *headroom* is the confirmed speed-up of the pool's best (the stored one
without `confirm`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from graphcost.autotune.choice import clearly_faster
from graphcost.autotune.headroom import STRATEGIES, summarize_rows
from graphcost.autotune.search import best_of, top_picks
from graphcost.autotune.space import SAMPLES
from graphcost.bench import BenchResult, default_index
from graphcost.data.collection import open_collection
from graphcost.data.families import family_of
from graphcost.errors import UserError
from graphcost.eval.crossval import pooled_files
from graphcost.eval.folds import fold_model, fold_runs
from graphcost.formats.npz import LayoutGraph, read_extra, read_graph
from graphcost.kinds import space_of
from graphcost.models.registry import portfolio_rules
from graphcost.stats import draw_weights
from graphcost.train.settings import TrainSettings
from graphcost.xla.timing import Protocol

SELECT_ROUNDS = 2  # confirmation rounds that choose among the search's fresh picks


def expected_choice(runtime: np.ndarray, default: int, k: int,
                    value: np.ndarray | None = None,
                    clear: Sequence[int] | None = None) -> float:
    """E[value of the config random search with K draws ends on]: each draw of K pool
    configs (the default excluded) keeps its fastest by `runtime` of those it may choose
    (`clear`; default: those faster than the default), or the default when it drew none;
    `value` (default: `runtime`) is what is averaged, e.g. the same configs' confirmed
    runtimes; each draw weighed by `stats.draw_weights`."""
    value = runtime if value is None else value
    others = [i for i in range(len(runtime)) if i != default and np.isfinite(runtime[i])]
    may = set(clear) if clear is not None else {i for i in others
                                                 if runtime[i] < runtime[default]}
    # what a draw may choose first, fastest first: a draw whose first is not choosable
    # holds nothing choosable and ends on the default
    others.sort(key=lambda i: (i not in may, runtime[i], i))
    n, k = len(others), min(k, len(others))
    if k < 1:
        return float(value[default])
    ends = [value[i] if i in may else value[default] for i in others]
    return float(draw_weights(n, k) @ np.asarray(ends, dtype=np.float64))


def program_row(name: str, g: Any, preds: list[list[float]], portfolio: list[float],
                k: int, rounds: np.ndarray | None = None) -> dict[str, Any]:
    """One program's picks and stored speed-ups over the default (model: per seed).

    A strategy ends on the fastest of its picks that was stored `clearly_faster` than
    the default (by its stored `rounds`, one per config; the runtime alone without
    them), else on the default, as `graphcost autotune` chooses. The pool's best is the
    fastest stored config (the program's headroom); `model_fastest` is the model's
    choice without the noise rule, kept to show what the rule changes."""
    rt = np.asarray(g.config_runtime, dtype=np.float64)
    for p in [*preds, portfolio]:
        if len(p) != len(rt):
            raise UserError(f"{name}: {len(p)} predictions for its {len(rt)} configs (the "
                            "fold results are of another version of the collection)")
    d = default_index(g)
    rt_ = np.where(np.isfinite(rt), rt, np.nan)
    per_round = rt_[:, None] if rounds is None else np.asarray(rounds, dtype=np.float64)
    clear = [i for i in range(len(rt)) if i != d and clearly_faster(per_round[d], per_round[i])]

    def chosen(picks: Sequence[int], rule: bool = True) -> int:
        return best_of([i for i in picks if not rule or i in clear], rt_, default=d)

    choice = {"pool": chosen(range(len(rt)), rule=False), "default": d,
              "portfolio": chosen(top_picks(portfolio, d, k)),
              "model": [chosen(top_picks(p, d, k)) for p in preds],
              "model_fastest": [chosen(top_picks(p, d, k), rule=False) for p in preds]}
    speed = {s: float(rt[d] / rt[choice[s]]) for s in ("pool", "portfolio", "default")}
    for s in ("model", "model_fastest"):
        speed[s] = float(np.exp(np.mean([np.log(rt[d] / rt[i]) for i in choice[s]])))
    speed["random"] = float(np.exp(expected_choice(rt_, d, k, np.log(rt[d] / rt_), clear)))
    return {"program": name, "family": family_of(name), "configs": int(len(rt)),
            "default": d, "runtime_ns": [float(x) for x in rt], "clear": clear,
            "choice": choice, "stored": speed, "pool_config": describe(g, choice["pool"])}


def describe(g: Any, i: int) -> str:
    """Config `i` in words: the option knobs it sets, or how many layouts it moves."""
    if isinstance(g, LayoutGraph):
        moved = int((np.asarray(g.node_config_feat[i]) != -1).any(axis=1).sum())
        return f"{moved} of {g.node_config_feat.shape[1]} configurable nodes' layouts set"
    from graphcost.xla.options import OptionConfig

    return str(OptionConfig.from_features(g.config_feat[i]))


def stored_rows(data: str | Path, model_runs: list[dict], portfolio_run: dict,
                k: int) -> list[dict[str, Any]]:
    """Every program both sides scored, picked from its stored pool."""
    files = pooled_files(open_collection(data))
    rows = []
    for name in sorted(files):
        if name not in portfolio_run["graphs"] or any(name not in r["graphs"]
                                                       for r in model_runs):
            continue
        g = read_graph(files[name])
        rounds = read_extra(files[name]).get("config_runtime_rounds")
        rows.append(program_row(name, g, [r["graphs"][name]["pred"] for r in model_runs],
                                portfolio_run["graphs"][name]["pred"], k, rounds))
    return rows


def stored_configs(t: Any, g: Any, coll_kind: str, seed: int, distinct: int) -> list[Any]:
    """The configs of a program's stored pool, in row order, as `t.configs` takes them:
    option knob codes read back into choices; layout plans sampled again exactly as the
    collection sampled them (`config_rng`) and matched to the stored rows by features."""
    if t.configs.kind == "options":
        from graphcost.xla.options import OptionConfig

        out = []
        for row in np.asarray(g.config_feat):
            try:
                out.append(OptionConfig.from_features(row, t.configs.knobs).choices)
            except ValueError:
                raise UserError(f"{g.name}: a stored config has a knob code this graphcost "
                                "does not know (collected with other option knobs)") from None
        return out
    from graphcost.xla.configs import sample_layout_plans
    from graphcost.xla.prepare import ATTEMPTS_PER_DISTINCT, config_rng

    mode = coll_kind.rpartition(":")[2]
    plans = sample_layout_plans(t.layout, distinct * ATTEMPTS_PER_DISTINCT, mode,
                                config_rng(t.name, mode, seed))
    by_feat = {t.configs.encode([p])[0].tobytes(): p for p in plans}
    stored = np.asarray(g.node_config_feat, dtype=np.float32)
    if stored.shape[1] != len(t.configs.points):
        raise UserError(f"{g.name}: {stored.shape[1]} configurable nodes stored, "
                        f"{len(t.configs.points)} found now (compiled by another XLA?)")
    out = [by_feat.get(row.tobytes()) for row in stored]
    if any(p is None for p in out):
        raise UserError(f"{g.name}: {sum(p is None for p in out)} stored layouts could not "
                        "be sampled again (collected with another seed or graphcost)")
    return out


def confirm_set(row: dict[str, Any]) -> list[int]:
    """Rows any strategy can end on: the default first, every config stored faster than
    it (random search's possible choices) and each strategy's choice."""
    rt, d = np.asarray(row["runtime_ns"]), row["default"]
    c = row["choice"]
    faster = [int(i) for i in np.flatnonzero(rt < rt[d])]
    return list(dict.fromkeys([d, c["pool"], c["portfolio"], *c["model"],
                               *c["model_fastest"], *faster]))


def search_picks(t: Any, model: Any, k: int, samples: int, evaluations: int,
                 seed: int) -> list[Any]:
    """The K configs `graphcost autotune` would measure for the program: the model's best
    of `samples` fresh configs (searched further when `evaluations` > `samples`), the
    default excluded."""
    from graphcost.autotune.costmodel import CostModel
    from graphcost.autotune.search import search
    from graphcost.xla.prepare import config_rng

    rng = config_rng(t.name, "search", seed)
    initial = t.configs.sample(samples, rng)
    res = search(t.configs, CostModel(model, t, initial).scorer(), initial, rng,
                 evaluations=evaluations)
    default = t.configs.key(t.configs.default())
    return [res.configs[j] for j in res.order() if t.configs.key(res.configs[j]) != default][:k]


def learn_choice(t: Any, model: Any, configs: list[Any], runtime: np.ndarray, default: int,
                 k: int, clear: Sequence[int], batches: int = 2) -> int:
    """Learning while measuring on the stored pool (`bench pool`'s `learn`): K configs in
    `batches` batches, the model fine-tuned on each batch's stored runtimes (and the
    default's) before it picks the next; the fastest of them that is in `clear`
    (stored clearly faster than the default), or the default."""
    from graphcost.autotune.costmodel import CostModel, learn_picks

    rt = np.where(np.isfinite(runtime), runtime, np.nan)
    picks = learn_picks(CostModel(model, t, configs), configs, rt, k, batches, default)
    return best_of([i for i in picks if i in set(clear)], rt, default=default)


def confirm_row(row: dict[str, Any], g: Any, coll_kind: str, seed: int, distinct: int,
                protocol: Protocol, core: int | None, k: int, model: Any = None,
                samples: int = SAMPLES, evaluations: int = SAMPLES,
                select_rounds: int = SELECT_ROUNDS) -> dict[str, Any]:
    """Time the row's `confirm_set` again in fresh interleaved rounds, with `model`'s
    `search_picks` when a model is given (the `search` strategy: configs beyond the
    pool). The search's choice is the fastest of its picks clearly faster than the
    default in the first `select_rounds` rounds, else the default; every figure comes
    from the rounds after those: each strategy's confirmed speed-up over the default (the
    geometric mean over rounds, with its 95% interval for the model's choices)."""
    from graphcost.autotune.measure import measure
    from graphcost.autotune.program import prepare
    from graphcost.stats import ratio_interval
    from graphcost.xla.programs import make_program

    family, _, index = row["program"].rpartition(".")
    name, fn, args = make_program(family, int(index))
    t = prepare(name, fn, args, space_of(g.kind))
    configs = stored_configs(t, g, coll_kind, seed, distinct)
    ids = confirm_set(row)
    key = t.configs.key
    picks = search_picks(t, model, k, samples, evaluations, seed) if model is not None else []
    timed = list(dict.fromkeys([key(configs[i]) for i in ids] + [key(x) for x in picks]))
    by_key = {key(x): x for x in [*configs, *picks]}
    results = dict(zip(timed, measure(t, [by_key[x] for x in timed], protocol, core),
                       strict=True))
    failed = [i for i in ids if not results[key(configs[i])].ok]
    if failed:
        raise RuntimeError(f"{name}: stored configs {failed} failed when timed again")
    d = row["default"]
    base = np.asarray(results[key(configs[d])].rounds_ns)

    def confirmed(x: Any) -> tuple[float, float, float]:
        return ratio_interval(base[select_rounds:],
                              np.asarray(results[x].rounds_ns)[select_rounds:])

    speed = {i: confirmed(key(configs[i])) for i in ids}
    c = row["choice"]
    rt = np.asarray(row["runtime_ns"], dtype=np.float64)
    log_speed = np.zeros(len(rt))
    for i in ids:
        log_speed[i] = math.log(speed[i][0])
    out = {s: speed[c[s]][0] for s in ("pool", "portfolio", "default")}
    for s in ("model", "model_fastest"):
        out[s] = float(np.exp(np.mean([log_speed[i] for i in c[s]])))
    out["random"] = float(np.exp(expected_choice(rt, d, k, log_speed, row["clear"])))
    extra: dict[str, Any] = {"confirmed_speed": {str(i): list(v) for i, v in speed.items()},
                             "model_fastest_ci": [list(speed[i]) for i in c["model_fastest"]]}
    if model is not None:
        choice = learn_choice(t, model, configs, rt, d, k, row["clear"])  # in `ids`
        out["learn"] = speed[choice][0]
        extra["learn_choice"] = choice
    if model is not None:  # chosen by the selection rounds, reported on the others
        def selected(x: Any) -> float:
            return float(np.exp(np.mean(np.log(results[x].rounds_ns[:select_rounds]))))

        base_select = results[key(configs[d])].rounds_ns[:select_rounds]
        ok = [key(x) for x in picks if results[key(x)].ok
              and clearly_faster(base_select, results[key(x)].rounds_ns[:select_rounds])]
        best = min(ok, key=selected, default=None)  # as `autotune.choose` chooses
        out["search"] = confirmed(best)[0] if best is not None else 1.0
        kept = ("layouts", "compiler_options")  # each pick as chosen.json holds it
        extra |= {"search_configs": [{k: v for k, v in t.config_json(x).items() if k in kept}
                                     for x in picks],
                 "search_budget": [samples, evaluations],
                 "search_failed": len(picks) - len(ok)}
    return {**row, "confirmed": out, "confirm_rounds": protocol.rounds,
            "select_rounds": select_rounds, "model_ci": [list(speed[i]) for i in c["model"]],
            "confirmed_configs": len(timed), **extra}


def _manifest_spec(root: Path) -> dict[str, Any]:
    """How the collection was sampled (seed, configs per program), which re-creating its
    layout plans needs; the bundled defaults when the manifest is missing."""
    path = Path(root).parent / "manifest.json" if not (Path(root) / "manifest.json").exists() \
        else Path(root) / "manifest.json"
    try:
        spec = json.loads(path.read_text()).get("spec", {})
    except (OSError, ValueError):
        spec = {}
    return {"seed": int(spec.get("seed", 0)), "num_configs": int(spec.get("num_configs", 24))}


@dataclasses.dataclass
class FamiliesResult(BenchResult):
    """`bench families`' table: every program's row (stored picks, confirmed speed-ups with
    `confirm`), their summary per family and headroom, and how they were made."""

    collection: str
    data: str  # the collection's folder, resolved
    model: str
    seeds: list[int]
    k: int
    folds: int
    portfolio: str  # the rule that reads no program, best of `portfolio_rules`
    protocol: dict[str, Any] | None  # the confirmation's timing protocol; None: stored only
    core: int | None
    rows: list[dict[str, Any]]  # `program_row`s, `confirm_row`s with `confirm`
    samples: int  # the search strategy's fresh configs
    evaluations: int
    summary: dict[str, Any]  # `headroom.summarize_rows`


def bench_families(data: str | Path, out: str | Path, model: str = "ranker",
                   seeds: Sequence[int] = (0, 1, 2), k: int = 5, folds: int = 5,
                   settings: TrainSettings | None = None,
                   model_settings: dict[str, Any] | None = None, families: Sequence[str] = (),
                   confirm: bool = False, search: bool = True, samples: int | None = None,
                   evaluations: int | None = None,
                   protocol: Protocol | None = None,
                   core: int | None = None,
                   log: Callable[[str], Any] | None = None) -> FamiliesResult:
    """The leave-family-out autotuning table of one collection (see the module
    docstring). Fold models and confirmed rows are kept under `out`, so an interrupted
    run resumes where it stopped."""
    say = log or (lambda _msg: None)
    samples = samples or SAMPLES
    evaluations = evaluations or samples
    if k < 1 or not seeds:
        raise UserError(f"need k >= 1 and at least one seed, got k={k}, seeds={list(seeds)}")
    coll = open_collection(data)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    s = settings or TrainSettings()
    model_runs = fold_runs(data, model, seeds, out, s, folds, say, model_settings)
    candidates = [fold_runs(data, name, [0], out, s, folds, say)[0]
                  for name in portfolio_rules(coll.kind)]
    portfolio = max(candidates, key=lambda r: np.nanmean([g["score"] for g in
                                                          r["graphs"].values()]))
    rows = stored_rows(data, model_runs, portfolio, k)
    unknown = sorted(set(families) - {r["family"] for r in rows})
    if unknown:
        raise UserError(f"no program of {', '.join(unknown)} in {coll.name}")
    if families:
        rows = [r for r in rows if r["family"] in set(families)]
    protocol = protocol or Protocol(rounds=6)
    if confirm:
        if protocol.rounds < SELECT_ROUNDS + 2:
            raise UserError(f"--confirm-rounds must be at least {SELECT_ROUNDS + 2}: the "
                            f"search's choice is made in {SELECT_ROUNDS} rounds and an "
                            "interval needs two more")
        rows = confirm_rows(rows, coll, out, protocol, core, k, say,
                            fold_model(model_runs[0]) if search else None, samples,
                            evaluations)
    return FamiliesResult(collection=coll.name, data=str(Path(data).resolve()), model=model,
                          seeds=list(seeds), k=k, folds=folds, portfolio=portfolio["model"],
                          protocol=dataclasses.asdict(protocol) if confirm else None,
                          core=core, rows=rows, samples=samples, evaluations=evaluations,
                          summary=summarize_rows(rows))


def confirm_rows(rows: list[dict[str, Any]], coll: Any, out: Path, protocol: Protocol,
                 core: int | None, k: int, say: Callable[[str], Any],
                 model: Callable[[str], Any] | None = None, samples: int = SAMPLES,
                 evaluations: int = SAMPLES) -> list[dict[str, Any]]:
    """`confirm_row` for every row (with `model(program)`'s search picks when given);
    `out/confirmed.json` is rewritten (atomically) after each program, and a program
    already there is reused when it was timed the same way (k, protocol, core, search
    budget) for the same choices: a crash loses one program at most."""
    from graphcost.atomic import write_json

    log_path = out / "confirmed.json"
    done: dict[str, dict[str, Any]] = {}
    if log_path.exists():
        try:
            done = json.loads(log_path.read_text())
        except ValueError:
            raise UserError(f"{log_path} is not JSON; delete it to time every program "
                            "again") from None
    files = pooled_files(coll)
    manifest = _manifest_spec(coll.root)
    confirmed = []
    for n, row in enumerate(rows, 1):
        prior = done.get(row["program"])
        spec = {"k": k, "protocol": dataclasses.asdict(protocol), "core": core,
                "search_budget": [samples, evaluations] if model is not None else None,
                "strategies": list(STRATEGIES) + (["learn", "search"] if model else [])}
        if prior and prior["choice"] == row["choice"] and prior.get("confirm_spec") == spec:
            confirmed.append(prior)
            continue
        g = read_graph(files[row["program"]])
        r = confirm_row(row, g, coll.name, manifest["seed"], manifest["num_configs"], protocol,
                        core, k,
                        model(row["program"]) if model else None, samples, evaluations)
        r["confirm_spec"] = spec  # what a rerun must ask for to reuse this row
        done[r["program"]] = r
        write_json(done, log_path)
        confirmed.append(r)
        c = r["confirmed"]
        say(f"[{n}/{len(rows)}] {r['program']:22} confirmed vs default: pool "
            f"{c['pool']:.3f}x model {c['model']:.3f}x portfolio {c['portfolio']:.3f}x "
            f"random-{k} {c['random']:.3f}x"
            + (f" search {c['search']:.3f}x" if "search" in c else "")
            + f" ({r['confirmed_configs']} configs timed)")
    return confirmed
