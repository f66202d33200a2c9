"""The train / evaluate / predict / submit verbs as plain functions (the CLI wraps them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from graphcost.data.collection import Collection, find_collections, open_collection
from graphcost.eval.metrics import evaluate_graphs
from graphcost.eval.submission import (
    ranking_from_scores,
    submission_id,
    write_submission,
)
from graphcost.formats import Graph, read_graph
from graphcost.models.model import Model
from graphcost.train.distributed import is_main_process
from graphcost.train.trainer import TrainSettings, train


def _as_model(model: Model | str | Path, device: str = "cpu") -> Model:
    return model if isinstance(model, Model) else Model.load(model, device)


def split_graphs(collection: Collection, split: str) -> list[Graph]:
    return list(collection.graphs(split, lazy=True))


def train_model(data: str | Path, model: str = "ranker", out_dir: str | Path = "runs/model",
                settings: TrainSettings | None = None, model_settings: dict[str, Any] | None = None,
                resume: bool = False) -> tuple[Model, dict]:
    """Train on a collection's `train` split (or its only split), validating on `valid`.

    Writes `run.json` (what was trained on), `best.pt`, `last.pt`, `metrics.jsonl` and,
    when training finishes, `model.pt` (the best weights) under `out_dir`.
    """
    coll = open_collection(data)
    train_split = "train" if "train" in coll.splits else next(iter(coll.splits))
    valid = split_graphs(coll, "valid") if "valid" in coll.splits else None
    m = Model(model, coll.kind, **(model_settings or {}))
    main = is_main_process()  # under torchrun only rank 0 writes files
    if main:
        write_json({"data": str(Path(data).resolve()), "collection": coll.name, "model": model,
                    "model_settings": model_settings or {}}, Path(out_dir) / "run.json")
    result = train(m, split_graphs(coll, train_split), valid, settings, out_dir, resume)
    if main and not result["stopped"]:
        m.save(Path(out_dir) / "model.pt")
    result["collection"] = coll.name
    return m, result


def evaluate_model(model: Model | str | Path, data: str | Path, split: str = "valid",
                   max_configs: int = 0, chunk_size: int = 1024, device: str = "cpu") -> dict:
    """Metrics of a model on every graph of a split, with bootstrap 95% intervals.

    `max_configs` > 0 scores a fixed seeded subset of that many configs per graph (like
    the official eval indices); 0 scores every config.
    """
    m = _as_model(model, device)
    coll = open_collection(data)
    preds, runtimes = {}, {}
    for g in coll.graphs(split):
        ids = None
        if max_configs and g.num_configs > max_configs:
            ids = np.sort(np.random.default_rng(0).choice(g.num_configs, max_configs, False))
        preds[g.name] = m.predict(g, ids, chunk_size=chunk_size)
        target = np.asarray(g.target, dtype=np.float64)
        runtimes[g.name] = target if ids is None else target[ids]
    report = evaluate_graphs(coll.kind, preds, runtimes)
    report.update(collection=coll.name, split=split, model=m.name)
    return report


def format_report(report: dict) -> str:
    """The per-graph table and the summary means with their 95% intervals."""
    cols = ["configs", "kendall_tau", "opa", "slowdown@1", "slowdown@5", "score"]
    width = max([5] + [len(n) for n in report["graphs"]])
    lines = [f"{'graph':<{width}} " + " ".join(f"{c:>11}" for c in cols)]
    for name, row in report["graphs"].items():
        lines.append(f"{name:<{width}} " + " ".join(
            f"{row[c]:>11d}" if c == "configs" else f"{row[c]:>11.4f}" for c in cols))
    lines.append("")
    lines.append(f"{report.get('collection', '')} {report.get('split', '')} "
                 f"({len(report['graphs'])} graphs), mean [95% interval]:")
    for metric, v in report["summary"].items():
        lines.append(f"  {metric:<12} {v['mean']:.4f} [{v['lo']:.4f}, {v['hi']:.4f}]")
    return "\n".join(lines)


def write_json(report: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1, default=float))
    return path


def predict_file(model: Model | str | Path, path: str | Path, chunk_size: int = 1024,
                 device: str = "cpu") -> tuple[np.ndarray, np.ndarray]:
    """Config indices of one `.npz` fastest first, and every config's score."""
    return _as_model(model, device).rank(read_graph(path), chunk_size=chunk_size)


def make_submission(models: dict[str, str | Path | Model], data: str | Path, out: str | Path,
                    split: str = "test", chunk_size: int = 1024, device: str = "cpu") -> Path:
    """Rank every graph of `split` of each named collection with its model → CSV.

    `models` maps collection names (`tile:xla`, `layout:xla:random`, …) to models.
    """
    found = find_collections(data)
    missing = sorted(set(models) - set(found))
    if missing:
        raise ValueError(f"no collection {missing} under {data}; found {sorted(found)}")
    rows: dict[str, list[int]] = {}
    for name, model in models.items():
        m, coll = _as_model(model, device), found[name]
        if m.kind != coll.kind:
            raise ValueError(f"model for {name} is a {m.kind} model, the collection is {coll.kind}")
        for g in coll.graphs(split):
            scores = m.predict(g, chunk_size=chunk_size)
            rows[submission_id(name, g.name)] = ranking_from_scores(coll.kind, scores)
    return write_submission(rows, out)
