"""Leave-family-out cross-validation: what `graphcost crossval` runs.

A collection's fixed test split holds a few program families, so its mean τ says more
about those families than about the model. Here every graph of the collection (all its
splits pooled) is scored once, by a model trained without any graph of its family:
families are dealt into k folds of about equal graph count, and for each fold a model is
trained on the other folds' families and evaluated on the fold's. A seeded share of the
training families (`valid_fraction` of their graphs) is set aside for early stopping, so
neither the held-out families nor the validation ones are trained on.

With an external collection (`external`), there is one fold: a model trained on every
family of the collection (validation families carved as in a fold) scores every graph of
the external one, programs from outside the collection's zoo; the result has the same
form, so `compare` pairs models on it as on the folds.

Training is `train_model` and scoring `evaluate_model`, the paths of `graphcost train`
and `graphcost evaluate`; only the choice of files differs.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphcost.atomic import write_json
from graphcost.data.collection import Collection, open_collection
from graphcost.data.families import carve_families, family_folds, family_of, family_sizes
from graphcost.errors import UserError
from graphcost.eval.evaluate import evaluate_model
from graphcost.eval.metrics import summarize, why_undefined
from graphcost.models.model import Model
from graphcost.stats import MeanCI, mean_over
from graphcost.train.run import train_model
from graphcost.train.settings import TrainSettings


@dataclass
class Fold:
    """One fold's families (each list sorted) and the collection of its files."""

    index: int  # 1-based
    held_out: list[str]
    valid: list[str]
    train: list[str]
    collection: Collection  # splits train / valid (when any) / test = held out

    def count(self, split: str) -> int:
        return len(self.collection.splits.get(split, []))


def pooled_files(coll: Collection) -> dict[str, Path]:
    """Every file of every split, by graph name; a name in two splits is an error (its
    family could then be both trained on and held out)."""
    files: dict[str, Path] = {}
    for paths in coll.splits.values():
        for p in paths:
            if p.stem in files:
                raise UserError(f"graph {p.stem} is in two splits: {files[p.stem]} and {p}")
            files[p.stem] = p
    return files


GROUPS = ("family", "graph")


def plan_folds(coll: Collection, folds: int, seed: int = 0,
               valid_fraction: float = 0.15, group: str = "family") -> list[Fold]:
    """The k folds of a collection: families balanced by graph count, deterministic for a
    seed; each fold's validation families carved (seed + fold) from its training ones.

    `group='graph'` deals single graphs instead of families (each graph its own group),
    so every held-out graph has relatives in training: the seen-family figure that the
    leave-family-out one is measured against."""
    if group not in GROUPS:
        raise UserError(f"unknown fold grouping {group!r}; choose from {list(GROUPS)}")
    files = pooled_files(coll)
    group_of = family_of if group == "family" else str
    sizes = family_sizes(files) if group == "family" else {n: 1 for n in sorted(files)}
    groups = family_folds(sizes, folds, seed)
    plan = []

    def of(members: list[str]) -> list[Path]:
        chosen = set(members)
        return [p for n, p in files.items() if group_of(n) in chosen]

    for i, held in enumerate(groups, 1):
        rest = {f: n for f, n in sizes.items() if f not in held}
        valid = carve_families(rest, valid_fraction, seed + i)
        train = [f for f in rest if f not in valid]
        splits = {"train": of(train), "valid": of(valid), "test": of(held)}
        plan.append(Fold(i, held, valid, train, Collection(
            name=coll.name, root=coll.root, splits={s: f for s, f in splits.items() if f})))
    return plan


def external_fold(coll: Collection, external: Collection, seed: int = 0,
                  valid_fraction: float = 0.15) -> Fold:
    """One fold that trains on every family of `coll` (less the validation families
    carved from them) and holds out every graph of `external`, all its splits pooled."""
    if external.kind != coll.kind:
        raise UserError(f"{external.root} holds {external.kind} graphs, {coll.root} "
                        f"{coll.kind}: a model of one kind cannot score the other")
    files, held = pooled_files(coll), pooled_files(external)
    both = sorted(set(files) & set(held))
    if both:
        raise UserError(f"{len(both)} graphs of the external collection are in the training "
                        f"one too (e.g. {both[0]}): an external test set must be apart")
    sizes = family_sizes(files)
    valid = carve_families(sizes, valid_fraction, seed + 1)
    train = [f for f in sizes if f not in valid]
    splits = {"train": [p for n, p in files.items() if family_of(n) in train],
              "valid": [p for n, p in files.items() if family_of(n) in valid],
              "test": list(held.values())}
    return Fold(1, sorted(family_sizes(held)), valid, train, Collection(
        name=coll.name, root=coll.root, splits={s: f for s, f in splits.items() if f}))


