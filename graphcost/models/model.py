"""A ranking model as a whole: network name, settings, feature transform and weights.

A `Model` is what `graphcost.train.fit` trains and `models.scorer.ConfigScorer` scores
with; it does not train itself (models never import training). A saved model carries
its name, settings, the FeatureTransform fitted on the train split, its weights and
the graphcost version that wrote it, so `Model.load` rebuilds it with no other input.
"""

from __future__ import annotations

import dataclasses
import pickle
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from graphcost import __version__, fields
from graphcost.atomic import atomic_open
from graphcost.data.features import FeatureTransform
from graphcost.data.prune import PruneCache
from graphcost.errors import SettingsError, UserError
from graphcost.formats import Graph
from graphcost.models.base import GraphTensors, RankingNet, graph_tensors
from graphcost.models.heuristics import (
    PRIORS,
    ChangedBytes,
    ConfigOnly,
    ConfigOnlySettings,
    DefaultFirst,
    FewestChanges,
    MovedBytes,
    RuleSettings,
)
from graphcost.models.official_layout import ResModel, ResModelSettings
from graphcost.models.official_tile import TileGNN, TileGNNSettings, TileMLP, TileMLPSettings
from graphcost.models.ranker import Ranker, RankerSettings

FORMAT = "graphcost-model/1"
#: what a saved model holds besides its format (`Model.state`)
MODEL_KEYS = ("name", "kind", "settings", "transform", "state_dict")


@dataclass(frozen=True)
class ModelSpec:
    net: type[RankingNet]
    settings: type
    kinds: tuple[str, ...]
    loss: str  # default training loss
    defaults: dict[str, Any] = field(default_factory=dict)  # model settings
    train: dict[str, Any] = field(default_factory=dict)  # training settings it defaults to
    features: str = "standard"  # FeatureTransform style


#: the official baselines' training recipes (tpu_graphs/baselines/*/train_args.py and
#: train_lib.py): Adam at a constant 1e-3 with per-tensor gradient clipping, no weight
#: decay (L2 is in the model), TF-Ranking's ListMLE, no config dedup, graphs with fewer
#: configs than a step samples dropped, early stopping on validation OPA over freshly
#: sampled configs each epoch.
_OFFICIAL = dict(optimizer="adam", lr=1e-3, clip="per_tensor", weight_decay=0.0, dedup=False,
                 min_configs=-1, select_on="opa", valid_resample=True)
OFFICIAL_LAYOUT = dict(_OFFICIAL, epochs=50, patience=25, graphs_per_batch=8,
                       configs_per_graph=16, valid_configs=16, grad_clip=1e-2,
                       fast_bias=1.0, temperature=1.0, last_batch="keep")
OFFICIAL_TILE = dict(_OFFICIAL, epochs=100, patience=20, graphs_per_batch=10,
                     configs_per_graph=10, valid_configs=10, grad_clip=1e-3,
                     fast_bias=0.0, temperature=10.0, last_batch="drop")
TILE_LOSS = f"tf-listmle:{1 / 1.02!r},tf-mse:{0.02 / 1.02!r}"  # 'ListMLELoss:1,MSE:0.02'


def _official_tile(backbone: str, join: str) -> ModelSpec:
    return ModelSpec(TileGNN, TileGNNSettings, ("tile",), TILE_LOSS,
                     {"backbone": backbone, "join": join,
                      "opcode_dim": 64 if backbone == "sage" else 32},
                     OFFICIAL_TILE, "minmax")


def _heuristic(net: type[RankingNet], kinds: tuple[str, ...], settings: type = RuleSettings,
               features: str = "raw") -> ModelSpec:
    """A heuristic baseline (`heuristics.py`): fitted in closed form, so no loss is used."""
    return ModelSpec(net, settings, kinds, "hinge", features=features)


MODELS: dict[str, ModelSpec] = {
    "ranker": ModelSpec(Ranker, RankerSettings, ("tile", "layout"), "hinge"),
    "resgcn": ModelSpec(ResModel, ResModelSettings, ("layout",), "tf-listmle", {},
                        OFFICIAL_LAYOUT, "minmax"),
    "sage-early": _official_tile("sage", "early"),
    "sage-late": _official_tile("sage", "late"),
    "resgcn-early": _official_tile("resgcn", "early"),
    "resgcn-late": _official_tile("resgcn", "late"),
    "mlp": ModelSpec(TileMLP, TileMLPSettings, ("tile",), TILE_LOSS, {}, OFFICIAL_TILE,
                     "minmax"),
    "fewest-changes": _heuristic(FewestChanges, ("layout",)),
    "moved-bytes": _heuristic(MovedBytes, ("layout",)),
    "changed-bytes": _heuristic(ChangedBytes, ("layout",)),
    "default-first": _heuristic(DefaultFirst, ("layout", "tile")),
    "config-only": _heuristic(ConfigOnly, ("tile",), ConfigOnlySettings, "standard"),
}


