"""Every model graphcost trains, by name: its network, settings, kinds, loss and the
training recipe it defaults to. `graphcost train --model NAME` and `Model(NAME, kind)`
look names up here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graphcost import fields
from graphcost.errors import SettingsError
from graphcost.models.base import RankingNet
from graphcost.models.heuristics import (
    ChangedBytes,
    ConfigOnly,
    ConfigOnlySettings,
    DefaultFirst,
    FewestChanges,
    MovedBytes,
    RuleSettings,
)
from graphcost.models.official_layout import OFFICIAL_LAYOUT, ResModel, ResModelSettings
from graphcost.models.official_tile import (
    OFFICIAL_TILE,
    TILE_LOSS,
    TileGNN,
    TileGNNSettings,
    TileMLP,
    TileMLPSettings,
)
from graphcost.models.ranker import Ranker, RankerSettings


@dataclass(frozen=True)
class ModelSpec:
    net: type[RankingNet]
    settings: type
    kinds: tuple[str, ...]
    loss: str  # default training loss
    defaults: dict[str, Any] = field(default_factory=dict)  # model settings
    train: dict[str, Any] = field(default_factory=dict)  # training settings it defaults to
    features: str = "standard"  # FeatureTransform style
    official: str = ""  # the TpuGraphs baseline it reproduces, by the official code's name
    # model settings whose default depends on the kind of collection: kind → settings
    kind_defaults: dict[str, dict[str, Any]] = field(default_factory=dict)
    # how training draws pooled sources of programs by default (training setting
    # `balance`), by kind of collection: 'graph' where a kind is not named
    balance: dict[str, str] = field(default_factory=dict)

    def default_settings(self, kind: str) -> Any:
        """The settings a model of this name and kind starts from."""
        return self.settings(**{**self.defaults, **self.kind_defaults.get(kind, {})})


def _official_tile(backbone: str, join: str) -> ModelSpec:
    official = f"{join.title()}Join{'SAGE' if backbone == 'sage' else 'ResGCN'}"
    return ModelSpec(TileGNN, TileGNNSettings, ("tile",), TILE_LOSS,
                     {"backbone": backbone, "join": join,
                      "opcode_dim": 64 if backbone == "sage" else 32},
                     OFFICIAL_TILE, "minmax", official=official)


def _heuristic(net: type[RankingNet], kinds: tuple[str, ...], settings: type = RuleSettings,
               features: str = "raw") -> ModelSpec:
    """A heuristic baseline (`heuristics.py`): fitted in closed form, so no loss is used."""
    return ModelSpec(net, settings, kinds, "hinge", features=features)


MODELS: dict[str, ModelSpec] = {
    # a layout ranker learns on top of changed-bytes: leave-family-out and on the external
    # programs it ranked better than from scratch; it sees while loops (`data.loops`):
    # held out source by source that ranked better on both layout collections; a tile
    # ranker on top of config-only,
    # keeping 0.3 of what it learned: held out source by source it is then at or above
    # the rule on every source, where from scratch it was below it (docs/results.md)
    "ranker": ModelSpec(Ranker, RankerSettings, ("tile", "layout"), "hinge",
                        kind_defaults={"layout": {"prior": "changed-bytes", "loops": True},
                                       "tile": {"prior": "config-only", "correction": 0.3}},
                        # held out source by source, a layout ranker trained drawing every
                        # source equally often ranked better than one drawing every graph
                        # (layout:cpu:default) or level (random): docs/results.md
                        balance={"layout": "source"}),
    # the official baselines; the first of each kind is its default (the paper's)
    "resgcn": ModelSpec(ResModel, ResModelSettings, ("layout",), "tf-listmle", {},
                        OFFICIAL_LAYOUT, "minmax", official="ResModel"),
    "sage-early": _official_tile("sage", "early"),
    "sage-late": _official_tile("sage", "late"),
    "resgcn-early": _official_tile("resgcn", "early"),
    "resgcn-late": _official_tile("resgcn", "late"),
    "mlp": ModelSpec(TileMLP, TileMLPSettings, ("tile",), TILE_LOSS, {}, OFFICIAL_TILE,
                     "minmax", official="MLP"),
    # the rules that need no learning
    "fewest-changes": _heuristic(FewestChanges, ("layout",)),
    "moved-bytes": _heuristic(MovedBytes, ("layout",)),
    "changed-bytes": _heuristic(ChangedBytes, ("layout",)),
    "default-first": _heuristic(DefaultFirst, ("layout", "tile")),
    "config-only": _heuristic(ConfigOnly, ("tile",), ConfigOnlySettings, "standard"),
}


def model_setting_types(name: str | None = None) -> dict[str, str]:
    """Setting name → type of model `name` (of every model when None), for `--set`."""
    if name is not None and name not in MODELS:
        raise SettingsError(f"unknown model '{name}'; known: {', '.join(MODELS)}")
    out: dict[str, str] = {}
    for n, spec in MODELS.items():
        if name in (None, n):
            out.update(fields.field_types(spec.settings))
    return out


def model_names(kind: str | None = None, learned: bool | None = None) -> list[str]:
    """Registered model names, optionally only those for one kind of collection, and
    only the learned ones (True) or only the heuristics (False)."""
    return [n for n, s in MODELS.items() if (kind is None or kind in s.kinds)
            and (learned is None or learned != s.net.closed_form)]


def baselines(kind: str) -> list[str]:
    return [n for n in model_names(kind) if n != "ranker"]


def official_models(kind: str) -> list[str]:
    """The official TpuGraphs baselines for `kind`, the default (the paper's) first."""
    return [n for n in model_names(kind) if MODELS[n].official]


def official_baseline(kind: str) -> str:
    """The paper's default baseline for `kind`: ResModel (layout), EarlyJoinSAGE (tile)."""
    return official_models(kind)[0]


def official_names() -> dict[str, str]:
    """The official code's model name → graphcost's (`ResModel` → `resgcn`)."""
    return {s.official: n for n, s in MODELS.items() if s.official}


def portfolio_rules(kind: str) -> list[str]:
    """The rules that order the configs other than the default (default-first ties them
    all): what a portfolio of training-free picks draws on."""
    return [n for n in model_names(kind, learned=False) if MODELS[n].net is not DefaultFirst]


def models_help() -> str:
    """The `--model` help: every registered model, with the kinds of collection it ranks."""
    def listed(names: list[str]) -> str:
        groups: dict[tuple[str, ...], list[str]] = {}
        for n in names:
            groups.setdefault(MODELS[n].kinds, []).append(n)
        return "; ".join(f"{', '.join(ns)} ({', '.join(k)})" for k, ns in groups.items())

    learned = [n for n in model_names(learned=True) if n != "ranker"]
    return (f"{listed(['ranker'])}, or an official baseline: {listed(learned)}; or a rule "
            f"needing no learning: {listed(model_names(learned=False))}")