def crossvalidate(data: str | Path, model: str = "ranker", folds: int = 5,
                  settings: TrainSettings | None = None,
                  model_settings: dict[str, Any] | None = None,
                  out_dir: str | Path | None = None, seed: int = 0,
                  valid_fraction: float = 0.15, group: str = "family",
                  external: str | Path | None = None,
                  log: Callable[[str], None] | None = None) -> dict:
    """Train and evaluate one model per fold; return per-fold and per-graph figures and
    the overall means with 95% intervals (every graph scored once, by its fold's model;
    each graph row keeps its scores, `pred`, in config order).

    Fold runs go to `out_dir/fold-<i>` (a temporary folder when None). `log` receives a
    line before and after each fold. Bad input (no collection, folds < 2, more folds than
    families, an unknown model or setting) raises UserError before any training.
    With `external` (another collection of the same kind), one model trained on all of
    `data` scores every graph of it instead (`external_fold`); `folds` is then 1.
    """
    say = log or (lambda _: None)
    coll = open_collection(data)
    kind = coll.kind
    Model(model, kind, **(model_settings or {}))  # refuse an unknown model or setting now
    s = settings or TrainSettings()
    s.check()
    if external is None:
        plan, scored = plan_folds(coll, folds, seed, valid_fraction, group), data
    else:
        ext = open_collection(external)
        plan, scored, folds, group = [external_fold(coll, ext, seed, valid_fraction)], \
            external, 1, "external"
    result: dict[str, Any] = {
        "collection": coll.name if external is None else f"{ext.name} at {ext.root}",
        "data": str(Path(scored).resolve()), "kind": kind,
        "trained_on": coll.name, "model": model, "model_settings": model_settings or {},
        "settings": dataclasses.asdict(s), "folds": folds, "seed": seed,
        "valid_fraction": valid_fraction, "group": group, "fold_results": [], "graphs": {},
        "skipped": []}
    with tempfile.TemporaryDirectory(prefix="graphcost-crossval-") as tmp:
        root = Path(out_dir) if out_dir is not None else Path(tmp)
        for fold in plan:
            say(format_fold_start(fold, folds, model))
            run_dir = root / f"fold-{fold.index}"
            m, trained = train_model(fold.collection, model, run_dir, s, model_settings,
                                     overwrite=True)  # a rerun replaces its folds
            report = evaluate_model(m, fold.collection, "test", chunk_size=s.chunk_size,
                                    device=s.device, keep_predictions=True)
            for name, row in report["graphs"].items():
                result["graphs"][name] = {"fold": fold.index, "family": family_of(name), **row}
            row = {"fold": fold.index, "held_out": fold.held_out, "valid": fold.valid,
                   "train": fold.train,
                   "graphs": {sp: fold.count(sp) for sp in ("train", "valid", "test")},
                   "scored": len(report["graphs"]),
                   "best_epoch": trained["best_epoch"], "best_by": trained["best_by"],
                   "best_score": trained["best_score"],  # NaN when chosen by train loss
                   "summary": report["summary"],
                   "run_dir": str(run_dir) if out_dir is not None else None}
            result["fold_results"].append(row)
            result["skipped"] += [str(e) for e in fold.collection.skipped]
            say(format_fold_result(row, folds, kind))
    result["overall"] = summarize(result["graphs"])
    if out_dir is not None:
        write_json(result, Path(out_dir) / "crossval.json")
    return result


def _figures(summary: dict, kind: str) -> str:
    """The collection's score as `graphcost evaluate` reports it: layout τ, tile score."""
    score = _mean(summary["score"])
    if kind == "tile":
        return f"tile score {score}  τ {_mean(summary['kendall_tau'])}"
    return f"τ {score}"


def _mean(ci: dict) -> str:
    """A mean with its interval and, when graphs were left out of it, over how many graphs
    it is and which were left out and why."""
    return MeanCI(**ci).noting()


def format_fold_start(fold: Fold, folds: int, model: str) -> str:
    """What a fold trains on, stops early on and holds out (graphs, families)."""
    families = len({family_of(p.stem) for p in fold.collection.splits["train"]})
    return (f"fold {fold.index}/{folds}: training {model} on {fold.count('train')} graphs "
            f"({families} families); early stopping on {fold.count('valid')} "
            f"({', '.join(fold.valid) or 'none: best train loss'}); holding out "
            f"{fold.count('test')} ({', '.join(fold.held_out)})")


def format_fold_result(row: dict, folds: int, kind: str) -> str:
    """A fold's held-out figures with their 95% intervals."""
    return (f"fold {row['fold']}/{folds}: {row['scored']} held-out graphs scored, "
            f"{_figures(row['summary'], kind)}  (best epoch {row['best_epoch']})")


