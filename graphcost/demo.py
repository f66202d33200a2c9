"""The main job: train, evaluate and report, from the bundled dataset to a page of pictures.

`run_demo` trains the default ranker and the official-equivalent baseline on every
bundled collection, fits the heuristic baselines (what needs no learning) and keeps the
best of them by validation score, evaluates the three on the test split with 95%
intervals beside the collection's measured noise ceiling, and writes a report. `report_run` does the
evaluation and report for any single training run. Like the CLI, this module sits
above the layers and may call all of them.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphcost.atomic import write_json
from graphcost.data.collection import Collection, find_collections, open_collection
from graphcost.data.inspect import sample_collections, sample_root
from graphcost.data.noise import noise_ceiling as split_noise_ceiling
from graphcost.errors import CollectionError, UserError
from graphcost.eval.evaluate import evaluate_model
from graphcost.eval.report import (
    RunResult,
    format_table,
    read_history,
    read_run_data,
    summary_rows,
    write_report,
)
from graphcost.models.model import Model
from graphcost.models.registry import model_names, official_baseline
from graphcost.models.scorer import score_graph
from graphcost.stats import MeanCI
from graphcost.train import TrainSettings, train_model
from graphcost.train.settings import train_defaults

# the bundled collections in the order the demo trains them; others found are added after
PREFERRED = ("layout:cpu:random", "layout:cpu:default", "options:cpu")


@dataclass
class DemoSettings:
    epochs: int = 12
    patience: int = 4
    configs_per_graph: int = 16
    graphs_per_batch: int = 8
    scatter_graphs: int = 3
    seed: int = 0
    quick: bool = False  # a smoke run: two epochs on the first collection only

    def train_settings(self, model: str = "ranker") -> TrainSettings:
        """The ranker's demo settings; a baseline trains with its official recipe (its
        `graphcost train` defaults), so the demo's baseline row is the baseline's."""
        if model != "ranker":
            s = dataclasses.replace(train_defaults(model), seed=self.seed)
            return dataclasses.replace(s, epochs=2) if self.quick else s
        return TrainSettings(epochs=2 if self.quick else self.epochs, patience=self.patience,
                             configs_per_graph=self.configs_per_graph,
                             graphs_per_batch=self.graphs_per_batch, seed=self.seed)


def fit_collection(settings: TrainSettings, coll: Collection,
                   log: Callable[[str], None]) -> TrainSettings:
    """The settings, or with min_configs=0 when they would drop every train graph (a
    collection with fewer configs per graph than the official recipe samples), said."""
    if settings.min_configs >= 0:
        return settings
    most = max((g.num_configs for g in coll.graphs("train", lazy=True)), default=0)
    if most >= settings.configs_per_graph:
        return settings
    log(f"   (min_configs=0: no train graph has the {settings.configs_per_graph} configs the "
        "official recipe samples, which would drop them all)")
    return dataclasses.replace(settings, min_configs=0)


def noise_ceiling(coll: Collection, split: str = "test") -> float | None:
    """The split's measured repeatability τ (graphcost.data.noise), or the collection's
    from its manifest when the files do not keep their timing rounds."""
    measured = split_noise_ceiling(coll.splits.get(split, []))
    if measured is not None:
        return measured[0]
    manifest = coll.root / "manifest.json"
    if manifest.exists():
        return json.loads(manifest.read_text()).get("noise_ceiling_tau")
    return None


def fit_heuristics(coll: Collection, folder: Path, s: DemoSettings,
                   log: Callable[[str], None]) -> str | None:
    """Fit every heuristic baseline of the collection's kind into `folder/<name>` and
    return the best by validation score (chosen as a trained model's epoch is, never on
    the test split); one that refuses the collection (default-first on tile data with
    no default config) is said and left out. None when all refuse. Without validation
    graphs none can be chosen: the first is kept, and that is said."""
    best, best_score, unvalidated = None, -np.inf, None
    for name in model_names(coll.kind, learned=False):
        try:
            _, result = train_model(coll.root, name, folder / name, s.train_settings(name),
                                    overwrite=True)
        except UserError as e:
            log(f"   ({name} left out: {e})")
            continue
        unvalidated = result["no_validation"]
        score = result["best_score"] if np.isfinite(result["best_score"]) else -np.inf
        if best is None or score > best_score:
            best, best_score = name, score
    if best is not None and unvalidated:
        log(f"   ({unvalidated}: no validation score to choose a heuristic by; {best} is "
            "kept as the first that fitted)")
    return best


def demo_collections(root: Path, quick: bool) -> list[Collection]:
    """The collections below `root` the demo can train and test on (train/ and test/
    splits), the bundled ones first; refuses a folder with none, saying what it found."""
    found = find_collections(root)
    names = [n for n in PREFERRED if n in found] + sorted(set(found) - set(PREFERRED))
    usable = [found[n] for n in names if {"train", "test"} <= set(found[n].splits)]
    if not usable:
        seen = "; ".join(f"{n} with only {', '.join(f'{s}/' for s in sorted(found[n].splits))}"
                         for n in names) or "no .npz files at all"
        raise CollectionError(
            f"{root}: no collection to demo: expected one or more collection folders "
            "(such as the bundled layout:cpu:random, layout:cpu:default, options:cpu) "
            f"with train/ and test/ subfolders of .npz files; found {seen}")
    return usable[:1] if quick else usable


def scatter_samples(model: Model, coll: Collection, split: str, count: int) -> dict:
    """Predictions and runtimes of the first `count` graphs of a split, for scatter plots."""
    out = {}
    for g in coll.graphs(split):
        if len(out) >= count:
            break
        out[g.name] = {"runtime": np.asarray(g.target, float).tolist(),
                       "pred": score_graph(model, g).astype(float).tolist()}
    return out


def evaluate_run(run_dir: Path, data: Path, split: str, scatter_graphs: int = 3) -> RunResult:
    """Evaluate a run's saved model; writes `evaluation_<split>.json` into the run."""
    history = read_history(run_dir)  # a damaged one is refused before the evaluation
    model_path = run_dir / "model.pt" if (run_dir / "model.pt").exists() else run_dir / "best.pt"
    model = Model.load(model_path)
    coll = open_collection(data)
    evaluation = evaluate_model(model, data, split)
    samples = scatter_samples(model, coll, split, scatter_graphs)
    write_json(dict(evaluation, samples=samples), run_dir / f"evaluation_{split}.json")
    return RunResult(collection=coll.name, model=model.name, run_dir=run_dir,
                     evaluation=evaluation, history=history, samples=samples)


