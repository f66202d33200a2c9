"""sklearn-like estimators: every network answers `fit` / `predict` / `save` / `load`.

A `Model` is a network name, its settings dataclass, the FeatureTransform fitted on
the train split and the weights. A saved model carries all four, so `predict` on a
raw `.npz` graph needs nothing else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

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
            raise RuntimeError("the model is not fitted: call fit() or load() first")
        if graph.kind != self.kind:
            raise ValueError(f"a {self.kind} model cannot score {graph.kind} graph {graph.name}")
        hops = getattr(self.settings, "prune_hops", -1)
        return graph_tensors(self._prune(graph, hops), self.transform)

    # ---------------------------------------------------------------- verbs

    def fit(self, train: Sequence[Graph], valid: Sequence[Graph] | None = None,
            settings: Any = None, out_dir: str | Path | None = None,
            resume: bool = False) -> Model:
        """Train on graphs (see `graphcost.train.trainer.train`); keeps the best weights."""
        from graphcost.train.trainer import train as run_training

        run_training(self, train, valid, settings, out_dir=out_dir, resume=resume)
        return self

    def predict(self, graph: Graph, ids: np.ndarray | None = None,
                chunk_size: int = 1024) -> np.ndarray:
        """Scores (lower = faster) of configs `ids` (default: all), in bounded memory."""
        gt = graph if isinstance(graph, GraphTensors) else self.prepare(graph)
        ids = np.arange(gt.num_configs) if ids is None else np.asarray(ids, dtype=np.int64)
        if ids.size == 0:
            return np.zeros(0, dtype=np.float32)
        assert self.net is not None
        was_training = self.net.training
        self.net.eval()
        try:
            return self.net.score_configs(gt, ids, chunk_size).numpy()
        finally:
            self.net.train(was_training)

    def scorer(self, graph: Graph, cache: bool = True,
               chunk_size: int = 1024) -> Callable[[np.ndarray], np.ndarray]:
        """A function scoring raw candidate configs of `graph`'s program (lower = faster):
        (C, nc, 18) layouts of its configurable nodes, or (C, 24) tile/option features.

        Autotuning scores thousands of candidates of one program, so with `cache` the
        graph is pruned and transformed once and, for networks that offer
        `config_scorer` (the ranker), its config-independent states too; each call then
        runs only the config-dependent layers. `cache=False` redoes all of it on every
        call (the same scores, to measure what the cache saves). A config of `graph` gets
        the score `predict` gives it, for graphs without repeated configs.
        """
        if self.net is None:
            raise RuntimeError("the model is not fitted: call fit() or load() first")
        net = self.net

        def build() -> Callable[[torch.Tensor], torch.Tensor]:
            gt = self.prepare(graph)
            make = getattr(net, "config_scorer", None)
            if make is not None:
                return make(gt, chunk_size)

            def independent(configs: torch.Tensor) -> torch.Tensor:  # configs do not interact
                n = configs.shape[0]
                if gt.kind == "tile":
                    one = dataclasses.replace(gt, tile_configs=configs, runtime=np.zeros(n))
                else:
                    g = dataclasses.replace(gt.graph, node_config_feat=configs.numpy(),
                                            config_runtime=np.zeros(n))
                    one = dataclasses.replace(gt, graph=g, runtime=np.zeros(n))
                return net.score_configs(one, np.arange(n), chunk_size)

            return independent

        def in_eval(fn: Callable[[], Any]) -> Any:  # no dropout, whatever mode net is in
            was_training = net.training
            net.eval()
            try:
                return fn()
            finally:
                net.train(was_training)

        cached = in_eval(build) if cache else None

        def score(configs: np.ndarray) -> np.ndarray:
            raw = np.asarray(configs, dtype=np.float32)
            if raw.shape[0] == 0:
                return np.zeros(0, dtype=np.float32)
            assert self.transform is not None
            x = torch.from_numpy(self.transform.tile_config(raw) if self.kind == "tile" else raw)
            return in_eval(lambda: (cached or build())(x)).numpy()

        return score

    def rank(self, graph: Graph, chunk_size: int = 1024) -> tuple[np.ndarray, np.ndarray]:
        """All config indices fastest first (ties by index) and their scores."""
        scores = self.predict(graph, chunk_size=chunk_size)
        return np.argsort(scores, kind="stable"), scores

    # ---------------------------------------------------------------- persistence

    def state(self) -> dict:
        if self.net is None or self.transform is None:
            raise RuntimeError("the model is not fitted: nothing to save")
        return {"format": FORMAT, "name": self.name, "kind": self.kind,
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
