"""Several trained networks of one model, scored as one: a deep ensemble.

Trained from different seeds, rankers disagree most on programs unlike their training
data, and each seed's errors there are its own. The mean of their scores,

    s(c) = (1/M) Σₘ sₘ(c),

keeps what they agree on. Over eleven sources held out in turn, the mean of three
seeds' layout rankers scores above the average seed by +0.027 τ on layout:cpu:random and
+0.015 on layout:cpu:default, where each seed also stopped early on other families;
sharing those, it is level with one seed (`docs/results.md`, "Source by source"). The
members share the model's name, settings and feature transform (one prepared graph
feeds them all);
a mean of raw scores, not of standardized ones, so a config's score never depends on
which other configs are scored with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from graphcost.models.base import Batch, GraphTensors, RankingNet


class EnsembleNet(RankingNet):
    """The mean of its members' scores, for every way a network is asked to score."""

    def __init__(self, members: Sequence[RankingNet]):
        super().__init__()
        if len(members) < 2:
            raise ValueError(f"an ensemble needs at least two members, got {len(members)}")
        self.members = nn.ModuleList(members)
        self.kinds = members[0].kinds

    def forward(self, b: Batch) -> Tensor:
        return torch.stack([m(b) for m in self.members]).mean(0)

    def fit_prior(self, graphs: Iterable[GraphTensors]) -> str | None:
        kept = list(graphs)  # read once per member
        return [m.fit_prior(kept) for m in self.members][0]

    def penalty(self) -> Tensor | None:
        terms = [p for m in self.members if (p := m.penalty()) is not None]
        return torch.stack(terms).sum() if terms else None

    @torch.no_grad()
    def score_configs(self, g: GraphTensors, ids: np.ndarray, chunk_size: int = 1024,
                      fast: bool = True) -> Tensor:
        return torch.stack([m.score_configs(g, ids, chunk_size, fast)
                            for m in self.members]).mean(0)

    def config_scorer(self, g: GraphTensors, chunk_size: int = 1024,
                      fast: bool = True) -> Callable[[Tensor], Tensor]:
        scorers = [m.config_scorer(g, chunk_size, fast) for m in self.members]
        return lambda configs: torch.stack([s(configs) for s in scorers]).mean(0)