def run_demo(out_dir: str | Path = "runs/demo", data: str | Path | None = None,
             settings: DemoSettings | None = None,
             log: Callable[[str], None] = print) -> tuple[list[RunResult], Path]:
    """Train ranker and baseline per collection, evaluate on test, write the report."""
    s = settings or DemoSettings()
    out = Path(out_dir)
    root = Path(data) if data is not None else sample_collections()
    t0 = time.perf_counter()
    results, noise = [], {}
    for coll in demo_collections(root, s.quick):
        noise[coll.name] = noise_ceiling(coll)
        folder = out / "runs" / coll.name.replace(":", "_")
        for name in ("ranker", official_baseline(coll.kind)):
            run = folder / name
            log(f"== {coll.name}: training {name} "
                f"({len(coll.files('train'))} train graphs) -> {run}")
            train_model(coll.root, name, run, fit_collection(s.train_settings(name), coll, log),
                        overwrite=True)  # a rerun of the demo replaces its runs
            results.append(evaluate_run(run, coll.root, "test", s.scatter_graphs))
        log(f"== {coll.name}: fitting the heuristic baselines -> {folder}")
        heuristic = fit_heuristics(coll, folder, s, log)
        if heuristic is not None:
            results.append(evaluate_run(folder / heuristic, coll.root, "test",
                                        s.scatter_graphs))
    seconds = time.perf_counter() - t0
    rows_note = (f"Bundled dataset at {root}; test split; {seconds:.0f} s on this machine. "
                 "Kendall τ between predicted scores and measured runtimes, mean over graphs "
                 "with a bootstrap 95% interval; the noise ceiling is the test graphs' mean τ "
                 "between two timing rounds of the same executables. The third row of a "
                 "collection is the heuristic baseline (no learning) with the best "
                 "validation score.")
    page = write_report(results, out / "report", "graphcost demo", noise, rows_note)
    log(format_table(summary_rows(results, noise)))
    log(paired_lines(results))
    if data is None:
        log(crossval_summary(sample_root() / "crossval.json"))
    log(f"demo finished in {seconds:.0f} s; report: {page}")
    return results, page


