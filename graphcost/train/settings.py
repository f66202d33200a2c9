"""Every training setting in one dataclass (saved inside each checkpoint)."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MODES = ("full", "gst")


@dataclass
class TrainSettings:
    epochs: int = 30
    steps_per_epoch: int = 0  # 0: one pass over the train graphs per epoch
    graphs_per_batch: int = 4
    configs_per_graph: int = 32
    fast_bias: float = 0.0  # > 0 samples fast configs more often (weight exp(−bias·rank/c))
    dedup: bool = True  # drop duplicate configs from training (keep the fastest)
    lr: float = 2e-3
    weight_decay: float = 1e-4  # on weight matrices only: never biases, norms, embeddings
    warmup_steps: int = 20
    min_lr_ratio: float = 0.05
    grad_clip: float = 1.0
    loss: str = ""  # '' = the model's default; or e.g. 'hinge:1,listmle:0.5'
    margin: float = 0.1
    valid_configs: int = 512  # fixed configs per validation graph
    patience: int = 10  # epochs without a better validation score before stopping
    seed: int = 0
    device: str = "cpu"  # 'cuda' trains with bfloat16 autocast
    chunk_size: int = 1024  # configs per forward pass when predicting
    stop_after_epoch: int = 0  # > 0: stop after this epoch as if killed (to test resume)
    progress: bool = True
    # 'full': back-propagate through whole graphs; 'gst': Graph Segment Training
    # (graphcost.train.segment_steps), a graph encoded as the sum of its segments
    mode: str = "full"
    segment_size: int = 1000  # gst: nodes per segment
    # gst: segments back-propagated per graph and step; 0: all, one at a time (exact
    # gradient, ~4/3 of a full step's compute); k ≥ 1: k of them, the others taken from a
    # table of historical embeddings (k = 1 is the paper's GST: time per step constant in
    # graph size; needs more epochs: `graphcost bench gst --gst-epochs`)
    gst_fresh_segments: int = 0
    stale_drop_p: float = 0.5  # gst: drop each historical embedding with this probability
    head_finetune_epochs: int = 2  # gst: final epochs training only the head, encoder frozen
    gst_max_configs: int = 1000  # gst: train on a fixed subset of ≤ this many configs per graph
    memory_budget: str = "75%"  # full: refuse steps estimated above this ('75%', '8G', 'off')

    def check(self) -> None:
        """Refuse settings no run can use, naming the setting and what it must be."""
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got '{self.mode}'")
        if not 0.0 <= self.stale_drop_p < 1.0:
            raise ValueError(f"stale_drop_p must be in [0, 1), got {self.stale_drop_p}")
        for name in ("epochs", "graphs_per_batch", "configs_per_graph"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")


def parse_settings(pairs: Sequence[str], **fixed: Any) -> tuple[TrainSettings, dict[str, Any]]:
    """`key=value` pairs → (TrainSettings, model settings), so that one `--set` option
    reaches both: a key naming a TrainSettings field is a training setting, any other a
    model setting (the model checks it). A value is a Python literal where it parses as
    one, else a string; `fixed` settings (device, seed, …) win. A ValueError names a
    pair without `=`."""
    train_fields = {f.name for f in dataclasses.fields(TrainSettings)}
    train_kw: dict[str, Any] = {}
    model_kw: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise ValueError(f"expected key=value, got '{pair}'")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        (train_kw if key in train_fields else model_kw)[key] = value
    return TrainSettings(**{**train_kw, **fixed}), model_kw
