"""Step strategies: what differs between kinds of training, behind one small interface.

`graphcost.train.loop.fit` owns everything a run shares (epochs, optimiser, schedule,
early stopping, checkpoints, resume, validation, logging). A step strategy owns the
train graphs as it needs them and turns a list of graph indices into a loss:

- `FullGraphStep` (`mode=full`): back-propagate through whole (pruned) graphs;
- `SegmentStep` (`mode=gst`, `gst_fresh_segments=0`): a graph is the sum of its
  segments, every segment back-propagated in one segment's memory;
- `HistoryStep` (`mode=gst`, `gst_fresh_segments=k`): k segments back-propagated, the
  others taken from a table of historical embeddings (Graph Segment Training).

The segment strategies add a final phase (`head_epochs`) in which only the head trains.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from graphcost.errors import UserError
from graphcost.formats import Graph
from graphcost.models.base import collate
from graphcost.models.losses import RankingLoss
from graphcost.models.model import Model
from graphcost.train import distributed
from graphcost.train.memory import check_full_graph_memory
from graphcost.train.sampling import (
    extremes_and_middle,
    least_configs,
    sample_configs,
    train_config_ids,
)
from graphcost.train.settings import TrainSettings

NOTHING_TO_RANK = ("no train graph has two or more distinct configs to rank (a graph needs "
                   "two configs with different features)")


class Step(ABC):
    """The interface `fit` drives. A strategy is built after the network (`configure`
    runs before, for settings the network is built with)."""

    name = "full"  # the phase label of main-phase epochs in metrics.jsonl
    head_epochs = 0  # epochs of a final head-only phase (0: none)
    # across processes: wrap the network in DDP (True), or average gradients after the
    # backward pass (`sync_gradients`) for a step that calls the network's parts directly
    ddp = True

    def __init__(self, model: Model, net: nn.Module, graphs: Sequence[Graph], s: TrainSettings,
                 ctx: distributed.Context, out: Path | None):
        self.model, self.net, self.s, self.ctx = model, net, s, ctx
        self.names: list[str] = []  # the graph of each item a step draws, by name
        self.device = ctx.device
        self.amp = self.device.type == "cuda"  # bfloat16 autocast on GPUs
        self.loss_fn = ctx.loss(RankingLoss(s.loss or model.default_loss, margin=s.margin,
                                            temperature=s.temperature))

    def penalty(self, loss: Tensor) -> Tensor:
        """`loss` plus the network's regularisation term of the pass just made, if any."""
        assert self.model.net is not None
        extra = self.model.net.penalty()
        return loss if extra is None else loss + extra

    @staticmethod  # noqa: B027 (an optional hook)
    def configure(model: Model, s: TrainSettings) -> None:
        """Check the model suits the strategy and set model settings it depends on."""

    @abstractmethod
    def __len__(self) -> int:
        """How many train graphs the steps sample from."""

    @abstractmethod
    def loss(self, graphs: np.ndarray, rng: np.random.Generator, epoch: int) -> tuple[Tensor, int]:
        """The loss of one step over train graphs `graphs`, and the configs it scored."""

    def parameters(self, head: bool = False) -> list[nn.Parameter]:
        """What the optimiser trains: everything, or the head in the head phase."""
        assert self.model.net is not None
        return list(self.model.net.parameters())

    def sync_gradients(self, params: list[nn.Parameter]) -> None:  # noqa: B027
        """Make the gradients just computed the same on every rank (DDP already did,
        during the backward pass, when `ddp` is set)."""

    def begin_head(self, epoch: int) -> None:  # noqa: B027 (optional hook)
        """The head-only phase starts at `epoch` (also called when resuming inside it)."""

    def resume(self, epoch: int) -> None:  # noqa: B027 (optional hook)
        """The run goes on after `epoch` (0: a fresh run): forget state written after it."""

    def stats(self) -> dict[str, float]:
        """Extra per-epoch figures for metrics.jsonl (read once per epoch)."""
        return {}

    def close(self) -> dict:
        """Release what the strategy holds; figures for the run's result."""
        return {}


class FullGraphStep(Step):
    """B graphs × C sampled configs per step, back-propagated through whole graphs.
    Refused up front when the biggest step's activations would not fit in memory."""

    def __init__(self, model: Model, net: nn.Module, graphs: Sequence[Graph], s: TrainSettings,
                 ctx: distributed.Context, out: Path | None):
        super().__init__(model, net, graphs, s, ctx, out)
        self.items = []  # (graph tensors, candidate config ids)
        least = max(2, least_configs(s.min_configs, s.configs_per_graph))
        for n, g in enumerate(graphs):
            gt = model.prepare(g)
            ids, gt.runtime = train_config_ids(g, s.dedup)
            ids = extremes_and_middle(ids, gt.runtime, s.max_configs,
                                      np.random.default_rng((s.seed, n)))
            if ids.size >= least:
                self.items.append((gt, ids))
                self.names.append(g.name)
        if not self.items and least > 2:
            raise UserError(f"no train graph has {least} or more configs to rank; setting "
                            f"min_configs={s.min_configs} drops graphs with fewer (−1: fewer "
                            "than configs_per_graph); lower it or configs_per_graph")
        if not self.items:
            raise UserError(NOTHING_TO_RANK)
        check_full_graph_memory(model.settings, [gt.x.shape[0] for gt, _ in self.items],
                                s.graphs_per_batch, s.configs_per_graph, s.memory_budget,
                                model.kind)

    def __len__(self) -> int:
        return len(self.items)

    def loss(self, graphs: np.ndarray, rng: np.random.Generator, epoch: int) -> tuple[Tensor, int]:
        s = self.s
        picked = [(gt, sample_configs(rng, ids, gt.runtime, s.configs_per_graph, s.fast_bias))
                  for gt, ids in (self.items[i] for i in graphs)]
        # every rank drew the same global batch; it keeps its shard (DDP)
        batch = collate(self.ctx.shard(picked), with_runtime=True).to(self.device)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
            scores = self.net(batch)
        loss = self.penalty(self.loss_fn(scores.float(), batch.runtime, batch.mask))
        return loss, int(batch.mask.sum())