#: value rules of model settings, for every model that has the setting
MODEL_RULES: dict[str, fields.Rule] = {
    "hidden": fields.AT_LEAST_1, "opcode_dim": fields.AT_LEAST_1, "layers": fields.AT_LEAST_1,
    "dropout": fields.FRACTION, "prune_hops": fields.AT_LEAST_MINUS_1,
    "attn_layers": fields.NON_NEGATIVE, "heads": fields.AT_LEAST_1,
    "ref_configs": fields.AT_LEAST_1, "segment_size": fields.NON_NEGATIVE,
    "segment_halo": fields.AT_LEAST_MINUS_1, "join": fields.one_of("early", "late"),
    "tile_join": fields.one_of("early", "late"),
    "backbone": fields.one_of("sage", "resgcn"), "mlp_layers": fields.AT_LEAST_1,
    "num_ops": fields.AT_LEAST_1, "keep_nodes": fields.NON_NEGATIVE,
    "l2": fields.NON_NEGATIVE, "config_scale": fields.POSITIVE, "ridge": fields.NON_NEGATIVE,
    "prior": fields.one_of("", *PRIORS),
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
        base = settings if settings is not None else spec.settings(**spec.defaults)
        self.settings = fields.build(spec.settings, overrides, base, what=f"{name} setting")
        fields.check(self.settings, {k: r for k, r in MODEL_RULES.items()
                                     if hasattr(self.settings, k)})
        heads = getattr(self.settings, "heads", 1)
        if getattr(self.settings, "attn_layers", 0) and self.settings.hidden % heads:
            raise SettingsError(f"setting 'hidden' ({self.settings.hidden}) must be a "
                                f"multiple of 'heads' ({heads})")
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
        if transform.style != self.spec.features:
            raise UserError(f"model {self.name} needs {self.spec.features!r} features, "
                            f"the transform is {transform.style!r} (a model written by "
                            "another graphcost version?)")
        self.transform = transform
        config_dim = (transform.tile_config_dim if self.kind == "tile"
                      else transform.layout_config_dim)
        self.net = self.spec.net(self.kind, self.settings, transform.node_dim, config_dim)
        return self

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
        try:
            transform = FeatureTransform.from_dict(state["transform"])
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(f"its feature transform is damaged ({type(e).__name__}: {e})") \
                from None
        model.build(transform)
        assert model.net is not None
        try:
            model.net.load_state_dict(state["state_dict"])
        except RuntimeError as e:
            first = str(e).strip().splitlines()[0]
            raise UserError(f"the weights do not fit model {state['name']} as this graphcost "
                            f"builds it (written by graphcost {state.get('version', '?')}): "
                            f"{first}") from None
        model.net.to(check_device(device))
        return model

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


def atomic_save(obj: Any, path: str | Path) -> Path:
    """torch.save that never leaves a half-written checkpoint under `path`."""
    with atomic_open(path) as f:
        torch.save(obj, f)
    return Path(path)


def load_checkpoint(path: str | Path) -> dict:
    """A checkpoint's contents, unpickled with `weights_only=True`: tensors and plain
    Python values only, so a crafted file cannot run code. Every graphcost checkpoint
    holds only those (settings as dicts, transforms as lists). A file that is not one,
    or needs more than that to unpickle, is refused naming it."""
    if not Path(path).is_file():
        raise UserError(f"{path}: no such model file")
    if not zipfile.is_zipfile(path):  # torch.save's format since PyTorch 1.6
        raise UserError(f"{path}: not a PyTorch checkpoint (expected the zip archive "
                        "torch.save writes)")
    check_archive(path)
    try:
        state = torch.load(Path(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{path}: not a graphcost checkpoint that loads safely with "
                        f"weights_only=True ({first})") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as e:
        raise UserError(f"{path}: not a readable PyTorch checkpoint ({e})") from None
    if not isinstance(state, dict):
        raise UserError(f"{path}: not a graphcost checkpoint (a {type(state).__name__})")
    return state


def check_archive(path: str | Path) -> None:
    """Refuse a checkpoint whose bytes changed after torch.save wrote them: torch.load
    does not check the zip's CRCs, so a flipped bit in a tensor would load as other
    weights and rank differently without a word."""
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise UserError(f"{path}: a damaged checkpoint archive ({e})") from None
    if bad is not None:
        raise UserError(f"{path}: damaged: its member {bad} fails its CRC check (the file "
                        "changed after it was written); restore or retrain it")


def require_keys(state: dict, keys: Iterable[str], what: str) -> None:
    """Refuse a checkpoint dict that lacks a key the caller reads, naming the first."""
    missing = [k for k in keys if k not in state]
    if missing:
        raise UserError(f"not {what}: it has no {missing[0]!r} (needs {', '.join(keys)}; "
                        f"has {', '.join(map(str, state)) or 'nothing'})")


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
