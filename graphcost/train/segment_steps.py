"""Graph Segment Training (GST, docs/design.md §6): the segment step strategies.

A graph is cut into contiguous segments of ~`segment_size` nodes, the model's setting
(`GST_SEGMENT_SIZE` when it has none; `models/segments.py`), and its embedding is the
SUM of its segments' embeddings, so a step never holds more than one segment's
activations:

- `SegmentStep` back-propagates every segment, each under `torch.utils.checkpoint`:
  the forward pass keeps no activations and the backward pass recomputes one segment at
  a time with the same dropout draws, so the gradient is exactly the segmented model's,
  at about 4/3 of a full step's compute (time per step still grows with the graph).
- `HistoryStep` is the paper's GST: k sampled segments per graph are back-propagated
  (`gst_fresh_segments`), every other segment's embedding comes from the
  `EmbeddingTable` of historical embeddings, with stale embedding dropout; the fresh
  ones are written back. Time per step does not grow with the graph; it learns less
  per epoch (`graphcost bench gst` measures how much).

Both end with `head_finetune_epochs` in which the encoder is frozen and only the head
(`score_embedding`) trains on exact embeddings of every segment: the table, filled once
with the frozen encoder, is then exact, so these steps are cheap. Entries never written
are computed on demand (no gradient, one segment at a time); to bound that and the
table, each graph trains on a fixed subset of at most `gst_max_configs` configs (the
official baselines cap at 1000 for the same reason). A GST-trained model predicts by
summing segment embeddings too (`segment_size` is saved in its settings).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from graphcost.errors import SettingsError, UserError
from graphcost.formats import Graph
from graphcost.models.base import GraphTensors, collate
from graphcost.models.model import Model
from graphcost.models.scorer import eval_mode
from graphcost.models.segments import GST_SEGMENT_SIZE, Segments, split_segments
from graphcost.train import distributed
from graphcost.train.history import EmbeddingTable, fresh_weight, stale_sum
from graphcost.train.sampling import sample_configs, train_config_ids
from graphcost.train.settings import TrainSettings
from graphcost.train.steps import NOTHING_TO_RANK, Step


@dataclass
class GstItem:
    gt: GraphTensors
    configs: np.ndarray  # (c,) config ids trained on; the table's slot k is configs[k]
    segments: Segments


def fresh_segments(rng: np.random.Generator, count: int, k: int) -> np.ndarray:
    """The segments of a graph back-propagated this step: k sampled ones (k ≤ 0: all)."""
    if k <= 0 or k >= count:
        return np.arange(count)
    if k == 1:
        return np.array([rng.integers(count)])
    return np.sort(rng.choice(count, k, replace=False))


def encode_fresh(net: nn.Module, items: Sequence[GstItem], fresh: Sequence[np.ndarray],
                 ids: Sequence[np.ndarray],
                 device: torch.device) -> tuple[Tensor, list[list[Tensor]]]:
    """(B, C, d) sums of each graph's fresh segments, differentiable, and each fresh
    segment's own (C, d) embedding (for the table). One fresh segment per graph: one
    batched pass with an ordinary autograd graph; more: one checkpointed pass per segment,
    recomputed one at a time in the backward pass (one segment's memory)."""
    if all(f.size == 1 for f in fresh):
        batch = collate([(it.segments.parts[int(f[0])], i) for it, f, i
                         in zip(items, fresh, ids, strict=True)]).to(device)
        share = torch.stack([it.segments.weight(int(f[0])) for it, f
                             in zip(items, fresh, strict=True)]).to(device)
        h = net.encode_segment(batch, share)
        return h, [[h[k]] for k in range(len(items))]

    def segment(item: GstItem, seg: int, i: np.ndarray) -> Tensor:
        def encode(share: Tensor) -> Tensor:  # collated inside: nothing kept but `share`
            return net.encode_segment(collate([(item.segments.parts[seg], i)]).to(device),
                                      share)[0]

        # `share` on `device` lets checkpoint stash and restore that device's RNG too
        return checkpoint(encode, item.segments.weight(seg)[None].to(device),
                          use_reentrant=False)

    parts = [[segment(it, int(seg), i) for seg in f]
             for it, f, i in zip(items, fresh, ids, strict=True)]
    return torch.stack([torch.stack(p).sum(0) for p in parts]), parts


class SegmentStep(Step):
    """Every segment of every graph back-propagated, one segment's memory at a time.

    Across N processes, rank r owns the train graphs i ≡ r (mod N) and encodes only
    those, so its table holds only their entries: the table is sharded, each process
    keeps 1/N of it and none sends embeddings to another, since a graph's entries are
    written and read by its owner alone. Every rank still draws the whole global batch
    (configs, and one random stream per graph for segments and stale dropout), so N
    processes take the steps one process takes. Gradients are averaged after the
    backward pass (`sync_gradients`): a step calls the encoder once per segment and the
    head once, which DDP's hooks (one forward, one backward) do not fit.
    """

    name = "gst"
    ddp = False

    @staticmethod
    def configure(model: Model, s: TrainSettings) -> None:
        if model.kind != "layout":
            raise SettingsError("mode=gst trains layout models (tile graphs are small: use "
                                "mode=full)")
        if not hasattr(model.settings, "segment_size") or not hasattr(model.spec.net,
                                                                       "encode_segment"):
            raise SettingsError(f"model '{model.name}' has no segment hooks; mode=gst supports "
                                "the ranker (resgcn trains big graphs through its own "
                                "back-propagation window, model setting keep_nodes)")
        if model.settings.segment_size == 0:  # none set: segments of the default size
            model.settings = dataclasses.replace(model.settings, segment_size=GST_SEGMENT_SIZE)

    def __init__(self, model: Model, net: nn.Module, graphs: Sequence[Graph], s: TrainSettings,
                 ctx: distributed.Context, out: Path | None):
        super().__init__(model, net, graphs, s, ctx, out)
        self.net = net = model.net  # never DDP-wrapped (see the class doc)
        ctx.replicate(net)
        self.head_epochs = s.head_finetune_epochs
        self.items: list[GstItem] = []
        for n, g in enumerate(graphs):
            gt = model.prepare(g)
            ids, gt.runtime = train_config_ids(g, s.dedup, s.gst_max_configs, (s.seed, n))
            if ids.size >= 2:
                self.items.append(GstItem(gt, ids, split_segments(
                    gt, model.settings.segment_size, net.segment_halo)))
                self.names.append(g.name)
        if not self.items:
            raise UserError(NOTHING_TO_RANK)
        with torch.no_grad():
            probe = self.items[0].segments.encode(net, self.items[0].configs[:1], [0])
        self.tmp = None if out is not None else Path(tempfile.mkdtemp(prefix="gst-"))
        # rows written after the epoch a run goes on from are forgotten in `resume`,
        # called by fit for every run. Ranks > 0 keep theirs in a temporary folder: a
        # resumed multi-process run recomputes their entries on demand
        self.table = EmbeddingTable((out or self.tmp) / "gst_table",
                                    [(it.configs.size, len(it.segments)) if self.owns(n)
                                     else (0, 0) for n, it in enumerate(self.items)],
                                    probe.shape[-1], resume=True)
        self.head_since: int | None = None  # first epoch of the head phase
        self.ages: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self.items)

    def owns(self, graph: int) -> bool:
        """Whether this rank trains train graph `graph` (see the class doc)."""
        return graph % self.ctx.world == self.ctx.rank

    def sync_gradients(self, params: list[nn.Parameter]) -> None:
        self.ctx.average_gradients(params)

    def parameters(self, head: bool = False) -> list[nn.Parameter]:
        return self.net.head_parameters() if head else list(self.net.parameters())

    def begin_head(self, epoch: int) -> None:
        self.head_since = epoch

    def resume(self, epoch: int) -> None:
        self.table.forget_after(epoch)

    def loss(self, graphs: np.ndarray, rng: np.random.Generator, epoch: int) -> tuple[Tensor, int]:
        s, dev = self.s, self.device
        gis = [int(i) for i in graphs]
        chosen = [self.items[i] for i in gis]
        slots = [sample_configs(rng, np.arange(it.configs.size), it.gt.runtime[it.configs],
                                s.configs_per_graph, s.fast_bias) for it in chosen]
        c = max(sl.size for sl in slots)
        mask = torch.stack([torch.arange(c) < sl.size for sl in slots]).to(dev)
        slots = [np.concatenate([sl, np.full(c - sl.size, sl[0], sl.dtype)]) for sl in slots]
        runtime = torch.stack([torch.as_tensor(it.gt.runtime[it.configs[sl]], dtype=torch.float32)
                               for it, sl in zip(chosen, slots, strict=True)]).to(dev)
        streams = [np.random.default_rng(x) for x in rng.integers(2**63, size=len(gis))]
        mine = [k for k, gi in enumerate(gis) if self.owns(gi)]
        if not mine:  # none of this rank's graphs in the step: no gradient from here
            return torch.zeros((), device=dev, requires_grad=True), 0
        gis, chosen, slots, streams = ([x[k] for k in mine]
                                       for x in (gis, chosen, slots, streams))
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=self.amp):
            if self.head_since is None:
                h = self.embed(gis, chosen, slots, streams, epoch)
            else:  # frozen encoder, exact embeddings of every segment
                with torch.no_grad(), eval_mode(self.net):
                    h = torch.stack([self.historical(gi, it, sl, None, self.head_since,
                                                     epoch)[0].sum(1)
                                     for gi, it, sl in zip(gis, chosen, slots, strict=True)])
                h = h.to(dev)
            scores = self.net.score_embedding(h, mask[mine]).float()
            if self.net.prior is not None:  # the rule underneath (the ranker's `prior`)
                scores = scores + torch.stack([
                    self.net.prior.scores(it.gt, it.gt.configs(it.configs[sl]))
                    for it, sl in zip(chosen, slots, strict=True)]).float()
        if self.ctx.world == 1:
            return self.loss_fn(scores, runtime, mask), int(mask.sum())
        # every rank holds the global batch's runtimes: its counts need no all-reduce
        total = self.loss_fn.counts(runtime, mask)
        return self.loss_fn(scores, runtime[mine], mask[mine], total), int(mask[mine].sum())

    def embed(self, gis: list[int], chosen: list[GstItem], slots: list[np.ndarray],
              streams: list[np.random.Generator], epoch: int) -> Tensor:
        """(B, C, d) graph embeddings to back-propagate through: every segment fresh."""
        fresh = [np.arange(len(it.segments)) for it in chosen]
        ids = [it.configs[sl] for it, sl in zip(chosen, slots, strict=True)]
        return encode_fresh(self.net, chosen, fresh, ids, self.device)[0]

    def historical(self, gi: int, item: GstItem, slots: np.ndarray, skip: Sequence[int] | None,
                   since: int, epoch: int) -> tuple[Tensor, np.ndarray]:
        """(C, S, d) table embeddings of graph gi, computing (no gradient) and storing
        entries written before `since`; also the ages of the entries that were reused."""
        emb, written = self.table.read(gi, slots)
        missing = written < since
        reuse = ~missing
        if skip is not None:
            missing[:, skip] = reuse[:, skip] = False
        reused = written[reuse]
        for seg in np.flatnonzero(missing.any(0)):
            rows = np.flatnonzero(missing[:, seg])
            with torch.no_grad():
                e = item.segments.encode(self.net, item.configs[slots[rows]], [int(seg)])
            e = e[0].float().cpu().numpy()
            emb[rows, seg] = e
            self.table.write(gi, slots[rows], int(seg), e, epoch)
        return torch.from_numpy(emb), epoch - reused

    def stats(self) -> dict[str, float]:
        used = np.concatenate(self.ages) if self.ages else np.zeros(0)
        self.ages = []
        self.table.flush()
        total, count = self.ctx.all_sum(float(used.sum())), self.ctx.all_sum(used.size)
        return {"stale_age": total / count if count else 0.0}  # over every rank's reads

    def close(self) -> dict:
        nbytes = self.table.nbytes
        self.table.close()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return {"table_bytes": nbytes}