def format_overall(result: dict) -> str:
    """The overall means with their 95% intervals (the fold lines come from `log`)."""
    kind, k = result["kind"], result["folds"]
    how = ("leave-family-out", "never saw its family")
    if result.get("group") == "graph":  # the held-out graph's family is in training
        how = ("leave-graph-out", "never saw the graph")
    if result.get("group") == "external":  # programs from outside the training zoo
        how = ("external", "never saw its programs")
    lines = [f"{result['collection']} {result['model']}, {k}-fold {how[0]}: "
             f"{len(result['graphs'])} graphs, each scored once by the model that "
             f"{how[1]}; mean [95% interval]:",
             f"  {_figures(result['overall'], kind)}",
             f"  OPA {_mean(result['overall']['opa'])}"]
    if result["skipped"]:
        lines.append(f"  {len(result['skipped'])} unreadable files skipped")
    return "\n".join(lines)


def seed_average(runs: list[dict], metric: str = "score") -> dict[str, float]:
    """Per graph, `metric` averaged over the runs (seeds) that scored it; NaN where it
    is undefined in every run (all runtimes equal), left out of means downstream."""
    values: dict[str, list[float]] = {}
    for run in runs:
        for name, row in run["graphs"].items():
            values.setdefault(name, []).append(float(row[metric]))
    return {name: float(np.mean(defined)) if (defined := [x for x in v if not np.isnan(x)])
            else np.nan for name, v in values.items()}


def run_label(run: dict) -> str:
    """The model and what was set away from its defaults (model settings, loss)."""
    extra = {**run.get("model_settings", {}),
             **({"loss": run["settings"]["loss"]} if run["settings"].get("loss") else {})}
    return " ".join([run["model"], *(f"{k}={v}" for k, v in extra.items())])


def read_results(paths: list[str | Path]) -> list[dict]:
    """Crossval result files (`crossval --json`), refused with the file named when one
    is not one."""
    out = []
    for p in paths:
        try:
            run = json.loads(Path(p).read_text())
            if not isinstance(run, dict):
                raise ValueError("not a JSON object")
            missing = {"collection", "model", "seed", "graphs", "settings"} - set(run)
            if missing:
                raise ValueError(f"no {', '.join(sorted(missing))} (not a crossval result)")
        except (OSError, ValueError) as e:
            raise UserError(f"{p}: {e}") from None
        out.append({**run, "file": str(p)})  # to name it when it cannot be paired
    return out


def protocol_of(run: dict) -> dict[str, Any]:
    """What two crossval results must share to be paired: the graphs, scored and held
    out the same way. Seeds, models and settings may differ: they are what is compared.
    A result older than `--group` was grouped by family; one older than `trained_on`
    does not say what it trained on, so that is not compared."""
    protocol = {key: run.get(key) for key in ("collection", "kind", "folds")}
    protocol["group"] = run.get("group", "family")
    if "trained_on" in run:
        protocol["trained_on"] = run["trained_on"]
    return protocol


def _file(run: dict) -> str:
    return run.get("file", f"the result of seed {run.get('seed')}")


def check_protocol(results: list[dict]) -> None:
    """Refuse results of different protocols (another grouping, number of folds,
    collection, external set, or set of graphs scored), naming both files and what
    differs: their difference would measure the protocol, not the models."""
    first = results[0]
    for r in results[1:]:
        a, b = protocol_of(first), protocol_of(r)
        for key in a.keys() & b.keys():
            if a[key] != b[key]:
                raise UserError(f"{_file(first)} and {_file(r)} differ in {key}: "
                                f"{a[key]!r} and {b[key]!r}; compare pairs results of one "
                                "crossval protocol")
        only = sorted(set(first["graphs"]) ^ set(r["graphs"]))
        if only:
            raise UserError(f"{_file(first)} and {_file(r)} differ in the graphs scored: "
                            f"{len(first['graphs'])} and {len(r['graphs'])}, {len(only)} scored "
                            f"by one only (e.g. {only[0]}); compare pairs results of one "
                            "crossval protocol")


