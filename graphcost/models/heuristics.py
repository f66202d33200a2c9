r"""Heuristic baselines: rules that need no learning, as models like any other.

A learned cost model is worth its training only where it beats what needs none, so
these rank configs beside the ranker everywhere a model goes (train, evaluate,
crossval, predict, submit). Each is a `RankingNet` whose `forward(batch)` computes the
rule from the batch tensors; lower scores mean faster, as for every network.

- `FewestChanges` (layout): a config that moves fewer layouts away from the compiler's
  default is predicted faster;
- `MovedBytes` (layout): the same, each moved layout weighed by its tensor's bytes
  (the copy it forces);
- `DefaultFirst` (layout and tile): the default config first, every other tied;
- `ConfigOnly` (tile): a linear model of log runtime on the config features alone,
  blind to the graph, fitted by least squares.

Training never steps an optimiser on them: `graphcost.train.fit` calls
`fit_closed_form` once (config-only solves its least squares there; the others have
nothing to fit) and saves them as it saves any model.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from graphcost.errors import UserError
from graphcost.models.base import Batch, GraphTensors, RankingNet, pool_own
from graphcost.xla.configs import default_options, option_features


@dataclass
class RuleSettings:
    """A training-free rule has no settings."""


@dataclass
class ConfigOnlySettings:
    ridge: float = 1e-3  # config-only: L2 penalty λ per config (features are standardised)


class Heuristic(RankingNet):
    """Base of the heuristic baselines: scores from a rule, with no trained weights."""

    closed_form = True

    def __init__(self, kind: str, s: object, node_dim: int, config_dim: int):
        super().__init__()
        self.kind = kind

    def fit_closed_form(self, graphs: Iterable[GraphTensors]) -> str:
        """Set what the rule needs from the train graphs; says what was done."""
        return "training-free: nothing fitted, no optimiser steps"


def moved_layouts(b: Batch) -> Tensor:
    """(C, K, 3): 1 where a config sets the layout of role r (output, input, kernel) of
    configurable node k, i.e. any of its 6 minor-to-major entries is not −1."""
    c, k, _ = b.config.shape
    return (b.config.reshape(c, k, 3, 6) != -1).any(-1).float()


class FewestChanges(Heuristic):
    r"""Count the layouts a config moves away from the compiler's default:

    .. math:: s(c) = \sum_{k} \sum_{r \in \{out, in, kernel\}} [\,x_{c,k,r} \neq (-1)^6\,]

    over the configurable nodes k; every moved layout costs a copy, so fewer is faster.
    """

    kinds = ("layout",)

    def weight(self, b: Batch) -> Tensor:
        """What one moved layout of each (node, role) costs: here 1."""
        return torch.ones_like(b.config_bytes)

    def forward(self, b: Batch) -> Tensor:
        per_node = (moved_layouts(b) * self.weight(b)).sum(-1, keepdim=True)  # (C, K, 1)
        return pool_own("sum", per_node, b.config_graph, b.num_graphs)[..., 0].t()


class MovedBytes(FewestChanges):
    r"""The bytes a config moves: each moved layout weighed by the size of its tensor,

    .. math:: s(c) = \sum_{k} \sum_{r} [\,x_{c,k,r} \neq (-1)^6\,] \cdot
              \mathrm{elements}_{k,r} \cdot \mathrm{bytes\ per\ element}_{k,r}

    (shape and element type from the node features of the node whose tensor role r of
    node k lays out), the traffic of the copies it forces.
    """

    def weight(self, b: Batch) -> Tensor:
        return b.config_bytes


class DefaultFirst(Heuristic):
    r"""The default config first, every other tied: s(c) = [c ≠ default].

    Layout: the default is the config with every entry −1. Tile: graphcost's options
    collections encode the default (every option unset) as
    `xla.configs.option_features(default_options())`; published tile:xla files mark no
    default, so there `fit_closed_form` refuses, and any graph without a default config
    gets every config tied.
    """

    kinds = ("layout", "tile")

    def __init__(self, kind: str, s: object, node_dim: int, config_dim: int):
        super().__init__(kind, s, node_dim, config_dim)
        default = torch.from_numpy(option_features(default_options()))
        self.register_buffer("default", default, persistent=False)

    def is_default(self, tile_configs: Tensor) -> Tensor:
        return (tile_configs == self.default).all(-1)

    def forward(self, b: Batch) -> Tensor:
        if self.kind == "tile":  # (B, C, 24) raw features
            return (~self.is_default(b.config)).float()
        moved = moved_layouts(b).sum(-1, keepdim=True)
        return (pool_own("sum", moved, b.config_graph, b.num_graphs)[..., 0].t() > 0).float()

    def fit_closed_form(self, graphs: Iterable[GraphTensors]) -> str:
        if self.kind == "tile":
            seen = [g.tile_configs is not None and bool(self.is_default(g.tile_configs).any())
                    for g in graphs]
            if not any(seen):
                raise UserError(f"model default-first: none of the {len(seen)} train graphs "
                                "of this tile collection has the default config (every "
                                "option unset, as graphcost's options collections encode "
                                "it); tile:xla files mark no default, so default-first "
                                "cannot rank them")
        return super().fit_closed_form(graphs)


class ConfigOnly(Heuristic):
    r"""A linear model of log runtime on the (standardised) config features alone:

    .. math:: s(c) = w^\top x_c, \quad
              w = \arg\min_w \sum_g \sum_{c \in g}
              \big(\tilde y_{g,c} - w^\top \tilde x_{g,c}\big)^2 + \lambda n \lVert w\rVert^2

    where ỹ and x̃ are log runtime and features centred within each graph (only the
    order within a graph matters, so per-graph offsets are left out) and n is the number
    of configs. It sees no graph: what it ranks well, a knob's effect that holds in
    every program, needs no graph network.
    """

    kinds = ("tile",)

    def __init__(self, kind: str, s: ConfigOnlySettings, node_dim: int, config_dim: int):
        super().__init__(kind, s, node_dim, config_dim)
        self.ridge = s.ridge
        self.linear = nn.Linear(config_dim, 1, bias=False).requires_grad_(False)
        nn.init.zeros_(self.linear.weight)  # unfitted: every config tied

    def forward(self, b: Batch) -> Tensor:
        return self.linear(b.config)[..., 0]

    def fit_closed_form(self, graphs: Iterable[GraphTensors]) -> str:
        xs, ys = [], []
        for g in graphs:
            x, y = g.tile_configs.double().numpy(), np.asarray(g.runtime, np.float64)
            ok = np.isfinite(y) & (y > 0)
            if ok.sum() < 2:
                continue
            x, y = x[ok], np.log(y[ok])
            xs.append(x - x.mean(0))
            ys.append(y - y.mean())
        if not xs:
            raise UserError("model config-only: no train graph has two configs with "
                            "positive runtimes to fit")
        x, y = np.concatenate(xs), np.concatenate(ys)
        a = x.T @ x + self.ridge * x.shape[0] * np.eye(x.shape[1])
        w = np.linalg.lstsq(a, x.T @ y, rcond=None)[0]  # λ = 0 may leave a singular a
        self.linear.weight.copy_(torch.from_numpy(w).float()[None])
        return (f"least squares of log runtime on {x.shape[1]} config features over "
                f"{x.shape[0]} configs of {len(xs)} graphs, solved once: no optimiser steps")
