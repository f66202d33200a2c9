"""A ranking model as a whole: network name, settings, feature transform and weights.

A `Model` is what `graphcost.train.fit` trains and `models.scorer.ConfigScorer` scores
with; it does not train itself (models never import training). A saved model carries
its name, settings, the FeatureTransform fitted on the train split, its weights and
the graphcost version that wrote it, so `Model.load` rebuilds it with no other input.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from graphcost import __version__
from graphcost.atomic import atomic_open
from graphcost.data.features import FeatureTransform
from graphcost.data.prune import PruneCache
from graphcost.formats import Graph
from graphcost.models.base import GraphTensors, RankingNet, graph_tensors
from graphcost.models.baselines import (
    MLPSettings,
    MLPTile,
    ResGCNLayout,
    ResGCNSettings,
    SageSettings,
    SageTile,
)
from graphcost.models.ranker import Ranker, RankerSettings

FORMAT = "graphcost-model/1"


@dataclass(frozen=True)
class ModelSpec:
    net: type[RankingNet]
    settings: type
    kinds: tuple[str, ...]
    loss: str  # default training loss
    defaults: dict[str, Any] = field(default_factory=dict)


MODELS: dict[str, ModelSpec] = {
    "ranker": ModelSpec(Ranker, RankerSettings, ("tile", "layout"), "hinge"),
    "sage-early": ModelSpec(SageTile, SageSettings, ("tile",), "listmle", {"join": "early"}),
    "sage-late": ModelSpec(SageTile, SageSettings, ("tile",), "listmle", {"join": "late"}),
    "mlp": ModelSpec(MLPTile, MLPSettings, ("tile",), "listmle"),
    "resgcn": ModelSpec(ResGCNLayout, ResGCNSettings, ("layout",), "hinge"),
}


def model_names(kind: str | None = None) -> list[str]:
    """Registered model names, optionally only those for one kind of collection."""
    return [n for n, s in MODELS.items() if kind is None or kind in s.kinds]


def baselines(kind: str) -> list[str]:
    return [n for n in model_names(kind) if n != "ranker"]


class Model:
    """A ranking model of one kind ('tile' or 'layout'); lower scores mean faster."""

    def __init__(self, name: str = "ranker", kind: str = "layout", settings: Any = None,
                 **overrides: Any):
        if name not in MODELS:
            raise ValueError(f"unknown model '{name}'; known: {', '.join(MODELS)}")
        spec = MODELS[name]
        if kind not in spec.kinds:
            raise ValueError(f"model '{name}' is for {'/'.join(spec.kinds)} collections, "
                             f"not {kind}")
        self.name, self.kind, self.spec = name, kind, spec
        base = settings if settings is not None else spec.settings(**spec.defaults)
        self.settings = dataclasses.replace(base, **overrides)
        self.transform: FeatureTransform | None = None
        self.net: RankingNet | None = None
        self._prune = PruneCache()

    def __repr__(self) -> str:
        return f"Model({self.name!r}, {self.kind!r}, {self.settings})"

    @property
    def default_loss(self) -> str:
        return self.spec.loss

    # ---------------------------------------------------------------- building

    def build(self, transform: FeatureTransform) -> Model:
        """Create the network for a fitted transform (its input sizes come from it)."""
        self.transform = transform
        self.net = self.spec.net(self.kind, self.settings, transform.node_dim,
                                 transform.tile_config_dim)
        return self

    def prepare(self, graph: Graph) -> GraphTensors:
        """The graph as the network sees it: pruned (if the model prunes), transformed."""
        if self.transform is None:
            raise RuntimeError("the model is not fitted: train it (graphcost.train.fit) "
                               "or load() one")
        if graph.kind != self.kind:
            raise ValueError(f"a {self.kind} model cannot score {graph.kind} graph {graph.name}")
        hops = getattr(self.settings, "prune_hops", -1)
        return graph_tensors(self._prune(graph, hops), self.transform)

    # ---------------------------------------------------------------- persistence

    def state(self) -> dict:
        if self.net is None or self.transform is None:
            raise RuntimeError("the model is not fitted: nothing to save")
        return {"format": FORMAT, "version": __version__, "name": self.name, "kind": self.kind,
                "settings": dataclasses.asdict(self.settings),
                "transform": self.transform.to_dict(),
                "state_dict": {k: v.detach().cpu() for k, v in self.net.state_dict().items()}}

    @classmethod
    def from_state(cls, state: dict, device: str | torch.device = "cpu") -> Model:
        if state.get("format") != FORMAT:
            raise ValueError(f"not a graphcost model checkpoint (format {state.get('format')})")
        spec = MODELS[state["name"]]
        model = cls(state["name"], state["kind"], spec.settings(**state["settings"]))
        model.build(FeatureTransform.from_dict(state["transform"]))
        assert model.net is not None
        model.net.load_state_dict(state["state_dict"])
        model.net.to(device)
        return model

    def save(self, path: str | Path) -> Path:
        """Write the model atomically (temp file, then rename)."""
        return atomic_save(self.state(), path)

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu") -> Model:
        state = torch.load(Path(path), map_location="cpu", weights_only=False)
        if "model" in state and "format" not in state:  # a training checkpoint
            state = state["model"]
        return cls.from_state(state, device)


def atomic_save(obj: Any, path: str | Path) -> Path:
    """torch.save that never leaves a half-written checkpoint under `path`."""
    with atomic_open(path) as f:
        torch.save(obj, f)
    return Path(path)


def load_model(path: str | Path, device: str | torch.device = "cpu") -> Model:
    return Model.load(path, device)


def as_model(model: Model | str | Path, device: str | torch.device = "cpu") -> Model:
    """A model given as itself or as the path of a saved one."""
    return model if isinstance(model, Model) else Model.load(model, device)
