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

Held out source by source (`group='source'`, several collections of one name, each a
source of programs: the zoo, one library's programs), there is one fold per source: a
model trained on every other source scores every graph of it. That is the question a
user asks: does a model trained on others' code hold on mine?

Training is `train_model` and scoring `evaluate_model`, the paths of `graphcost train`
and `graphcost evaluate`; only the choice of files differs.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from graphcost import children
from graphcost.atomic import write_json
from graphcost.data.collection import Collection, open_collection
from graphcost.data.families import carve_families, family_folds, family_of, family_sizes
from graphcost.errors import UserError
from graphcost.eval.evaluate import evaluate_model
from graphcost.eval.metrics import summarize
from graphcost.models.model import Model
from graphcost.stats import MeanCI
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


GROUPS = ("family", "graph", "source")


def plan_folds(coll: Collection, folds: int, seed: int = 0,
               valid_fraction: float = 0.15, group: str = "family") -> list[Fold]:
    """The k folds of a collection: families balanced by graph count, deterministic for a
    seed; each fold's validation families carved (seed + fold) from its training ones.

    `group='graph'` deals single graphs instead of families (each graph its own group),
    so every held-out graph has relatives in training: the seen-family figure that the
    leave-family-out one is measured against."""
    if group not in GROUPS[:2]:
        raise UserError(f"unknown fold grouping {group!r} of one collection; choose from "
                        f"{list(GROUPS[:2])} (by source: several collections, `source_folds`)")
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


def source_files(sources: Mapping[str, Collection]) -> dict[str, dict[str, Path]]:
    """Each source's files by graph name (every split pooled). The sources must be one
    collection (same name) and share no family: a source held out would be trained on."""
    names = {s: c.name for s, c in sources.items()}
    if len(set(names.values())) > 1:
        raise UserError("the sources are not one collection: " + ", ".join(
            f"{s} holds {n} ({sources[s].root})" for s, n in names.items()))
    files = {s: pooled_files(c) for s, c in sources.items()}
    home: dict[str, str] = {}
    for s, named in files.items():
        for family in family_sizes(named):
            if family in home:
                raise UserError(f"family {family} is in two sources, {home[family]} and {s}: "
                                "a source held out would then be trained on")
            home[family] = s
    return files


def _fold(index: int, held: list[str], pool: dict[str, Path], test: list[Path],
          like: Collection, seed: int, valid_fraction: float,
          sources: dict[str, str]) -> Fold:
    """A fold training on the families of `pool` (validation families carved from them,
    seeded) and holding out `test`; `sources` names each pooled graph's source."""
    sizes = family_sizes(pool)
    valid = carve_families(sizes, valid_fraction, seed)
    train = [f for f in sizes if f not in valid]
    splits = {"train": [p for n, p in pool.items() if family_of(n) in train],
              "valid": [p for n, p in pool.items() if family_of(n) in valid], "test": test}
    return Fold(index, held, valid, train, Collection(
        name=like.name, root=like.root, splits={s: f for s, f in splits.items() if f},
        sources={n: sources[n] for n in pool}))


def source_folds(sources: Mapping[str, Collection], seed: int = 0,
                 valid_fraction: float = 0.15) -> list[Fold]:
    """One fold per source: train on every family of the other sources (less validation
    families carved from them, seed + fold), hold out every graph of the source."""
    if len(sources) < 2:
        raise UserError(f"holding out source by source needs at least two sources, got "
                        f"{len(sources)}: give several collections")
    files = source_files(sources)
    source_of = {n: s for s, named in files.items() for n in named}
    return [_fold(i, [held], {n: p for s, named in files.items() if s != held
                              for n, p in named.items()},
                  list(files[held].values()), coll, seed + i, valid_fraction, source_of)
            for i, (held, coll) in enumerate(sources.items(), 1)]


def pooled_sources(sources: Mapping[str, Collection], seed: int = 0,
                   valid_fraction: float = 0.15) -> Collection:
    """Every graph of every source in one collection to train on: families carved
    (seeded) for validation, the rest the train split. What a model that users get
    is trained on, after `source_folds` measured how such a model holds."""
    files = source_files(sources)
    pool = {n: p for named in files.values() for n, p in named.items()}
    source_of = {n: s for s, named in files.items() for n in named}
    return _fold(0, [], pool, [], next(iter(sources.values())), seed,
                 valid_fraction, source_of).collection


def scored_files(run: dict[str, Any]) -> dict[str, Path]:
    """Every file a crossval result scored, by graph name: its one collection, or with
    `data` a source → collection mapping (held out source by source), all of them."""
    data = run["data"]
    paths = data.values() if isinstance(data, dict) else [data]
    return {n: p for path in paths for n, p in pooled_files(open_collection(path)).items()}


def crossvalidate(data: str | Path | Mapping[str, str | Path], model: str = "ranker",
                  folds: int = 5, settings: TrainSettings | None = None,
                  model_settings: dict[str, Any] | None = None,
                  out_dir: str | Path | None = None, seed: int = 0,
                  valid_fraction: float = 0.15, group: str = "family",
                  external: str | Path | None = None,
                  log: Callable[[str], None] | None = None, jobs: int = 1,
                  valid_seed: int | None = None) -> dict:
    """Train and evaluate one model per fold; return per-fold and per-graph figures and
    the overall means with 95% intervals (every graph scored once, by its fold's model;
    each graph row keeps its scores, `pred`, in config order).

    Fold runs go to `out_dir/fold-<i>` (a temporary folder when None). `log` receives a
    line before and after each fold. Bad input (no collection, folds < 2, more folds than
    families, an unknown model or setting) raises UserError before any training.
    With `external` (another collection of the same kind), one model trained on all of
    `data` scores every graph of it instead (`external_fold`); `folds` is then 1.
    With `group='source'`, `data` maps source names to collections, one fold per source
    (`source_folds`); `folds` is then the number of sources.
    `jobs` > 1 trains that many folds at once, each in its own process with its share of
    the cores (`run_folds`): each fold trains as it would alone, only its threads differ,
    and the result lists the folds in order.
    `valid_seed` seeds the folds and their validation families in place of `seed`, so
    that runs of other seeds hold out the same families.
    """
    say = log or (lambda _: None)
    sources = None
    if group == "source":
        if not isinstance(data, Mapping) or external is not None:
            raise UserError("holding out source by source needs several collections, by "
                            "source name, and no external collection")
        sources = {name: open_collection(path) for name, path in data.items()}
        coll = next(iter(sources.values()))
    elif isinstance(data, Mapping):
        raise UserError(f"{len(data)} collections given: several are held out source by "
                        "source only (group 'source')")
    else:
        coll = open_collection(data)
    kind = coll.kind
    Model(model, kind, **(model_settings or {}))  # refuse an unknown model or setting now
    s = settings or TrainSettings()
    s.check()
    if jobs < 1:
        raise UserError(f"jobs must be at least 1 (folds trained at once), got {jobs}")
    scored: Any
    planned = seed if valid_seed is None else valid_seed
    if sources is not None:
        plan = source_folds(sources, planned, valid_fraction)
        folds, scored = len(plan), {n: str(c.root.resolve()) for n, c in sources.items()}
    elif external is None:
        plan = plan_folds(coll, folds, planned, valid_fraction, group)
        scored = str(Path(data).resolve())
    else:
        ext = open_collection(external)
        plan, scored, folds, group = [external_fold(coll, ext, planned, valid_fraction)], \
            str(Path(external).resolve()), 1, "external"
    result: dict[str, Any] = {
        "collection": coll.name if external is None else f"{ext.name} at {ext.root}",
        "data": scored, "kind": kind,
        "trained_on": coll.name, "model": model, "model_settings": model_settings or {},
        "settings": dataclasses.asdict(s), "folds": folds, "seed": seed,
        "valid_seed": planned,
        "valid_fraction": valid_fraction, "group": group, "fold_results": [], "graphs": {},
        "skipped": []}
    with tempfile.TemporaryDirectory(prefix="graphcost-crossval-") as tmp:
        root = Path(out_dir) if out_dir is not None else Path(tmp)
        dirs = {fold.index: root / f"fold-{fold.index}" for fold in plan}
        work = [(fold, model, dirs[fold.index], s, model_settings) for fold in plan]
        for fold, (report, trained) in run_folds(work, jobs, say):
            run_dir = dirs[fold.index]
            for name, row in report["graphs"].items():
                result["graphs"][name] = {"fold": fold.index, "family": family_of(name),
                                          **({"source": fold.held_out[0]} if sources else {}),
                                          **row}
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
    result["fold_results"].sort(key=lambda r: r["fold"])
    result["graphs"] = dict(sorted(result["graphs"].items(), key=lambda kv: kv[1]["fold"]))
    result["overall"] = summarize(result["graphs"])
    if out_dir is not None:
        write_json(result, Path(out_dir) / "crossval.json")
    return result


#: what `train_fold` takes for one fold: the fold, model, run folder and settings
FoldWork = tuple[Fold, str, Path, TrainSettings, dict[str, Any] | None]


def train_fold(fold: Fold, model: str, run_dir: Path, settings: TrainSettings,
               model_settings: dict[str, Any] | None, threads: int = 0
               ) -> tuple[dict[str, Any], dict[str, Any]]:
    """One fold's model trained in `run_dir` and its held-out graphs scored: the
    evaluation report (predictions kept) and the training summary. `threads` > 0 caps
    torch's threads, for a fold that shares the machine with others."""
    if threads:
        torch.set_num_threads(threads)
    m, trained = train_model(fold.collection, model, run_dir, settings, model_settings,
                             overwrite=True)  # a rerun replaces its folds
    report = evaluate_model(m, fold.collection, "test", chunk_size=settings.chunk_size,
                            device=settings.device, keep_predictions=True)
    return report, trained


def run_folds(work: list[FoldWork], jobs: int, say: Callable[[str], None]
              ) -> Iterator[tuple[Fold, tuple[dict[str, Any], dict[str, Any]]]]:
    """Each fold's `train_fold` result as it is done: one after another in this process,
    or `jobs` at a time in processes that die with this one, each with an equal share
    of this process's cores (the same training; only its threads differ)."""
    if jobs == 1:
        for fold, *args in work:
            say(format_fold_start(fold, len(work), args[0]))
            yield fold, train_fold(fold, *args)
        return
    jobs = min(jobs, len(work))
    threads = max(1, len(os.sched_getaffinity(0)) // jobs)
    with children.pool(jobs) as ex:
        running = {}
        for fold, *args in work:
            say(format_fold_start(fold, len(work), args[0]))
            running[ex.submit(train_fold, fold, *args, threads)] = fold
        try:
            for done in as_completed(running):
                yield running[done], done.result()
        except BaseException:
            ex.shutdown(wait=False, cancel_futures=True)  # start no further fold
            raise


def held_out_in(row: dict[str, Any]) -> dict[str, Any]:
    """Where a result's graph row was held out (its fold, family and, by source, source):
    what a result made from it (scored again, a seed ensemble) keeps."""
    return {k: row[k] for k in ("fold", "family", "source") if k in row}


#: settings that change how a trained model scores, not what it learned
SCORING_SETTINGS = ("correction", "ref_configs", "ref_sets")


def rescore(run: dict[str, Any], overrides: dict[str, Any],
            log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """`run` (a crossval result kept with `--out`) scored again: each fold's saved model,
    with scoring settings changed (`SCORING_SETTINGS`, e.g. the ranker's `correction`),
    scores its held-out graphs. No training: a sweep of such a setting costs one
    prediction per value, on exactly the models and folds of `run`."""
    say = log or (lambda _: None)
    wrong = sorted(set(overrides) - set(SCORING_SETTINGS))
    if wrong:
        raise UserError(f"rescore changes only how a trained model scores "
                        f"({', '.join(SCORING_SETTINGS)}), not {', '.join(wrong)}")
    files = scored_files(run)
    out = {**run, "model_settings": {**run["model_settings"], **overrides}, "graphs": {},
           "fold_results": [], "rescored_from": run.get("file")}
    out.pop("file", None)
    for fold in run["fold_results"]:
        if not fold.get("run_dir") or not (Path(fold["run_dir"]) / "model.pt").is_file():
            raise UserError(f"fold {fold['fold']} of {run.get('file', 'the result')} kept no "
                            "model (crossval without --out, or its folder was removed)")
        m = Model.load(Path(fold["run_dir"]) / "model.pt")
        m.settings = m.net.s = Model(m.name, m.kind, m.settings, **overrides).settings
        held = {n: row for n, row in run["graphs"].items() if row["fold"] == fold["fold"]}
        coll = Collection(name=run["trained_on"], root=Path(fold["run_dir"]),
                          splits={"test": [files[n] for n in sorted(held)]})
        report = evaluate_model(m, coll, "test", chunk_size=run["settings"]["chunk_size"],
                                keep_predictions=True)
        for name, row in report["graphs"].items():
            out["graphs"][name] = {**held_out_in(held[name]), **row}
        out["fold_results"].append({**fold, "summary": report["summary"]})
        say(f"fold {fold['fold']}: {len(held)} graphs scored again, "
            f"{_figures(report['summary'], run['kind'])}")
    out["overall"] = summarize(out["graphs"])
    return out


def _figures(summary: dict, kind: str) -> str:
    """The collection's score as `graphcost evaluate` reports it: layout τ, tile score."""
    score = mean_text(summary["score"])
    if kind == "tile":
        return f"tile score {score}  τ {mean_text(summary['kendall_tau'])}"
    return f"τ {score}"


def mean_text(ci: dict) -> str:
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
    if result.get("group") == "source":
        how = ("leave-source-out", "never saw its source")
    lines = [f"{result['collection']} {result['model']}, {k}-fold {how[0]}: "
             f"{len(result['graphs'])} graphs, each scored once by the model that "
             f"{how[1]}; mean [95% interval]:",
             f"  {_figures(result['overall'], kind)}",
             f"  OPA {mean_text(result['overall']['opa'])}"]
    for source, graphs in by_source(result["graphs"]).items():
        lines.append(f"  {source} ({len(graphs)} graphs): {_figures(summarize(graphs), kind)}")
    if result["skipped"]:
        lines.append(f"  {len(result['skipped'])} unreadable files skipped")
    return "\n".join(lines)


def by_source(graphs: dict[str, dict]) -> dict[str, dict[str, dict]]:
    """Graph rows of a result held out source by source, grouped by source (empty for
    any other result)."""
    out: dict[str, dict[str, dict]] = {}
    for name, row in graphs.items():
        if "source" in row:
            out.setdefault(row["source"], {})[name] = row
    return out
