"""Several trained networks of one model, scored as one: a deep ensemble.

Trained from different seeds, rankers disagree most on programs unlike their training
data, and each seed's errors there are its own. The mean of their scores,

    s(c) = (1/M) Σₘ sₘ(c),

keeps what they agree on. Over eleven sources held out in turn, the mean of three
seeds' layout rankers scores above the average seed by +0.027 τ on layout:cpu:random and
+0.015 on layout:cpu:default; it gains over one seed only where each seed also stopped
early on its own families (`docs/results.md`, "Source by source"). Such members fitted
their feature transforms on different graphs: the model prepares a graph once with the
union of their transforms, and each member reads its own columns from it,

    xₘ = x[:, iₘ] · aₘ + bₘ,

which is its own transform exactly (`FeatureTransform.union`). A mean of raw scores, not
of standardized ones, so a config's score never depends on which other configs are
scored with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from graphcost.data.features import ColumnMap
from graphcost.models.base import Batch, GraphTensors, RankingNet


class Columns(nn.Module):
    """A member's input columns from the ensemble's: `x[..., index] · scale + shift`, then
    the columns past the transform's (`ColumnMap.width`) as they are. Buffers, not
    weights: rebuilt from the members' transforms, never saved or trained."""

    def __init__(self, m: ColumnMap):
        super().__init__()
        self.width = m.width
        self.register_buffer("index", torch.as_tensor(m.index, dtype=torch.long), False)
        self.register_buffer("scale", torch.as_tensor(m.scale, dtype=torch.float32), False)
        self.register_buffer("shift", torch.as_tensor(m.shift, dtype=torch.float32), False)

    def forward(self, x: Tensor) -> Tensor:
        d = x.device  # a prepared graph stays on the CPU when the network is on a GPU
        own = x[..., self.index.to(d)] * self.scale.to(d) + self.shift.to(d)
        return torch.cat([own, x[..., self.width:]], dim=-1)


def _columns(m: ColumnMap | None) -> nn.Module:
    return nn.Identity() if m is None else Columns(m)


class EnsembleNet(RankingNet):
    """The mean of its members' scores, for every way a network is asked to score.

    `inputs`: per member, how its node and tile config features follow from the
    ensemble's (`FeatureTransform.map_to`; layout configs are read as they are); None
    when all members read the ensemble's features as they are.
    """

    def __init__(self, members: Sequence[RankingNet],
                 inputs: Sequence[tuple[ColumnMap, ColumnMap | None]] | None = None):
        super().__init__()
        if len(members) < 2:
            raise ValueError(f"an ensemble needs at least two members, got {len(members)}")
        self.members = nn.ModuleList(members)
        self.kinds = members[0].kinds
        maps = list(inputs) if inputs is not None else [(None, None)] * len(members)
        self.node_inputs = nn.ModuleList(_columns(n) for n, _ in maps)
        self.config_inputs = nn.ModuleList(_columns(c) for _, c in maps)

    def _graphs(self, g: GraphTensors) -> list[GraphTensors]:
        """g as each member reads it."""
        return [dataclasses.replace(
            g, x=node(g.x), tile_configs=None if g.tile_configs is None else cfg(g.tile_configs))
            for node, cfg in zip(self.node_inputs, self.config_inputs, strict=True)]

    def forward(self, b: Batch) -> Tensor:
        return torch.stack([
            m(dataclasses.replace(b, x=node(b.x), config=cfg(b.config)))
            for m, node, cfg in zip(self.members, self.node_inputs, self.config_inputs,
                                    strict=True)]).mean(0)

    def fit_prior(self, graphs: Iterable[GraphTensors]) -> str | None:
        kept = [self._graphs(g) for g in graphs]  # read once, each member its own columns
        return [m.fit_prior([g[i] for g in kept]) for i, m in enumerate(self.members)][0]

    def penalty(self) -> Tensor | None:
        terms = [p for m in self.members if (p := m.penalty()) is not None]
        return torch.stack(terms).sum() if terms else None

    @torch.no_grad()
    def score_configs(self, g: GraphTensors, ids: np.ndarray, chunk_size: int = 1024,
                      fast: bool = True) -> Tensor:
        return torch.stack([m.score_configs(own, ids, chunk_size, fast)
                            for m, own in zip(self.members, self._graphs(g),
                                              strict=True)]).mean(0)

    def config_scorer(self, g: GraphTensors, chunk_size: int = 1024,
                      fast: bool = True) -> Callable[[Tensor], Tensor]:
        scorers = [m.config_scorer(own, chunk_size, fast)
                   for m, own in zip(self.members, self._graphs(g), strict=True)]
        return lambda configs: torch.stack([
            s(cfg(configs)) for s, cfg in zip(scorers, self.config_inputs, strict=True)]).mean(0)
