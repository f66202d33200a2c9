r"""Heuristic baselines: rules that need no learning, as models like any other.

A learned cost model is worth its training only where it beats what needs none, so
these rank configs beside the ranker everywhere a model goes (train, evaluate,
crossval, predict, submit). Each is a `RankingNet`; lower scores mean faster, as for
every network. A rule is written once: a layout rule as its cost at each configurable
node (`node_costs`), a tile rule as the score of one graph's configs (`config_scores`);
the score of a batch (`forward`) and of one graph's configs derive from it.

- `FewestChanges` (layout): a config that moves fewer layouts away from the compiler's
  default is predicted faster;
- `MovedBytes` (layout): the same, each moved layout weighed by its tensor's bytes
  (the copy it forces);
- `ChangedBytes` (layout): the same, counting only layouts set to another order than the
  tensor's own in the graph (a random permutation of a 2-D tensor is its own order half
  the time, and forces no copy);
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
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from graphcost import fields
from graphcost.errors import SettingsError, UserError
from graphcost.models.base import Batch, GraphTensors, RankingNet, pool_own
from graphcost.xla.options import OptionConfig


@dataclass
class RuleSettings:
    """A training-free rule has no settings."""


@dataclass
class ConfigOnlySettings:
    ridge: float = 1e-3  # config-only: L2 penalty λ per config (features are standardised)
    RULES: ClassVar[dict[str, fields.Rule]] = {"ridge": fields.NON_NEGATIVE}


class Heuristic(RankingNet):
    """Base of the heuristic baselines: scores from a rule, with no trained weights. A
    subclass defines the rule once: a layout rule `node_costs(configs, g)`, (C, K), what
    each config (C, K, 18) costs at each configurable node of `g` (a batch's nodes or one
    graph's); a tile rule `config_scores`. The batch path (`forward`) and the one-graph
    path derive from it, so they agree."""

    closed_form = True

    def __init__(self, kind: str, s: object, node_dim: int, config_dim: int):
        super().__init__()
        self.kind = kind

    def fit_closed_form(self, graphs: Iterable[GraphTensors]) -> str:
        """Set what the rule needs from the train graphs; says what was done."""
        return "training-free: nothing fitted, no optimiser steps"

    def total(self, costs: Tensor) -> Tensor:
        """A config's score from its node costs summed over its graph: the sum itself."""
        return costs

    def config_scores(self, configs: Tensor, g: GraphTensors | None) -> Tensor:
        """(C,) the rule on configs of one graph, shaped like `g.configs(ids)` (they need
        not be g's own): what a ranker learning on top of the rule adds (`Prior`)."""
        return self.total(self.node_costs(configs, g).sum(1))

    def forward(self, b: Batch) -> Tensor:
        """(B, C) the rule on a batch: layout node costs summed per graph; a tile rule's
        `config_scores` applies to the batch's (B, C, d) configs as to one graph's."""
        if self.kind == "tile":
            return self.config_scores(b.config, None)
        costs = self.node_costs(b.config, b)[..., None]  # (C, K, 1)
        return self.total(pool_own("sum", costs, b.config_graph, b.num_graphs)[..., 0].t())


def layout_codes(entries: Tensor) -> Tensor:
    """(..., 3, 6) minor-to-major entries (−1..5) → (..., 3): each role's six entries as
    one exact number, Σ (e_i + 1)·7^i, 0 for all −1 (compare one number, not six)."""
    powers = 7.0 ** torch.arange(6, device=entries.device)
    return (entries.to(torch.float32) + 1) @ powers


def moved_layouts(config: Tensor) -> Tensor:
    """(C, K, 3) from layout configs (C, K, 18): 1 where a config sets the layout of role
    r (output, input, kernel) of configurable node k, i.e. any of its 6 minor-to-major
    entries is not −1."""
    c, k, _ = config.shape
    return (layout_codes(config.reshape(c, k, 3, 6)) != 0).float()


def changed_layouts(config: Tensor, own: Tensor) -> Tensor:
    """(C, K, 3) from layout configs (C, K, 18) and the graph's own layouts `own` (K, 3, 6)
    of the same tensors (−1 padded): 1 where a config sets role r of node k to another
    order than the one its tensor has in the graph."""
    c, k, _ = config.shape
    codes = layout_codes(config.reshape(c, k, 3, 6))
    return ((codes != 0) & (codes != layout_codes(own))).float()


class FewestChanges(Heuristic):
    r"""Count the layouts a config moves away from the compiler's default:

    .. math:: s(c) = \sum_{k} \sum_{r \in \{out, in, kernel\}} [\,x_{c,k,r} \neq (-1)^6\,]

    over the configurable nodes k; every moved layout costs a copy, so fewer is faster.
    """

    kinds = ("layout",)
    unit = 1.0  # what one unit of the score is, as a ranker's `prior` reads it

    def weight(self, b: Batch | GraphTensors) -> Tensor:
        """(K, 3): what one moved layout of each (node, role) costs: here 1."""
        return torch.ones_like(b.config_bytes)

    def counted(self, config: Tensor, b: Batch | GraphTensors) -> Tensor:
        """(C, K, 3): which layouts of the configs (C, K, 18) of `b` the rule counts: the
        moved ones (set at all)."""
        return moved_layouts(config)

    def node_costs(self, configs: Tensor, g: Batch | GraphTensors) -> Tensor:
        return (self.counted(configs, g) * self.weight(g).to(configs.device)).sum(-1)


class MovedBytes(FewestChanges):
    r"""The bytes a config moves: each moved layout weighed by the size of its tensor,

    .. math:: s(c) = \sum_{k} \sum_{r} [\,x_{c,k,r} \neq (-1)^6\,] \cdot
              \mathrm{elements}_{k,r} \cdot \mathrm{bytes\ per\ element}_{k,r}

    (shape and element type from the node features of the node whose tensor role r of
    node k lays out), the traffic of the copies it forces.
    """

    unit = float(2**20)  # MiB

    def weight(self, b: Batch | GraphTensors) -> Tensor:
        return b.config_bytes


class ChangedBytes(MovedBytes):
    r"""The bytes a config changes: as `MovedBytes`, counting only the layouts set to
    another order than their tensor's own in the graph,

    .. math:: s(c) = \sum_{k} \sum_{r} [\,x_{c,k,r} \neq (-1)^6 \wedge
              x_{c,k,r} \neq \ell_{k,r}\,] \cdot \mathrm{bytes}_{k,r}

    with ℓ the layout of that tensor in the graph (node features 134–139 of the node
    role r lays out). Setting a tensor to the order it already has forces no copy; a
    random permutation of a 2-D tensor does so half the time.
    """

    def counted(self, config: Tensor, b: Batch | GraphTensors) -> Tensor:
        """The changed layouts: moved to another order than their tensor's own."""
        return changed_layouts(config, b.config_own.to(config.device))


class DefaultFirst(Heuristic):
    r"""The default config first, every other tied: s(c) = [c ≠ default].

    Layout: the default is the config with every entry −1. Tile: graphcost's options
    collections encode the default (every option unset) as
    `xla.options.OptionConfig.default().features()`; published tile:xla files mark no
    default, so there `fit_closed_form` refuses, and any graph without a default config
    gets every config tied.
    """

    kinds = ("layout", "tile")

    def __init__(self, kind: str, s: object, node_dim: int, config_dim: int):
        super().__init__(kind, s, node_dim, config_dim)
        default = torch.from_numpy(OptionConfig.default().features())
        self.register_buffer("default", default, persistent=False)

    def is_default(self, tile_configs: Tensor) -> Tensor:
        return (tile_configs == self.default).all(-1)

    def node_costs(self, configs: Tensor, g: Batch | GraphTensors) -> Tensor:
        return moved_layouts(configs).sum(-1)

    def total(self, costs: Tensor) -> Tensor:
        return (costs > 0).float()

    def config_scores(self, configs: Tensor, g: GraphTensors | None) -> Tensor:
        if self.kind == "tile":  # (..., 24) raw features
            return (~self.is_default(configs)).float()
        return super().config_scores(configs, g)

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
    r"""A linear model of log runtime on the config features alone, each knob one-hot:

    .. math:: s(c) = \sum_j \sum_{v \in V_j} w_{j,v}\,[x_{c,j} = v] + u^\top x_c, \quad
              (w, u) = \arg\min \sum_g \sum_{c \in g}
              \big(\tilde y_{g,c} - \tilde\phi_{g,c}^\top (w, u)\big)^2
              + \lambda n \lVert (w, u) \rVert^2

    A column with at most `LEVELS` distinct values in training (an option's choice) gets
    one weight per value V_j, so a knob's choices need not be ordered; a column with more
    (tile sizes) enters linearly through u. ỹ and φ̃ are log runtime and these features
    centred within each graph (only the order within a graph matters), n the number of
    configs. It sees no graph: what it ranks well, a knob's effect that holds in every
    program, needs no graph network.
    """

    kinds = ("tile",)
    LEVELS = 16  # most distinct values a column may have to be one-hot

    def __init__(self, kind: str, s: ConfigOnlySettings, node_dim: int, config_dim: int):
        super().__init__(kind, s, node_dim, config_dim)
        self.ridge = s.ridge
        # fixed shapes, so that a saved model loads into a fresh one: NaN never matches
        self.register_buffer("levels", torch.full((config_dim, self.LEVELS), float("nan")))
        self.register_buffer("level_weight", torch.zeros(config_dim, self.LEVELS))
        self.register_buffer("linear_weight", torch.zeros(config_dim))  # unfitted: all tied

    def features(self, x: Tensor) -> Tensor:
        """(..., d) config features → (..., d·LEVELS + d): the one-hot levels, then the
        columns that enter linearly (0 where a column is one-hot)."""
        one_hot = (x[..., None] == self.levels).flatten(-2).to(x.dtype)
        linear = x * torch.isnan(self.levels[:, 0]).to(x.dtype)
        return torch.cat([one_hot, linear], -1)

    def config_scores(self, configs: Tensor, g: GraphTensors | None) -> Tensor:
        """(..., C) the fitted log runtime of configs (..., C, d)."""
        return self.features(configs) @ torch.cat([self.level_weight.flatten(),
                                                   self.linear_weight])

    def fit_closed_form(self, graphs: Iterable[GraphTensors]) -> str:
        kept = []
        for g in graphs:
            x, y = g.tile_configs.double(), np.asarray(g.runtime, np.float64)
            ok = np.isfinite(y) & (y > 0)
            if ok.sum() >= 2:
                kept.append((x[torch.from_numpy(ok)], np.log(y[ok])))
        if not kept:
            raise UserError("model config-only: no train graph has two configs with "
                            "positive runtimes to fit")
        every = torch.cat([x for x, _ in kept])
        for j in range(every.shape[1]):
            values = torch.unique(every[:, j])
            if len(values) <= self.LEVELS:
                self.levels[j, :len(values)] = values.float()
        phis, ys = [], []
        for x, y in kept:
            phi = self.features(x.float()).double().numpy()
            phis.append(phi - phi.mean(0))
            ys.append(y - y.mean())
        phi, y = np.concatenate(phis), np.concatenate(ys)
        a = phi.T @ phi + self.ridge * phi.shape[0] * np.eye(phi.shape[1])
        w = torch.from_numpy(np.linalg.lstsq(a, phi.T @ y, rcond=None)[0]).float()
        self.level_weight.copy_(w[:self.levels.numel()].reshape(self.levels.shape))
        self.linear_weight.copy_(w[self.levels.numel():])
        one_hot = int((~torch.isnan(self.levels)).sum())
        return (f"least squares of log runtime on {one_hot} one-hot knob values and "
                f"{int(torch.isnan(self.levels[:, 0]).sum())} linear config features over "
                f"{phi.shape[0]} configs of {len(kept)} graphs, solved once: no optimiser "
                "steps")


#: the rules a ranker can learn a correction on top of (`RankerSettings.prior`), by kind;
#: each scores configs of one graph outside a batch (`config_scores`)
PRIORS: dict[str, tuple[type[FewestChanges | ConfigOnly], str]] = {
    "fewest-changes": (FewestChanges, "layout"),
    "moved-bytes": (MovedBytes, "layout"),
    "changed-bytes": (ChangedBytes, "layout"),
    "config-only": (ConfigOnly, "tile"),
}


class Prior(nn.Module):
    r"""A rule underneath a learned model: its scores, squashed and weighted,

    .. math:: p(c) = w \cdot \log(1 + s(c) / u) \ \text{(layout)}, \qquad
              p(c) = w \cdot s(c) \ \text{(tile: config-only's log runtime)}

    with the rule's unit u (one layout, or one MiB moved or changed) and a learned weight w (1 at
    first). The log keeps a copy of a 1 GB tensor within a few units of no copy, and a
    few KiB near no change, so the network breaks those ties (in bytes rather than MiB, a
    4 KiB copy scored 8 units from none and the ranker learned worse on top of it: τ
    0.366 against 0.415, layout:cpu:default, leave-family-out, seed 0).
    """

    def __init__(self, name: str, kind: str, node_dim: int, config_dim: int):
        super().__init__()
        rule, rule_kind = PRIORS.get(name, (None, None))
        if rule is None or rule_kind != kind:
            known = [n for n, (_, k) in PRIORS.items() if k == kind]
            raise SettingsError(f"ranker setting prior={name!r}: a {kind} ranker can learn "
                                f"on top of {', '.join(map(repr, known))} or none")
        self.kind = kind
        self.rule = rule(kind, ConfigOnlySettings(), node_dim, config_dim)
        self.weight = nn.Parameter(torch.ones(()))

    def fit(self, graphs: Iterable[GraphTensors]) -> str | None:
        """Fit the rule to the train graphs before training (config-only's least
        squares); what was fitted, or None when the rule needs nothing."""
        return self.rule.fit_closed_form(graphs) if isinstance(self.rule, ConfigOnly) else None

    def forward(self, b: Batch) -> Tensor:
        """(B, C) the weighted rule on a batch's configs."""
        return self.weight * self.squash(self.rule(b))

    def scores(self, g: GraphTensors, configs: Tensor) -> Tensor:
        """(C,) the weighted rule on configs of one graph, shaped like `g.configs(ids)`."""
        return self.weight * self.squash(self.rule.config_scores(
            configs.to(self.weight.device), g))

    def squash(self, s: Tensor) -> Tensor:
        return torch.log1p(s / self.rule.unit) if self.kind == "layout" else s
