"""Train a model on a collection folder: what `graphcost train` runs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from graphcost.atomic import one_writer
from graphcost.data.collection import Collection, open_collection
from graphcost.errors import CollectionError, UserError
from graphcost.formats import Graph
from graphcost.models.model import Model
from graphcost.train.distributed import is_main_process
from graphcost.train.loop import fit
from graphcost.train.settings import TrainSettings

#: the files a run writes into its directory (what `--overwrite` replaces)
RUN_FILES = ("run.json", "metrics.jsonl", "best.pt", "last.pt", "model.pt")
#: the files that hold a run's weights: without them a folder holds no run to continue or
#: keep, only what one that failed before its first epoch wrote (run.json, metrics.jsonl)
WEIGHTS = ("best.pt", "last.pt", "model.pt")


def training_splits(coll: Collection) -> tuple[list[Graph], list[Graph] | None]:
    """The graphs a model trains on, the `train` split, and those it early-stops on,
    `valid` (None without one). A collection without a readable train split is refused:
    never train on another split, which may be held out."""
    if "train" not in coll.splits:
        raise CollectionError(f"collection {coll.name} at {coll.root} has no train split "
                              f"(it has {', '.join(coll.splits)}); put the training files in "
                              f"{coll.root / 'train'} (and validation files in "
                              f"{coll.root / 'valid'})")
    train = list(coll.graphs("train", lazy=True))  # bad files are skipped, with a warning
    if not train:
        raise CollectionError(f"no readable file in the train split of {coll.name} at "
                              f"{coll.root}; the first problem: {coll.skipped[0]}")
    return train, list(coll.graphs("valid", lazy=True)) if "valid" in coll.splits else None


def train_model(data: str | Path | Collection, model: str = "ranker",
                out_dir: str | Path = "runs/model", settings: TrainSettings | None = None,
                model_settings: dict[str, Any] | None = None,
                resume: bool = False, overwrite: bool = False) -> tuple[Model, dict]:
    """Train on a collection's `train` split (refused without one), validating on `valid`.

    `data` is a collection folder, or a `Collection` whose splits are file lists chosen
    by the caller (cross-validation folds); then `run.json` also lists those files, since
    the folder alone no longer says what was trained on.

    Writes `run.json` (what was trained on), `best.pt`, `last.pt`, `metrics.jsonl` and,
    when training finishes, `model.pt` (the best weights) under `out_dir`, holding it
    for the run (`claim_run_dir`): a run already there is refused unless `resume`
    continues it or `overwrite` replaces it.
    """
    given = isinstance(data, Collection)
    coll = data if given else open_collection(data)
    train, valid = training_splits(coll)
    m = Model(model, coll.kind, **(model_settings or {}))
    m.collection = coll.name  # saved with it: autotune refuses a model of another space
    record: dict[str, Any] = {"data": str(Path(coll.root if given else data).resolve()),
                              "collection": coll.name, "model": model,
                              "model_settings": model_settings or {}}
    if given:
        record["files"] = {s: [f.name for f in files] for s, files in coll.splits.items()}
    if coll.sources:  # several sources pooled: training may balance them (`balance`)
        record["sources"] = dict(Counter(coll.sources.values()))
    main = is_main_process()  # under torchrun only rank 0 writes files
    with claim_run_dir(out_dir, resume, overwrite) if main else nullcontext():
        result = fit(m, train, valid, settings, out_dir, resume, record, coll.sources)
        if main and not result["stopped"]:
            m.save(Path(out_dir) / "model.pt")
    result["collection"] = coll.name
    return m, result


@contextmanager
def claim_run_dir(out_dir: str | Path, resume: bool = False,
                  overwrite: bool = False) -> Iterator[Path]:
    """Hold run directory `out_dir` for one training run, so that no two runs mix their
    files there (best.pt from one, model.pt from the other): `one_writer`'s lock for the
    run's lifetime, refused naming the holder's pid while another process holds it. A run
    already there (its `WEIGHTS`) is refused unless `resume` continues it or `overwrite`
    replaces it; then its files are removed first, so that none outlives it. What a run
    that failed before its first epoch left (no weights) is removed too: it blocks no
    rerun."""
    with one_writer(out_dir, "training run") as out:
        existing = [name for name in RUN_FILES if (out / name).exists()]
        trained = any(name in WEIGHTS for name in existing)
        if trained and not (resume or overwrite):
            raise UserError(f"{out}: already holds a run ({', '.join(existing)}); pass "
                            "--resume to continue it, --overwrite to replace it, or "
                            "choose another --out")
        if not (trained and resume):
            for name in existing:
                (out / name).unlink()
        yield out
