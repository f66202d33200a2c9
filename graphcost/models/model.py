"""A ranking model as a whole: network name, settings, feature transform and weights.

A `Model` is what `graphcost.train.fit` trains and `models.scorer.ConfigScorer` scores
with; it does not train itself (models never import training). A saved model carries
its name, settings, the FeatureTransform fitted on the train split, its weights and
the graphcost version that wrote it, so `Model.load` rebuilds it with no other input.
A model of several `members` (`Model.ensemble`) holds that many networks trained apart
and scores with their mean (`models.ensemble`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphcost import __version__, fields
from graphcost.data.features import FeatureTransform
from graphcost.data.loops import depth_features, with_loops
from graphcost.data.prune import PruneCache, graph_key, kept_nodes, prune_graph
from graphcost.errors import SettingsError, UserError
from graphcost.formats import Graph
from graphcost.models.base import GraphTensors, RankingNet, graph_tensors
from graphcost.models.checkpoint import atomic_save, load_checkpoint, require_keys
from graphcost.models.ensemble import EnsembleNet
from graphcost.models.registry import MODELS

FORMAT = "graphcost-model/1"
#: what a saved model holds besides its format (`Model.state`)
MODEL_KEYS = ("name", "kind", "settings", "transform", "state_dict")


class Model:
    """A ranking model of one kind ('tile' or 'layout'); lower scores mean faster."""

    def __init__(self, name: str = "ranker", kind: str = "layout", settings: Any = None,
                 **overrides: Any):
        if name not in MODELS:
            raise SettingsError(f"unknown model '{name}'; known: {', '.join(MODELS)}")
        spec = MODELS[name]
        if kind not in spec.kinds:
            raise SettingsError(f"model '{name}' is for {'/'.join(spec.kinds)} "
                                f"collections, not {kind}")
        self.name, self.kind, self.spec = name, kind, spec
        base = settings if settings is not None else spec.default_settings(kind)
        self.settings = fields.build(spec.settings, overrides, base, what=f"{name} setting")
        fields.check(self.settings, getattr(spec.settings, "RULES", {}))
        check_kind(spec.settings, overrides, name, kind)
        heads = getattr(self.settings, "heads", 1)
        if getattr(self.settings, "attn_layers", 0) and self.settings.hidden % heads:
            raise SettingsError(f"setting 'hidden' ({self.settings.hidden}) must be a "
                                f"multiple of 'heads' ({heads})")
        if overrides.get("correction", 1.0) != 1.0 and not self.settings.prior:
            raise SettingsError("setting 'correction' weighs what a ranker learned on top "
                                "of its rule: it needs a 'prior'")
        self.transform: FeatureTransform | None = None
        self.net: RankingNet | None = None
        #: networks scored as one (`models.ensemble`); 1: a single network
        self.members = 1
        #: each member's own feature transform, when they differ (`transform` is then
        #: their union, `FeatureTransform.union`); None: all read `transform`
        self.member_transforms: list[FeatureTransform] | None = None
        #: the collection it was trained on (`tile:xla`, `options:cpu`, …; None when not
        #: known): a tile model of TPU tile sizes must not rank XLA:CPU compiler options
        self.collection: str | None = None
        self._prune = PruneCache()
        #: with `loops`: each graph, its loop edges added, pruned; and its kept nodes' depths
        self._loops: dict[tuple, tuple[Graph, np.ndarray]] = {}

    def __repr__(self) -> str:
        return f"Model({self.name!r}, {self.kind!r}, {self.settings})"

    @property
    def default_loss(self) -> str:
        return self.spec.loss

    @property
    def default_balance(self) -> str:
        """How this model's training draws pooled sources when setting `balance` is ''."""
        return self.spec.balance.get(self.kind, "graph")

    # ---------------------------------------------------------------- building

    def build(self, transform: FeatureTransform,
              member_transforms: Sequence[FeatureTransform] | None = None) -> Model:
        """Create the network for a fitted transform (its input sizes come from it); an
        ensemble's members each for their own transform, read from `transform`, their
        union (`FeatureTransform.union`)."""
        if transform.style != self.spec.features:
            raise UserError(f"model {self.name} needs {self.spec.features!r} features, "
                            f"the transform is {transform.style!r} (a model written by "
                            "another graphcost version?)")
        self.transform = transform
        self.member_transforms = list(member_transforms) if member_transforms else None
        own = self.member_transforms or [transform] * self.members
        nets = [self.spec.net(self.kind, self.settings, t.node_dim,
                              t.tile_config_dim if self.kind == "tile" else t.layout_config_dim)
                for t in own]
        inputs = None if self.member_transforms is None else [transform.map_to(t) for t in own]
        self.net = nets[0] if self.members == 1 else EnsembleNet(nets, inputs)
        return self

    @classmethod
    def ensemble(cls, models: Sequence[Model], names: Sequence[str] = ()) -> Model:
        """One model scoring with the mean of `models`' networks (`names` say which is
        which in a refusal). They must be one model trained apart: the same name, kind,
        settings and training collection, each a single network; each keeps the feature
        transform it was fitted with (on other graphs when it early-stopped on others)."""
        names = list(names) or [f"model {i + 1}" for i in range(len(models))]
        if len(models) < 2:
            raise UserError(f"an ensemble needs at least two models, got {len(models)}")
        first = models[0]
        for m, name in zip(models, names, strict=True):
            if m.net is None or m.transform is None:
                raise UserError(f"{name}: not a trained model")
            if m.members != 1:
                raise UserError(f"{name}: already an ensemble of {m.members}; give its "
                                "members' own files")
            differs = next((what for what, a, b in (
                ("model", m.name, first.name), ("kind", m.kind, first.kind),
                ("collection", m.collection, first.collection),
                ("settings", dataclasses.asdict(m.settings), dataclasses.asdict(first.settings)))
                if a != b), None)
            if differs is not None:
                raise UserError(f"{name} differs from {names[0]} in its {differs}; an "
                                "ensemble's members are one model trained with other seeds")
        transforms = [m.transform for m in models]
        try:
            union = FeatureTransform.union(transforms)
        except ValueError as e:
            raise UserError(f"the members' feature transforms cannot be read from one "
                            f"prepared graph: {e}") from None
        same = all(t.to_dict() == union.to_dict() for t in transforms)
        out = cls(first.name, first.kind, first.settings)
        out.collection, out.members = first.collection, len(models)
        out.build(union, None if same else transforms)
        assert isinstance(out.net, EnsembleNet)
        for net, m in zip(out.net.members, models, strict=True):
            net.load_state_dict(m.net.state_dict())
        return out

    def fit_transform(self, graphs: Iterable[Graph]) -> FeatureTransform:
        """The feature transform this model is trained with, fitted on `graphs`."""
        return FeatureTransform.fit(graphs, self.spec.features)

    def prepare(self, graph: Graph) -> GraphTensors:
        """The graph as the network sees it: pruned (if the model prunes), transformed."""
        if self.transform is None:
            raise RuntimeError("the model is not fitted: train it (graphcost.train.fit) "
                               "or load() one")
        if graph.kind != self.kind:
            raise UserError(f"a {self.kind} model cannot score {graph.kind} graph {graph.name}")
        hops = getattr(self.settings, "prune_hops", -1)
        if not getattr(self.settings, "loops", False):  # a layout-only setting
            return graph_tensors(self._prune(graph, hops), self.transform)
        key = (*graph_key(graph), hops)
        if key not in self._loops:  # each graph's loops found and pruned once per process
            looped, depth = with_loops(graph)
            self._loops[key] = (prune_graph(looped, hops),
                                depth_features(depth[kept_nodes(looped, hops)]))
        pruned, depth_rows = self._loops[key]
        g = graph_tensors(pruned, self.transform)
        return dataclasses.replace(g, x=torch.cat([g.x, torch.from_numpy(depth_rows)], dim=1))

    # ---------------------------------------------------------------- persistence

    def state(self) -> dict:
        if self.net is None or self.transform is None:
            raise RuntimeError("the model is not fitted: nothing to save")
        return {"format": FORMAT, "version": __version__, "name": self.name, "kind": self.kind,
                "collection": self.collection, "members": self.members,
                "settings": dataclasses.asdict(self.settings),
                "transform": self.transform.to_dict(),
                **({} if self.member_transforms is None else
                   {"member_transforms": [t.to_dict() for t in self.member_transforms]}),
                "state_dict": {k: v.detach().cpu() for k, v in self.net.state_dict().items()}}

    @classmethod
    def from_state(cls, state: dict, device: str | torch.device = "cpu") -> Model:
        if state.get("format") != FORMAT:
            raise UserError(f"not a graphcost model (format {state.get('format')!r}, "
                            f"expected {FORMAT!r})")
        require_keys(state, MODEL_KEYS, "a graphcost model")
        for key in ("settings", "transform", "state_dict"):
            if not isinstance(state[key], dict):
                raise UserError(f"not a graphcost model: its {key!r} is a "
                                f"{type(state[key]).__name__}, not a dict")
        if state.get("name") not in MODELS:
            raise UserError(f"a model of unknown name {state.get('name')!r}; this graphcost "
                            f"knows {', '.join(MODELS)}")
        spec = MODELS[state["name"]]
        saved = {**getattr(spec.settings, "BEFORE", {}), **state["settings"]}  # older files
        settings = fields.build(spec.settings, saved,
                                what=f"{state['name']} setting in the checkpoint")
        model = cls(state["name"], state["kind"], settings)
        model.collection = state.get("collection")  # absent in older files
        members = state.get("members", 1)  # absent in older files: one network
        if not isinstance(members, int) or isinstance(members, bool) or members < 1:
            raise UserError(f"not a graphcost model: its 'members' is {members!r}, not a "
                            "count of networks")
        model.members = members
        model.load_state(state)
        model.net.to(check_device(device))
        return model

    def load_state(self, state: dict) -> Model:
        """Build from a saved state's feature transform(s) and load its weights: what
        `from_state` and a resumed training run both do."""
        try:
            transform = FeatureTransform.from_dict(state["transform"])
            own = [FeatureTransform.from_dict(t) for t in state.get("member_transforms") or ()]
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(f"its feature transform is damaged ({type(e).__name__}: {e})") \
                from None
        if own and len(own) != self.members:
            raise UserError(f"not a graphcost model: {len(own)} member transforms for "
                            f"{self.members} members")
        self.build(transform, own or None)
        assert self.net is not None
        try:
            self.net.load_state_dict(state["state_dict"])
        except RuntimeError as e:
            first = str(e).strip().splitlines()[0]
            raise UserError(f"the weights do not fit model {self.name} as this graphcost "
                            f"builds it (written by graphcost {state.get('version', '?')}): "
                            f"{first}") from None
        return self

    def save(self, path: str | Path) -> Path:
        """Write the model atomically (temp file, then rename)."""
        return atomic_save(self.state(), path)

    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "cpu") -> Model:
        """A saved model (`model.pt`, `best.pt`) or the model inside a training `last.pt`."""
        state = load_checkpoint(path)
        if "model" in state and "format" not in state:  # a training checkpoint
            state = state["model"]
        try:
            return cls.from_state(state, device)
        except UserError as e:
            raise UserError(f"{path}: {e}") from None


