"""What a run keeps so that a killed run resumes exactly: RNG states and the best weights."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphcost.errors import UserError
from graphcost.formats import Graph
from graphcost.models.checkpoint import atomic_save, require_keys
from graphcost.models.model import Model
from graphcost.train.settings import TrainSettings

#: what `fit` reads from `last.pt` to resume a run
RESUME_KEYS = ("model", "optimizer", "scheduler", "rng", "epoch", "best_score", "best_epoch",
               "bad", "best_state", "history", "main_end", "before_head")


def seed_everything(seed: int) -> np.random.Generator:
    """Seed python, torch and a fresh numpy generator: a run is a function of its seed."""
    random.seed(seed)
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


def rng_state(rng: np.random.Generator) -> dict:
    return {"python": random.getstate(), "numpy": rng.bit_generator.state,
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(rng: np.random.Generator, st: dict) -> None:
    random.setstate(st["python"])
    rng.bit_generator.state = st["numpy"]
    torch.set_rng_state(st["torch"])
    if st.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(st["cuda"])


@dataclass
class BestSoFar:
    """Early-stopping state, saved inside `last.pt`: the best score, its epoch and
    weights, and how many epochs have passed without beating it."""

    score: float = -math.inf
    epoch: int = 0
    bad: int = 0
    state: dict | None = None

    def update(self, score: float, epoch: int, model: Model, path: Path | None,
               count_bad: bool = True) -> None:
        """Keep `model` if `score` beats the best (writing it to `path`), else count a bad
        epoch (unless `count_bad` is off, as in GST's head phase)."""
        if score > self.score or (math.isnan(self.score) and not math.isnan(score)):
            self.score, self.epoch, self.bad = score, epoch, 0
            self.state = copy.deepcopy(model.state())
            if path is not None:
                atomic_save(self.state, path)
        elif count_bad:
            self.bad += 1

    def restore(self, net: torch.nn.Module) -> None:
        if self.state is not None:
            net.load_state_dict(self.state["state_dict"])

    def checkpoint(self) -> dict:
        return {"best_score": self.score, "best_epoch": self.epoch, "bad": self.bad,
                "best_state": self.state}

    @classmethod
    def from_checkpoint(cls, ckpt: dict) -> BestSoFar:
        return cls(ckpt["best_score"], ckpt["best_epoch"], ckpt["bad"], ckpt["best_state"])


def trained_on(train: Sequence[Graph], valid: Sequence[Graph] | None,
               record: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What a run trains on, as `last.pt` records it: the collection's path and name
    (`data` and `collection` of the run's `record`, when known) and a fingerprint of its
    train and valid graph names."""
    names = [g.name for g in train], [g.name for g in valid or []]
    digest = hashlib.sha256(repr(tuple(sorted(n) for n in names)).encode()).hexdigest()
    known = {k: record[k] for k in ("data", "collection") if record and k in record}
    return {**known, "train": len(names[0]), "valid": len(names[1]), "graphs": digest[:16]}


#: training settings a resumed run must keep, and why: the state it restores from
#: `last.pt` would silently override a new value, or mean something else under it
KEPT_ON_RESUME = {
    "optimizer": "its optimizer state is the run's optimizer's",
    "mode": "its training mode's state (GST's table) is the run's mode's",
    "lr": "the optimizer and scheduler state it restores hold the run's learning rate",
    "weight_decay": "the optimizer state it restores holds the run's weight decay",
    "seed": "the random number states it restores go on from the run's seed",
    "select_on": "the best score it restores, and early stopping's count, are of the "
                 "run's select_on figure",
    "warm_start": "it restores the run's own weights",
}


def check_resume(ckpt: dict, path: Path, model: Model, settings: TrainSettings,
                 data: Mapping[str, Any]) -> None:
    """Refuse to resume from `path` a run that cannot continue here, naming what differs:
    a missing key, another model or other model settings (its weights would not fit),
    a training setting of `KEPT_ON_RESUME` (optimizer, mode, lr, weight_decay, seed,
    select_on, warm_start: the state restored from `path` would override the new value
    or not fit it), or other graphs (it would go on training on another collection).

    Every other training setting may change on resume and applies from the first
    resumed epoch on: epochs (more or fewer; the cosine schedule stretches to the new
    length), patience, steps_per_epoch, warmup_steps, min_lr_ratio, the sampling
    (graphs_per_batch, configs_per_graph, fast_bias, dedup, min/max_configs,
    last_batch), the loss and its margin and temperature, clipping, validation
    (valid_configs, valid_resample), GST's fresh segments, stale dropout, head epochs
    and config cap, device, chunk_size, memory_budget, progress and stop_after_epoch."""
    try:
        require_keys(ckpt, RESUME_KEYS, "a training checkpoint (last.pt)")
        previous = Model.from_state(ckpt["model"])
    except UserError as e:
        raise UserError(f"{path}: {e}") from None
    if (previous.name, previous.kind) != (model.name, model.kind):
        raise UserError(f"{path}: the run trains a {previous.kind} {previous.name} model, this "
                        f"command a {model.kind} {model.name}: resume with --model "
                        f"{previous.name}, or train into another --out")
    theirs, ours = dataclasses.asdict(previous.settings), dataclasses.asdict(model.settings)
    differ = [k for k in theirs if theirs[k] != ours[k]]
    if differ:
        raise UserError(
            f"{path}: the run's model settings differ from this command's: "
            + ", ".join(f"{k} is {theirs[k]!r} in the run, {ours[k]!r} here" for k in differ)
            + "; resume with the run's settings, or train into another --out")
    kept, ours = ckpt.get("settings", {}), dataclasses.asdict(settings)
    differ = [k for k in KEPT_ON_RESUME if k in kept and kept[k] != ours[k]]
    if differ:
        raise UserError(
            f"{path}: " + "; ".join(f"setting {k} is {kept[k]!r} in the run, {ours[k]!r} "
                                    f"here, and a resumed run cannot change it: "
                                    f"{KEPT_ON_RESUME[k]}" for k in differ)
            + "; resume without changing it, or train into another --out")
    before = ckpt.get("trained_on")  # absent in runs of older graphcost versions
    if before is not None and any(before.get(k) != data.get(k)
                                  for k in ("collection", "graphs")):
        raise UserError(f"{path}: the run trained on {_described(before)}; this command "
                        f"gives {_described(data)}: resume on the run's collection, or "
                        "train into another --out")


def _described(data: Mapping[str, Any]) -> str:
    where = f"{data.get('collection', 'graphs')} at {data['data']}" if "data" in data \
        else data.get("collection", "graphs")
    return (f"{where} ({data.get('train')} train, {data.get('valid')} valid graphs, "
            f"names fingerprint {data.get('graphs')})")
