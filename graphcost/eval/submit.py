"""Rank every graph of a split with one model per collection into a competition CSV."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from graphcost.data.collection import find_collections
from graphcost.eval.submission import ranking_from_scores, submission_id, write_submission
from graphcost.models.model import Model, as_model
from graphcost.models.scorer import score_graph


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
        m, coll = as_model(model, device), found[name]
        if m.kind != coll.kind:
            raise ValueError(f"model for {name} is a {m.kind} model, the collection is {coll.kind}")
        for g in coll.graphs(split):
            rows[submission_id(name, g.name)] = ranking_from_scores(coll.kind,
                                                                    score_graph(m, g, None,
                                                                                chunk_size))
    return write_submission(rows, out)


def models_by_collection(models: Sequence[str], data: str) -> dict[str, str]:
    """`COLLECTION=MODEL.pt` items → {collection: model path}. A bare model path is for a
    root holding one collection; a ValueError names the choices when it holds more."""
    mapping = {}
    for item in models:
        name, sep, path = item.rpartition("=")
        if not sep:
            found = find_collections(data)
            if len(found) != 1:
                raise ValueError(f"name the collection: one of {sorted(found)}")
            name, path = next(iter(found)), item
        mapping[name] = path
    return mapping