class HistoryStep(SegmentStep):
    """The paper's GST: `gst_fresh_segments` segments per graph back-propagated, the
    others read from the table of historical embeddings with stale dropout."""

    def embed(self, gis: list[int], chosen: list[GstItem], slots: list[np.ndarray],
              streams: list[np.random.Generator], epoch: int) -> Tensor:
        s = self.s
        fresh = [fresh_segments(rng, len(it.segments), s.gst_fresh_segments)
                 for it, rng in zip(chosen, streams, strict=True)]
        h, parts = encode_fresh(self.net, chosen, fresh,
                                [it.configs[sl] for it, sl in zip(chosen, slots, strict=True)],
                                self.device)
        stale = []
        for k, (gi, it, sl) in enumerate(zip(gis, chosen, slots, strict=True)):
            for f, e in zip(fresh[k], parts[k], strict=True):
                self.table.write(gi, sl, int(f), e.detach().float().cpu().numpy(), epoch)
            if len(it.segments) > fresh[k].size:
                hist, age = self.historical(gi, it, sl, list(fresh[k]), 0, epoch)
                self.ages.append(age)
                stale.append(stale_sum(hist, list(fresh[k]), s.stale_drop_p, streams[k]))
            else:
                stale.append(torch.zeros(sl.size, h.shape[-1]))
        up = torch.tensor([fresh_weight(it.segments.share, f, s.stale_drop_p)
                           for it, f in zip(chosen, fresh, strict=True)],
                          device=self.device, dtype=h.dtype)
        return h * up[:, None, None] + torch.stack(stale).to(self.device, h.dtype)
