"""What a run keeps so that a killed run resumes exactly: RNG states and the best weights."""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from graphcost.models.model import Model, atomic_save


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