def check_kind(settings: type, given: Iterable[str], name: str, kind: str) -> None:
    """Refuse a setting given for a model of the kind it does not apply to (the
    settings class's `KINDS`: setting → the one kind it applies to), naming it and the
    kind: the other kind's network never reads it, so it would be stored and ignored."""
    kinds = getattr(settings, "KINDS", {})
    wrong = [key for key in given if kinds.get(key, kind) != kind]
    if wrong:
        raise SettingsError(
            "; ".join(f"setting '{key}' applies to {kinds[key]} models only" for key in wrong)
            + f", and this is a {kind} {name} model (of a {kind} collection): drop it")


def check_device(device: str | torch.device) -> torch.device:
    """The torch device `device` names, refused (a SettingsError, before any work) when
    this machine cannot run on it: CUDA without a GPU would end in torch's traceback."""
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise SettingsError(f"device {str(device)!r}: not a device (cpu, cuda or cuda:N)") \
            from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        build = "" if torch.version.cuda else ", a build without CUDA"
        raise SettingsError(f"device {str(device)!r}: CUDA is not available on this machine "
                            f"(torch {torch.__version__}{build}); use cpu")
    if dev.type == "cuda" and (dev.index or 0) >= torch.cuda.device_count():
        raise SettingsError(f"device {str(device)!r}: this machine has "
                            f"{torch.cuda.device_count()} CUDA devices")
    return dev


def load_model(path: str | Path, device: str | torch.device = "cpu") -> Model:
    return Model.load(path, device)


def as_model(model: Model | str | Path, device: str | torch.device = "cpu") -> Model:
    """A model given as itself or as the path of a saved one."""
    return model if isinstance(model, Model) else Model.load(model, device)
