"""Every training setting in one dataclass (saved inside each checkpoint)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from graphcost import fields
from graphcost.errors import SettingsError
from graphcost.models.losses import parse_loss
from graphcost.models.model import check_device
from graphcost.models.registry import MODELS, model_setting_types
from graphcost.train.memory import memory_budget_bytes

MODES = ("full", "gst")


@dataclass
class TrainSettings:
    epochs: int = 30  # most epochs of the main phase (early stopping may end it sooner)
    steps_per_epoch: int = 0  # 0: one pass over the train graphs per epoch
    graphs_per_batch: int = 4  # graphs per step (the global batch under DDP)
    configs_per_graph: int = 32  # configs sampled per graph and step, ranked together
    # > 0 samples fast configs more often (weight exp(−bias·rank/c), rank 0 the fastest;
    # 1.0 is the official layout sampler's Gumbel top-k over logits (c − rank)/c)
    fast_bias: float = 0.0
    dedup: bool = True  # train on one row per group of identical configs, at their median runtime
    # drop train and validation graphs with fewer configs (−1: fewer than configs_per_graph,
    # as the official loaders do; 0: keep all)
    min_configs: int = 0
    # > 0: keep at most this many configs of each train/validation graph, the official
    # way: the fastest third, the slowest third and a random rest
    max_configs: int = 0
    # 'fill': the last step of an epoch is filled from the next shuffle; 'keep': it is
    # shorter; 'drop': it is dropped, and validation keeps whole batches of graphs only
    # (the official tile pipeline's drop_remainder)
    last_batch: str = "fill"
    # 'graph': every train graph is drawn equally often; 'source': where the train graphs
    # pool several sources of programs (`crossval --group source`, or `train` given several
    # collections), every source is drawn equally often, its graphs equally among them;
    # '' = the model's default ('source' for the layout ranker, else 'graph')
    balance: str = ""
    # 'adamw' with warm-up and cosine decay; 'adam': Keras-style Adam (eps 1e-7) at a
    # constant lr, no weight decay (the official baselines)
    optimizer: str = "adamw"
    lr: float = 2e-3  # peak AdamW learning rate
    weight_decay: float = 1e-4  # on weight matrices only: never biases, norms, embeddings
    warmup_steps: int = 20  # steps of linear warm-up to lr
    min_lr_ratio: float = 0.05  # cosine decay ends at lr × this
    grad_clip: float = 1.0  # max gradient norm; 0: no clipping
    clip: str = "global"  # grad_clip bounds the norm of all gradients together, or 'per_tensor'
    loss: str = ""  # '' = the model's default; or e.g. 'hinge:1,listmle:0.5'
    margin: float = 0.1  # pairwise hinge loss margin
    temperature: float = 1.0  # tf-listmle divides scores by this
    valid_configs: int = 512  # fixed configs per validation graph
    # True: draw validation configs afresh each epoch with the train sampler (official)
    valid_resample: bool = False
    # early stopping and the best epoch follow 'score' (τ; tile: top-5 score) or 'opa'
    # (ordered pairs pooled over graphs, as TF-Ranking's OPAMetric)
    select_on: str = "score"
    patience: int = 10  # epochs without a better validation score before stopping
    seed: int = 0  # seeds sampling, initialisation and dropout: a run is a function of it
    device: str = "cpu"  # 'cuda' trains with bfloat16 autocast
    chunk_size: int = 1024  # configs per forward pass when predicting
    stop_after_epoch: int = 0  # > 0: stop after this epoch as if killed (to test resume)
    progress: bool = True  # a bar on a terminal, and one line per epoch
    # 'full': back-propagate through whole graphs; 'gst': Graph Segment Training
    # (graphcost.train.segment_steps), a graph encoded as the sum of its segments of the
    # model's `segment_size` nodes
    mode: str = "full"
    # gst: segments back-propagated per graph and step; 0: all, one at a time (exact
    # gradient, ~4/3 of a full step's compute); k ≥ 1: k of them, the others taken from a
    # table of historical embeddings (k = 1 is the paper's GST: time per step constant in
    # graph size; needs more epochs: `graphcost bench gst --gst-epochs`)
    gst_fresh_segments: int = 0
    stale_drop_p: float = 0.5  # gst: drop each historical embedding with this probability
    head_finetune_epochs: int = 2  # gst: final epochs training only the head, encoder frozen
    gst_max_configs: int = 1000  # gst: train on a fixed subset of ≤ this many configs per graph
    memory_budget: str = "75%"  # full: refuse steps estimated above this ('75%', '8G', 'off')
    # True: start from the model's own transform and weights (fine-tuning a trained model,
    # as autotuning does with what it measures) instead of fitting new ones
    warm_start: bool = False

    def check(self) -> None:
        """Refuse settings no run can use, naming the setting and what it must be."""
        fields.check(self, TRAIN_RULES)
        try:
            parse_loss(self.loss or "hinge")
        except ValueError as e:
            raise SettingsError(f"setting 'loss': {e}") from None
        check_device(self.device)


TRAIN_FIELDS = tuple(f.name for f in dataclasses.fields(TrainSettings))


def _budget_ok(spec: str) -> bool:
    try:
        memory_budget_bytes(spec)
    except ValueError:
        return False
    return True


TRAIN_RULES: dict[str, fields.Rule] = {
    "epochs": fields.AT_LEAST_1, "steps_per_epoch": fields.NON_NEGATIVE,
    "graphs_per_batch": fields.AT_LEAST_1, "configs_per_graph": fields.AT_LEAST_2,
    "fast_bias": fields.NON_NEGATIVE, "lr": fields.POSITIVE,
    # max_configs keeps thirds of the configs: below 3 it would keep them all
    "min_configs": fields.AT_LEAST_MINUS_1, "max_configs": fields.off_or_at_least(3),
    "last_batch": fields.one_of("fill", "keep", "drop"),
    "balance": fields.one_of("", "graph", "source"),
    "optimizer": fields.one_of("adamw", "adam"), "clip": fields.one_of("global", "per_tensor"),
    "temperature": fields.POSITIVE, "select_on": fields.one_of("score", "opa"),
    "weight_decay": fields.NON_NEGATIVE, "warmup_steps": fields.NON_NEGATIVE,
    "min_lr_ratio": fields.UNIT, "grad_clip": fields.NON_NEGATIVE,
    "margin": fields.POSITIVE, "valid_configs": fields.AT_LEAST_2,
    "patience": fields.AT_LEAST_1, "device": fields.one_of("cpu", "cuda"),
    "chunk_size": fields.AT_LEAST_1, "stop_after_epoch": fields.NON_NEGATIVE,
    "mode": fields.one_of(*MODES),
    "gst_fresh_segments": fields.NON_NEGATIVE, "stale_drop_p": fields.FRACTION,
    "head_finetune_epochs": fields.NON_NEGATIVE, "gst_max_configs": fields.off_or_at_least(2),
    "memory_budget": (_budget_ok, "a share like '75%', a size like '8G', or 'off'"),
}


def parse_settings(pairs: Sequence[str], model: str | None = None,
                   defaults: Mapping[str, Any] | None = None,
                   **given: Any) -> tuple[TrainSettings, dict[str, Any]]:
    """`key=value` pairs → (TrainSettings, model settings), so that one `--set` option
    reaches both: a key naming a TrainSettings field is a training setting, any other a
    model setting. Every value is coerced to its field's type and training settings are
    range-checked here, before any work; model keys are checked against `model`'s
    settings (any model's, when None), their ranges by `Model`.

    `given` are settings that the command's own options set (`--device`, `--seed`,
    `--epochs`: only those the user gave) and `defaults` the command's defaults, which
    `--set` may change. A key set twice with different values (by two `--set`s, or by
    `--set` and its option) is refused naming both, rather than one silently winning.
    A SettingsError names the bad pair, key or value."""
    model_keys = model_setting_types(model)
    train_types = fields.field_types(TrainSettings)
    train_kw: dict[str, str] = {}
    model_kw: dict[str, Any] = {}
    seen: dict[str, tuple[str, Any]] = {}  # key → (its first --set pair, its value)
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SettingsError(f"--set expects KEY=VALUE, got '{pair}'")
        if key not in train_types and key not in model_keys:
            raise SettingsError(
                f"unknown setting '{key}'; training settings: {', '.join(TRAIN_FIELDS)}; "
                f"{model or 'model'} settings: {', '.join(model_keys)} "
                "(graphcost train --help says what each means)")
        value = fields.coerce(key, train_types.get(key) or model_keys[key], raw)
        _refuse_conflict(key, seen.get(key), f"--set {pair}", value)
        seen.setdefault(key, (f"--set {pair}", value))
        if key in train_types:
            train_kw[key] = raw
        else:
            model_kw[key] = value
    for key, value in given.items():
        _refuse_conflict(key, seen.get(key), f"--{key.replace('_', '-')} {value}",
                         fields.coerce(key, train_types[key], value))
    settings = fields.build(TrainSettings, {**(defaults or {}), **train_kw, **given},
                            train_defaults(model), what="training setting")
    settings.check()
    return settings, model_kw


def _refuse_conflict(key: str, first: tuple[str, Any] | None, second: str, value: Any) -> None:
    """Refuse setting `key` given a second time (`second`) with another value than the
    first time: neither may silently win."""
    if first is not None and first[1] != value:
        raise SettingsError(f"setting '{key}' is given twice with different values: "
                            f"{first[0]} and {second}; give it once")


def train_defaults(model: str | None = None) -> TrainSettings:
    """The training settings a model trains with when none are given: the official
    recipe for the official baselines (`models.registry.MODELS`), graphcost's otherwise."""
    spec = MODELS.get(model or "")
    return fields.build(TrainSettings, spec.train if spec else {}, what="training setting")


def settings_help() -> dict[str, list[tuple[str, str]]]:
    """Every `--set` key with its default and meaning, by section: training settings,
    then each model's settings (what `graphcost train --help` lists)."""
    sections = {"Training settings": fields.describe(TrainSettings)}
    recipes: dict[str, list[str]] = {}  # models that share a training recipe, listed once
    for name, spec in MODELS.items():
        rows = fields.describe(spec.settings(**spec.defaults))
        for kind, values in spec.kind_defaults.items():  # e.g. prior='' [layout: 'changed-bytes']
            rows = [(key, f"{doc} [{kind}: {values[f.name]!r}]" if f.name in values else doc)
                    for (key, doc), f in zip(rows, dataclasses.fields(spec.settings),
                                             strict=True)]
        if rows:  # a training-free heuristic has none
            sections[f"Model settings of {name}"] = rows
        if spec.train:
            recipes.setdefault(repr(sorted(spec.train.items())), []).append(name)
    for names in recipes.values():
        recipe = MODELS[names[0]].train
        sections[f"Training defaults of {', '.join(names)} (the official recipe)"] = [
            (f"{k}={v!r}", "") for k, v in recipe.items()]
    return sections
