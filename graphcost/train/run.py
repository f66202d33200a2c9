"""Train a model on a collection folder: what `graphcost train` runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from graphcost.atomic import write_json
from graphcost.data.collection import Collection, open_collection
from graphcost.errors import CollectionError
from graphcost.models.model import Model
from graphcost.train.distributed import is_main_process
from graphcost.train.loop import fit
from graphcost.train.settings import TrainSettings


def train_model(data: str | Path | Collection, model: str = "ranker",
                out_dir: str | Path = "runs/model", settings: TrainSettings | None = None,
                model_settings: dict[str, Any] | None = None,
                resume: bool = False) -> tuple[Model, dict]:
    """Train on a collection's `train` split (refused without one), validating on `valid`.

    `data` is a collection folder, or a `Collection` whose splits are file lists chosen
    by the caller (cross-validation folds); then `run.json` also lists those files, since
    the folder alone no longer says what was trained on.

    Writes `run.json` (what was trained on), `best.pt`, `last.pt`, `metrics.jsonl` and,
    when training finishes, `model.pt` (the best weights) under `out_dir`.
    """
    given = isinstance(data, Collection)
    coll = data if given else open_collection(data)
    if "train" not in coll.splits:  # never train on another split, which may be held out
        raise CollectionError(f"collection {coll.name} at {coll.root} has no train split "
                              f"(it has {', '.join(coll.splits)}); put the training files in "
                              f"{coll.root / 'train'} (and validation files in "
                              f"{coll.root / 'valid'})")
    train = list(coll.graphs("train", lazy=True))  # bad files are skipped, with a warning
    if not train:
        raise CollectionError(f"no readable file in the train split of {coll.name} at "
                              f"{coll.root}; the first problem: {coll.skipped[0]}")
    valid = list(coll.graphs("valid", lazy=True)) if "valid" in coll.splits else None
    m = Model(model, coll.kind, **(model_settings or {}))
    main = is_main_process()  # under torchrun only rank 0 writes files
    if main:
        info: dict[str, Any] = {"data": str(Path(coll.root if given else data).resolve()),
                                "collection": coll.name, "model": model,
                                "model_settings": model_settings or {}}
        if given:
            info["files"] = {s: [f.name for f in files] for s, files in coll.splits.items()}
        write_json(info, Path(out_dir) / "run.json")
    result = fit(m, train, valid, settings, out_dir, resume)
    if main and not result["stopped"]:
        m.save(Path(out_dir) / "model.pt")
    result["collection"] = coll.name
    return m, result
