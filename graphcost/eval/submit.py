"""Rank every graph of a split with one model per collection into a competition CSV."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from graphcost.atomic import check_writable
from graphcost.data.collection import find_collections
from graphcost.errors import UserError
from graphcost.eval.submission import ranking_from_scores, submission_id, write_submission
from graphcost.models.model import Model, as_model
from graphcost.models.scorer import score_graph


def make_submission(models: dict[str, str | Path | Model], data: str | Path, out: str | Path,
                    split: str = "test", chunk_size: int = 1024, device: str = "cpu") -> Path:
    """Rank every graph of `split` of each named collection with its model → CSV.

    `models` maps collection names (`tile:xla`, `layout:xla:random`, …) to models. The
    split's files need no runtimes (the published test split has none). `out` is checked
    before any ranking, and no CSV is written unless every file of the split has a row:
    an unreadable file is an error naming it, not a missing row.
    """
    check_writable(out)
    found = find_collections(data)
    missing = sorted(set(models) - set(found))
    if missing:
        raise UserError(f"no collection {', '.join(missing)} under {data}; found "
                        f"{', '.join(sorted(found)) or 'none'}")
    loaded = {name: as_model(model, device) for name, model in models.items()}
    for name, m in loaded.items():  # every model and ID checked before the first is run
        for path in found[name].files(split):
            submission_id(name, path.stem)
        if m.kind != found[name].kind:
            raise UserError(f"the model for {name} is a {m.kind} model; the collection is "
                            f"{found[name].kind}")
    rows: dict[str, list[int]] = {}
    for name, m in loaded.items():
        coll = found[name]
        for g in coll.graphs(split, runtimes=False):
            scores = score_graph(m, g, None, chunk_size)
            rows[submission_id(name, g.name)] = ranking_from_scores(coll.kind, scores)
        if coll.skipped:
            raise UserError(f"{len(coll.skipped)} of {len(coll.files(split))} files of {name} "
                            f"{split} cannot be ranked, so the CSV would lack their rows; "
                            f"the first: {coll.skipped[0]}")
    return write_submission(rows, out)


def models_by_collection(models: Sequence[str], data: str) -> dict[str, str]:
    """`COLLECTION=MODEL.pt` items → {collection: model path}. A bare model path is for a
    root holding one collection; a ValueError names the choices when it holds more. A
    collection given two models is refused: which one should rank it?"""
    mapping: dict[str, str] = {}
    for item in models:
        name, sep, path = item.rpartition("=")
        if not sep:
            found = find_collections(data)
            if len(found) != 1:
                raise UserError(f"name the collection of model {item}: COLLECTION=MODEL.pt, "
                                f"COLLECTION one of {', '.join(sorted(found)) or 'none'}")
            name, path = next(iter(found)), item
        if name in mapping:
            raise UserError(f"collection {name} is given two models, {mapping[name]} and "
                            f"{path}: give one model per collection")
        mapping[name] = path
    return mapping