def paired_lines(results: list[RunResult]) -> str:
    """Per collection, the ranker's score minus each other model's, paired over the test
    graphs both scored (bootstrap 95% interval): the ranker against the official
    baseline and against the best heuristic, on the same graphs."""
    from graphcost.eval.metrics import why_undefined
    from graphcost.stats import mean_over

    lines = ["Paired over the test graphs (score of the ranker − score of the other model, "
             "mean [95% interval]):"]
    for coll in dict.fromkeys(r.collection for r in results):
        runs = [r for r in results if r.collection == coll]
        ranker = next((r for r in runs if r.model == "ranker"), None)
        if ranker is None:
            continue
        for other in (r for r in runs if r is not ranker):
            mine, theirs = ranker.evaluation["graphs"], other.evaluation["graphs"]
            diff = mean_over({n: mine[n]["score"] - theirs[n]["score"]
                              for n in sorted(set(mine) & set(theirs))},
                             lambda n, rows=mine: why_undefined(rows[n], "score"))
            lines.append(f"  {coll:22} ranker − {other.model:14} {diff.noting('  ')}")
    return "\n".join(lines)


def crossval_summary(path: Path) -> str:
    """The stored leave-family-out comparisons of the ranker with the official baselines
    and with the best heuristic baseline on the bundled collections (what the test split
    above cannot show: programs of families never trained on), with the commands that
    reproduce them."""
    stored = json.loads(path.read_text())
    lines = [f"On programs of families never trained on ({stored['what']}; measured at "
             f"{stored['commit']}, see {stored['details']}):"]
    lines += [_comparison_line(c) for c in stored["comparisons"]]
    lines += [f"  reproduce: {cmd}" for cmd in stored["commands"]]
    heuristics = stored.get("heuristics")
    if heuristics:
        lines.append(f"Against what needs no learning ({heuristics['what']}; measured at "
                     f"{heuristics['commit']}):")
        lines += [_comparison_line(c) for c in heuristics["comparisons"]]
        lines += [f"  reproduce: {cmd}" for cmd in heuristics["commands"]]
    return "\n".join(lines)


def _comparison_line(c: dict) -> str:
    d = MeanCI(**c["difference"])
    return (f"  {c['collection']:<20} {c['runs']['model']} {c['runs']['mean']['mean']:.3f} vs "
            f"{c['against']['model']} {c['against']['mean']['mean']:.3f}: difference "
            f"{d.mean:+.3f} [{d.lo:+.3f}, {d.hi:+.3f}] {d.over()}")


def report_run(run_dir: str | Path, out_dir: str | Path | None = None,
               data: str | Path | None = None, split: str = "test") -> Path:
    """Evaluate one training run and write its report (default: RUN_DIR/report)."""
    run = Path(run_dir)
    if data is None:
        data = read_run_data(run)
    coll = open_collection(data)
    if split not in coll.splits:
        split = "valid" if "valid" in coll.splits else next(iter(coll.splits))
    result = evaluate_run(run, Path(data), split)
    return write_report([result], out_dir or run / "report", f"graphcost report: {run}",
                        {coll.name: noise_ceiling(coll)})