def seed_ensemble(runs: list[dict]) -> dict:
    """The runs of one model (one per seed) as a single result: per graph, the mean of
    each seed's predictions as ranks (0 = predicted fastest, scaled to [0, 1]), scored
    again on the collection's runtimes. A seed ensemble costs no training beyond the
    seeds' own, so it is a fair opponent for a heuristic."""
    from scipy.stats import rankdata

    from graphcost.eval.metrics import graph_metrics
    from graphcost.formats.npz import read_graph

    check_protocol(runs)
    missing = [r["seed"] for r in runs if any("pred" not in g for g in r["graphs"].values())]
    if missing:
        raise UserError(f"the results of seeds {missing} keep no per-config predictions "
                        "(made by an older graphcost): run crossval again")
    coll = open_collection(runs[0]["data"])
    files = pooled_files(coll)
    rows = {}
    for name in sorted(set.intersection(*(set(r["graphs"]) for r in runs))):
        ranks = [(rankdata(r["graphs"][name]["pred"]) - 1) / max(len(r["graphs"][name]["pred"])
                                                                 - 1, 1) for r in runs]
        pred = np.mean(ranks, axis=0)
        target = np.asarray(read_graph(files[name]).target, dtype=np.float64)
        if target.shape != pred.shape:
            raise UserError(f"{name}: {pred.size} predictions for its {target.size} configs "
                            "(the results are of another version of the collection)")
        rows[name] = {**graph_metrics(coll.kind, pred, target), "pred": pred.tolist(),
                      "fold": runs[0]["graphs"][name].get("fold")}
    seeds = "+".join(str(r["seed"]) for r in runs)
    kept = ("collection", "trained_on", "data", "kind", "folds", "group", "settings")
    return {**{k: runs[0][k] for k in kept if k in runs[0]},
            "model": f"{run_label(runs[0])} ensemble", "model_settings": {}, "seed": seeds,
            "graphs": rows, "ensemble_of": [r["seed"] for r in runs],
            "file": " + ".join(_file(r) for r in runs)}


def compare_crossval(runs: list[dict], against: list[dict], metric: str = "score") -> dict:
    """Runs of one model (one JSON per seed) against runs of another on the same graphs:
    each side's per-graph mean over its seeds, both means and the paired difference
    runs − against over the graphs both scored, with bootstrap 95% intervals."""
    for side in (runs, against):
        if not side:
            raise UserError("compare needs at least one crossval result on each side")
    for name, side_runs in (("RUNS", runs), ("--against", against)):
        seeds = [r["seed"] for r in side_runs]
        if len(set(seeds)) < len(seeds):
            raise UserError(f"{name} holds two results of one seed ({seeds}): one file per "
                            "seed on each side, and --against before each of its files")
    check_protocol(runs + against)
    a, b = seed_average(runs, metric), seed_average(against, metric)
    common = sorted(set(a) & set(b))
    if not common:
        raise UserError("the two sides scored no graph in common")
    rows = {n: r["graphs"][n] for r in runs + against for n in common if n in r["graphs"]}

    def why(name: str) -> str:  # a graph with no value on a side: its metric is undefined
        return why_undefined(rows[name], metric)

    def side(results: list[dict], values: dict[str, float]) -> dict:
        return {"model": run_label(results[0]), "seeds": [r["seed"] for r in results],
                "mean": dataclasses.asdict(mean_over({n: values[n] for n in common}, why)),
                "per_seed": [float(np.nanmean([r["graphs"][n][metric] for n in common
                                               if n in r["graphs"]])) for r in results]}

    difference = mean_over({n: a[n] - b[n] for n in common}, why)
    return {"collection": runs[0]["collection"], "metric": metric, "graphs": len(common),
            "runs": side(runs, a), "against": side(against, b),
            "difference": dataclasses.asdict(difference)}


def best_heuristic(runs: list[dict], heuristics: list[dict], metric: str = "score") -> dict:
    """`compare_crossval` of `runs` with the best of several heuristic baselines (results
    of one heuristic, one per seed, are its seeds): the one of the highest mean over the
    graphs both scored. Choosing it on these graphs favours the heuristics, so a paired
    difference that still excludes 0 is one learning earned."""
    by_model: dict[str, list[dict]] = {}
    for h in heuristics:
        by_model.setdefault(run_label(h), []).append(h)
    comparisons = [compare_crossval(runs, side, metric) for side in by_model.values()]
    return max(comparisons, key=lambda c: c["against"]["mean"]["mean"])


def _side(s: dict) -> str:
    seeds = ", ".join(f"{v:.3f}" for v in s["per_seed"])
    return f"{s['model']:<12} {_mean(s['mean'])}  (seeds {s['seeds']}: {seeds})"


def _difference(c: dict) -> str:
    return (f"paired difference {c['runs']['model']} − {c['against']['model']}: "
            f"{_mean(c['difference'])}")


def format_comparison(c: dict) -> str:
    """Both sides' means and the paired difference, one line each; with the best
    heuristic (`c['heuristic']`, from `best_heuristic`), its mean and difference too."""
    lines = [f"{c['collection']}: {c['metric']} over {c['graphs']} graphs scored by both, "
             "mean over seeds per graph [95% interval]:",
             f"  {_side(c['runs'])}", f"  {_side(c['against'])}", f"  {_difference(c)}"]
    h = c.get("heuristic")
    if h is not None:
        lines += [f"best heuristic, over the {h['graphs']} graphs it and "
                  f"{c['runs']['model']} scored:", f"  {_side(h['against'])}",
                  f"  {_difference(h)}"]
    return "\n".join(lines)
