"""Evaluate a model on a split: per-graph metrics and means with 95% intervals."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from graphcost.data.collection import Collection, open_collection
from graphcost.data.dedup import duplicates
from graphcost.errors import CollectionError, UserError
from graphcost.eval.metrics import evaluate_graphs
from graphcost.formats import GraphFileError, read_graph
from graphcost.models.model import Model, as_model
from graphcost.models.scorer import score_graph
from graphcost.stats import MeanCI

log = logging.getLogger("graphcost")


def evaluate_model(model: Model | str | Path, data: str | Path | Collection,
                   split: str | None = None, max_configs: int = 0, chunk_size: int = 1024,
                   device: str = "cpu",
                   indices: Mapping[str, Sequence[int]] | None = None,
                   keep_predictions: bool = False) -> dict:
    """Metrics of a model on every graph of a split, with bootstrap 95% intervals.

    `split=None` scores `test` when its files have runtimes, else `valid`
    (`default_split`); the report's `notes` say which split was scored and why, and
    warn when it is one that chose the model (valid: early stopping) or trained it.
    `max_configs` > 0 scores a fixed seeded subset of that many configs per graph (like
    the official eval indices); 0 scores every config. `indices` ({graph: config ids},
    as the official `eval_indices/*.json`, `load_eval_indices`) scores exactly those
    configs of each graph; a graph it lacks is an error. `data` may be a `Collection`
    with caller-chosen splits (a cross-validation fold's held-out files).
    `keep_predictions` adds each graph's scores to its row (`pred`, config order): what
    an autotuning benchmark picks configs by.
    """
    m = as_model(model, device)
    coll = data if isinstance(data, Collection) else open_collection(data)
    notes: list[str] = []
    if split is None:
        split, why = default_split(coll)
        notes.append(f"scored the {split} split ({why}; --split chooses another)")
    if split in SPLIT_WARNINGS:
        notes.append(f"warning: {SPLIT_WARNINGS[split]}")
    preds, runtimes = {}, {}
    paths = {p.stem: p for p in coll.files(split)}
    for g in coll.graphs(split):
        ids = None
        if indices is not None:
            ids = _graph_indices(indices, g.name, g.num_configs)
        elif max_configs and g.num_configs > max_configs:
            ids = np.sort(np.random.default_rng(0).choice(g.num_configs, max_configs, False))
        preds[g.name] = score_graph(m, g, ids, chunk_size)
        found = duplicates(g, ids)
        if found.contradicting:  # scored as they are; said on stderr, as a skipped file
            log.warning(found.warning(paths.get(g.name, g.name)))
        target = np.asarray(g.target, dtype=np.float64)
        runtimes[g.name] = target if ids is None else target[ids]
    if coll.skipped:
        if not preds:
            raise UserError(f"no graph of {coll.name} {split} can be scored; the first "
                            f"problem: {coll.skipped[0]}")
        notes.append(f"warning: {len(coll.skipped)} files left out, e.g. {coll.skipped[0]}")
    report = evaluate_graphs(coll.kind, preds, runtimes)
    if keep_predictions:
        for name, row in report["graphs"].items():
            row["pred"] = [float(v) for v in preds[name]]
    report.update(collection=coll.name, split=split, model=m.name, notes=notes)
    return report


def load_eval_indices(path: str | Path) -> dict[str, np.ndarray]:
    """The official per-graph config subsets (`baselines/layout/eval_indices/*.json` of
    TpuGraphs: {graph name: [config ids]}), checked."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: not a readable JSON file ({e})") from None
    if not isinstance(raw, dict) or not all(
            isinstance(v, list) and all(isinstance(i, int) for i in v) for v in raw.values()):
        raise UserError(f"{path}: expected a JSON object of graph name -> list of config ids")
    if not raw:
        raise UserError(f"{path}: names no graph; expected graph name -> list of config ids")
    for name, ids in raw.items():  # fewer than 2 configs have no order: a NaN τ
        if len(set(ids)) < 2:
            raise UserError(f"{path}: graph {name!r} lists {len(set(ids))} distinct config "
                            "ids; ranking needs at least 2")
    return {name: np.asarray(ids, dtype=np.int64) for name, ids in raw.items()}


def _graph_indices(indices: Mapping[str, Sequence[int]], name: str, configs: int) -> np.ndarray:
    if name not in indices:
        raise UserError(f"graph {name} has no entry in the eval indices (they name "
                        f"{len(indices)} graphs); use them with the split they were made for")
    ids = np.unique(np.asarray(indices[name], dtype=np.int64))
    if ids.size and (ids[0] < 0 or ids[-1] >= configs):
        raise UserError(f"graph {name}: eval indices must be in 0..{configs - 1}, got "
                        f"{ids[0]}..{ids[-1]}")
    return ids


#: splits whose scores overstate how the model does on new programs
SPLIT_WARNINGS = {
    "valid": "valid is the split early stopping chose the model on (graphcost train): "
             "its scores are optimistic; test is held out",
    "train": "train is the split the model was trained on: its scores are not held out",
}


def default_split(coll: Collection) -> tuple[str, str]:
    """`test` when its first file has runtimes, else `valid`; and why."""
    if "test" in coll.splits:
        try:
            read_graph(coll.files("test")[0])
            return "test", "held out from training and model selection"
        except GraphFileError as e:
            reason = f"test has no usable runtimes ({e})"
    else:
        reason = "there is no test split"
    if "valid" in coll.splits:
        return "valid", reason
    raise CollectionError(f"collection {coll.name} at {coll.root}: {reason}, and no valid "
                          f"split; name one of {', '.join(coll.splits)} with --split")


def format_report(report: dict) -> str:
    """The per-graph table and the summary means with their 95% intervals."""
    cols = ["configs", "kendall_tau", "opa", "slowdown@1", "slowdown@5", "score"]
    width = max([5] + [len(n) for n in report["graphs"]])
    lines = [f"{'graph':<{width}} " + " ".join(f"{c:>11}" for c in cols)]
    for name, row in report["graphs"].items():
        lines.append(f"{name:<{width}} " + " ".join(
            f"{row[c]:>11d}" if c == "configs" else f"{row[c]:>11.4f}" for c in cols))
    lines.append("")
    lines += report.get("notes", [])
    lines.append(f"{report.get('collection', '')} {report.get('split', '')}: "
                 f"{len(report['graphs'])} graphs scored, mean [95% interval]:")
    for metric, v in report["summary"].items():
        ci = MeanCI(**v)
        lines.append(f"  {metric:<12} {ci}  {ci.over()}")
    return "\n".join(lines)

