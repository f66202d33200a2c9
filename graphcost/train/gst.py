"""Graph Segment Training (GST, DESIGN §6) and the memory budget of full-graph training.

Full-graph training holds a (C, N, d) node state per layer for every graph of a step,
which for a 200k-node program is tens of gigabytes. GST bounds that by one segment:

1. Each train graph is cut into contiguous segments of ~`segment_size` nodes
   (`models/segments.py`); a graph's embedding is the SUM of its segments' embeddings.
2. Each step back-propagates through k sampled segments per graph (`gst_fresh_segments`;
   the paper's GST is k = 1); every other segment's embedding comes from the historical
   `EmbeddingTable`, keyed by (graph, config, segment), and the fresh ones are written
   back. With k > 1 the fresh segments go through `SegmentReplay` one at a time, so the
   memory stays one segment's; k = 0 back-propagates every segment, the exact gradient
   of the segmented model, at about 4/3 of a full step's compute. `graphcost bench gst`
   measures what k costs in ranking quality.
3. Stale embedding dropout: each historical segment is dropped with probability p, one
   draw per graph and segment shared by the graph's configs (`stale_sum`), and the fresh
   segments up-weighted by the share expected dropped (`fresh_weight`), so a graph's
   segment weights still sum to 1 on average.
4. A final phase (`head_finetune_epochs`) freezes the encoder and trains only the head
   (`score_embedding`) on fresh embeddings of every segment: the table, filled once
   with the frozen encoder, is then exact, so these steps are cheap.

Entries never written are computed on demand (no gradient, one segment at a time), so
the first visit of a config costs a forward pass over the graph; to bound that and the
table, each graph trains on a fixed subset of at most `gst_max_configs` configs (the
official baselines cap at 1000 for the same reason). A GST-trained model predicts by
summing segment embeddings too (`segment_size` is saved in its settings).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

from graphcost.data.dedup import dedup_configs
from graphcost.formats import Graph
from graphcost.models.base import GraphTensors, collate
from graphcost.models.losses import RankingLoss
from graphcost.models.model import Model, atomic_save
from graphcost.models.segments import Segments, split_segments
from graphcost.train.trainer import (
    BestSoFar,
    TrainSettings,
    _rng_state,
    _set_rng_state,
    build_or_restore,
    lr_factor,
    sample_configs,
    seed_everything,
    validate,
    validation_ids,
)

# ---------------------------------------------------------------------------- memory budget

# (C, N, d) float32 tensors alive at the peak of a full-graph step, per GNN layer and fixed
# (input join, pooling, gradients); measured with `graphcost bench scale` (the ranker).
TENSORS_PER_LAYER = 12
TENSORS_FIXED = 8


class MemoryBudgetError(ValueError):
    """Full-graph training would not fit; the message says what to do instead."""


def available_memory() -> int:
    """Bytes the process may still use: MemAvailable, or the cgroup limit if lower."""
    avail = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            avail = min(avail, int(limit))
    except OSError:
        pass
    return avail


def memory_budget_bytes(spec: str) -> int | None:
    """'75%' of available memory, an absolute '8G' / '512M' / bytes, or 'off' → None."""
    spec = str(spec).strip().upper()
    if spec in ("", "OFF", "NONE", "0"):
        return None
    if spec.endswith("%"):
        return int(available_memory() * float(spec[:-1]) / 100)
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if spec.endswith("B"):
        spec = spec[:-1]
    if spec and spec[-1] in scale:
        return int(float(spec[:-1]) * scale[spec[-1]])
    return int(float(spec))


def full_step_bytes(nodes: int, configs: int, hidden: int, layers: int) -> int:
    """Estimated peak activation bytes of one full-graph step over `nodes` batch nodes."""
    return 4 * nodes * configs * hidden * (TENSORS_PER_LAYER * layers + TENSORS_FIXED)


def check_full_graph_memory(model: Model, nodes: Sequence[int], s: TrainSettings) -> int:
    """Raise MemoryBudgetError when the biggest step (the `graphs_per_batch` largest graphs,
    as the model sees them) is estimated above `s.memory_budget`; return the estimate."""
    b = max(1, min(s.graphs_per_batch, len(nodes)))
    step_nodes = int(sum(sorted(nodes, reverse=True)[:b]))
    hidden = int(getattr(model.settings, "hidden", 64))
    layers = int(getattr(model.settings, "layers", 3))
    need = full_step_bytes(step_nodes, s.configs_per_graph, hidden, layers)
    budget = memory_budget_bytes(s.memory_budget)
    if budget is not None and need > budget:
        hops = getattr(model.settings, "prune_hops", None)
        prune = ("" if hops is None else
                 "; prune harder (--set prune_hops=1)" if hops >= 0 else
                 "; prune to configurable nodes (--set prune_hops=2)")
        raise MemoryBudgetError(
            f"full-graph training would need about {need / 2**30:.1f} GiB per step "
            f"({b} graphs, {step_nodes:,} nodes × {s.configs_per_graph} configs × hidden "
            f"{hidden} × {layers} layers), over the memory budget of {budget / 2**30:.1f} GiB "
            f"(memory_budget={s.memory_budget}). Use Graph Segment Training (--set mode=gst "
            f"--set segment_size=1000){prune}; or sample fewer configs "
            f"(--set configs_per_graph=8) or graphs (--set graphs_per_batch=1).")
    return need


# ---------------------------------------------------------------------------- embedding table


class EmbeddingTable:
    """Historical segment embeddings keyed by (graph, config slot, segment), on disk.

    Two memory-mapped `.npy` files under `root`: `embeddings.npy` (R, d) float32 and
    `written.npy` (R,) int32, the epoch each entry was written (−1: never). Graph g's
    entry (slot, segment) is row offset[g] + slot·S_g + segment, so one config's segments
    are contiguous. Only the rows a step touches are paged in: resident memory is bounded
    by what steps read, not by the table's size.
    """

    def __init__(self, root: str | Path, shapes: Sequence[tuple[int, int]], dim: int,
                 resume: bool = False):
        self.root = Path(root)
        self.shapes = [(int(c), int(sg)) for c, sg in shapes]
        self.dim = int(dim)
        sizes = [c * sg for c, sg in self.shapes]
        self.offset = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        rows = max(1, int(self.offset[-1]))
        meta = json.loads(json.dumps({"shapes": self.shapes, "dim": self.dim}))
        meta_path = self.root / "table.json"
        files = [self.root / "embeddings.npy", self.root / "written.npy"]
        same = (resume and meta_path.exists() and json.loads(meta_path.read_text()) == meta
                and all(f.exists() for f in files))
        self.root.mkdir(parents=True, exist_ok=True)
        if same:
            self.emb = np.load(self.root / "embeddings.npy", mmap_mode="r+")
            self.written = np.load(self.root / "written.npy", mmap_mode="r+")
        else:
            fmt = np.lib.format
            self.emb = fmt.open_memmap(self.root / "embeddings.npy", "w+", np.float32,
                                       (rows, self.dim))
            self.written = fmt.open_memmap(self.root / "written.npy", "w+", np.int32, (rows,))
            self.written[:] = -1
            meta_path.write_text(json.dumps(meta))

    @property
    def nbytes(self) -> int:
        return int(self.emb.nbytes + self.written.nbytes)

    def num_segments(self, g: int) -> int:
        return self.shapes[g][1]

    def _rows(self, g: int, slots: np.ndarray) -> np.ndarray:
        sg = self.shapes[g][1]
        slots = np.asarray(slots, dtype=np.int64)
        return self.offset[g] + slots[:, None] * sg + np.arange(sg)[None, :]

    def read(self, g: int, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(C, S, d) embeddings and (C, S) epochs written of graph g's configs `slots`."""
        rows = self._rows(g, slots)
        return np.asarray(self.emb[rows.reshape(-1)]).reshape(*rows.shape, self.dim), \
            np.asarray(self.written[rows])

    def write(self, g: int, slots: np.ndarray, segment: int, emb: np.ndarray, epoch: int) -> None:
        """Store (C, d) embeddings of one segment for configs `slots`, stamped `epoch`."""
        rows = self._rows(g, slots)[:, segment]
        self.emb[rows] = emb
        self.written[rows] = epoch

    def age(self, g: int, slots: np.ndarray, epoch: int) -> np.ndarray:
        """(C, S) epochs since each entry was written (−1 for never written)."""
        w = self.read(g, slots)[1]
        return np.where(w >= 0, epoch - w, -1)

    def forget_after(self, epoch: int) -> int:
        """Mark entries written after `epoch` as never written (a run resumed from that
        epoch's checkpoint must not see embeddings of weights it no longer has)."""
        count, step = 0, 1 << 22
        for i in range(0, self.written.shape[0], step):
            w = self.written[i:i + step]
            late = w > epoch
            count += int(late.sum())
            w[late] = -1
        return count

    def flush(self) -> None:
        self.emb.flush()
        self.written.flush()

    def close(self) -> None:
        self.flush()
        del self.emb, self.written


def stale_sum(stale: Tensor, fresh: int | Sequence[int], p: float,
              rng: np.random.Generator) -> Tensor:
    """Σ over segments not in `fresh` of (C, S, d) historical embeddings, each segment
    dropped with probability p (stale embedding dropout, DESIGN §6).

    One draw per segment, shared by the C configs: a ranking loss compares configs of
    the same graph, and a segment kept for one config but dropped for another would
    add a whole segment's embedding to their difference, drowning what the configs
    change.
    """
    sg = stale.shape[1]
    keep = rng.random(sg) >= p if p > 0 else np.ones(sg, dtype=bool)
    w = keep.astype(np.float32)
    w[fresh] = 0.0
    return (stale * torch.from_numpy(w).to(stale.dtype)[None, :, None]).sum(1)


def fresh_weight(share: np.ndarray, fresh: Sequence[int], p: float) -> float:
    """The factor on the fresh segments that makes up for the stale ones dropped: their
    expected dropped share p·(1 − F) is added to the fresh share F, so the weights of a
    graph's segments still sum to 1 on average (with equal segments: 1 + p·(S − 1))."""
    f = float(np.sum(share[list(fresh)]))
    return 1.0 + p * (1.0 - f) / f


# ---------------------------------------------------------------------------- training


@dataclass
class GstItem:
    gt: GraphTensors
    configs: np.ndarray  # (c,) config ids trained on; the table's slot k is configs[k]
    segments: Segments


def _historical(net, table: EmbeddingTable, gi: int, item: GstItem, slots: np.ndarray,
                skip: Sequence[int] | None, since: int, epoch: int) -> tuple[Tensor, np.ndarray]:
    """(C, S, d) table embeddings of graph gi, computing (no gradient) and storing entries
    written before `since`; also the ages of the entries that were reused."""
    emb, written = table.read(gi, slots)
    missing = written < since
    reuse = ~missing
    if skip is not None:
        missing[:, skip] = reuse[:, skip] = False
    reused = written[reuse]
    for seg in np.flatnonzero(missing.any(0)):
        rows = np.flatnonzero(missing[:, seg])
        with torch.no_grad():
            e = item.segments.encode(net, item.configs[slots[rows]], [int(seg)])
        e = e[0].float().cpu().numpy()
        emb[rows, seg] = e
        table.write(gi, slots[rows], int(seg), e, epoch)
    return torch.from_numpy(emb), epoch - reused


def fresh_segments(rng: np.random.Generator, count: int, k: int) -> np.ndarray:
    """The segments of a graph back-propagated this step: k sampled ones (k ≤ 0: all)."""
    if k <= 0 or k >= count:
        return np.arange(count)
    if k == 1:
        return np.array([rng.integers(count)])
    return np.sort(rng.choice(count, k, replace=False))


class SegmentReplay:
    """Back-propagation through many segments of a graph in the memory of one.

    Each segment is first encoded without an autograd graph; once the loss gradient
    w.r.t. the graph embeddings (the leaf `h`) is known, `backward` encodes each segment
    again, with the same dropout draws, and back-propagates it alone. Since the graph
    embedding is a sum of segments, the accumulated gradient is exactly the full one;
    the cost is one extra forward pass per segment.
    """

    def __init__(self, net, device: torch.device, amp: bool):
        self.net, self.device, self.amp = net, device, amp
        self.jobs: list[tuple[int, GstItem, int, np.ndarray, Tensor, Tensor | None]] = []
        self.h: Tensor | None = None

    def _rng(self) -> tuple[Tensor, Tensor | None]:
        cuda = self.device.type == "cuda"
        return torch.get_rng_state(), torch.cuda.get_rng_state(self.device) if cuda else None

    def _set_rng(self, cpu: Tensor, cuda: Tensor | None) -> None:
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state(cuda, self.device)

    def encode(self, i: int, item: GstItem, seg: int, ids: np.ndarray) -> Tensor:
        self.jobs.append((i, item, seg, ids, *self._rng()))
        with torch.no_grad():
            return _encode_segment(self.net, item, seg, ids, self.device)

    def leaf(self, h: Tensor) -> Tensor:
        self.h = h.detach().requires_grad_(True)
        return self.h

    def backward(self) -> None:
        assert self.h is not None and self.h.grad is not None
        after = self._rng()
        for i, item, seg, ids, cpu, cuda in self.jobs:
            self._set_rng(cpu, cuda)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
                e = _encode_segment(self.net, item, seg, ids, self.device)
            e.backward(self.h.grad[i].to(e.dtype))
        self._set_rng(*after)


def _encode_segment(net, item: GstItem, seg: int, ids: np.ndarray, device) -> Tensor:
    """(C, d): segment `seg` of one graph, weighted by its share, for configs `ids`."""
    b = collate([(item.segments.parts[seg], ids)]).to(device)
    return net.encode_segment(b, item.segments.weight(seg)[None].to(device))[0]


def encode_fresh(net, items: Sequence[GstItem], fresh: Sequence[np.ndarray],
                 ids: Sequence[np.ndarray], device: torch.device,
                 replay: SegmentReplay | None) -> tuple[Tensor, list[list[Tensor]]]:
    """(B, C, d) sums of each graph's fresh segments, differentiable, and each fresh
    segment's own (C, d) embedding (for the table). One fresh segment per graph: one
    batched pass with an ordinary autograd graph; more: through `replay`."""
    if replay is None:
        batch = collate([(it.segments.parts[int(f[0])], i) for it, f, i
                         in zip(items, fresh, ids, strict=True)]).to(device)
        share = torch.stack([it.segments.weight(int(f[0])) for it, f
                             in zip(items, fresh, strict=True)]).to(device)
        h = net.encode_segment(batch, share)
        return h, [[h[k]] for k in range(len(items))]
    parts = [[replay.encode(k, it, int(seg), i) for seg in f]
             for k, (it, f, i) in enumerate(zip(items, fresh, ids, strict=True))]
    return replay.leaf(torch.stack([torch.stack(p).sum(0) for p in parts])), parts


def _pad(a: np.ndarray, c: int) -> np.ndarray:
    return np.concatenate([a, np.full(c - a.size, a[0], a.dtype)])


def train_gst(model: Model, train_graphs: Sequence[Graph],
              valid_graphs: Sequence[Graph] | None = None, settings: TrainSettings | None = None,
              out_dir: str | Path | None = None, resume: bool = False) -> dict:
    """GST counterpart of `trainer.train` (same run directory, resume and result dict),
    plus the table under `out_dir/gst_table` and `result['before_head']`: validation
    metrics of the best weights before the head fine-tuning phase."""
    s = settings or TrainSettings(mode="gst")
    if model.kind != "layout":
        raise ValueError("GST trains layout models (tile graphs are small: use mode=full)")
    if not hasattr(model.settings, "segment_size") or not hasattr(model.spec.net,
                                                                   "encode_segment"):
        raise ValueError(f"model '{model.name}' has no segment hooks; GST supports "
                         "ranker and resgcn")
    if not 0.0 <= s.stale_drop_p < 1.0:
        raise ValueError(f"stale_drop_p must be in [0, 1), got {s.stale_drop_p}")
    if not train_graphs:
        raise ValueError("no train graphs")
    model.settings = dataclasses.replace(model.settings, segment_size=s.segment_size)
    device = torch.device(s.device)
    amp = device.type == "cuda"
    out = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="gst-"))
    out.mkdir(parents=True, exist_ok=True)
    last = out / "last.pt"
    resuming = resume and last.exists()

    np_rng = seed_everything(s.seed)
    ckpt = torch.load(last, map_location="cpu", weights_only=False) if resuming else None
    build_or_restore(model, train_graphs, ckpt)
    net = model.net
    net.to(device)

    items: list[GstItem] = []
    for g in train_graphs:
        gt = model.prepare(g)
        ids = dedup_configs(g)[0] if s.dedup else np.arange(gt.num_configs)
        if s.gst_max_configs and ids.size > s.gst_max_configs:
            pick = np.random.default_rng([s.seed, len(items)]).choice(ids.size, s.gst_max_configs,
                                                                      replace=False)
            ids = ids[np.sort(pick)]
        if ids.size >= 2:
            items.append(GstItem(gt, ids, split_segments(gt, s.segment_size, net.segment_halo)))
    if not items:
        raise ValueError("no train graph has two or more configs")
    valid_items = [(gt, validation_ids(gt, s.valid_configs, s.seed))
                   for gt in (model.prepare(g) for g in (valid_graphs or []))]
    with torch.no_grad():
        probe = items[0].segments.encode(net, items[0].configs[:1], [0])
    table = EmbeddingTable(out / "gst_table", [(it.configs.size, len(it.segments))
                                               for it in items], probe.shape[-1], resuming)

    b = max(1, min(s.graphs_per_batch, len(items)))
    steps_per_epoch = s.steps_per_epoch or -(-len(items) // b)
    loss_fn = RankingLoss(s.loss or model.default_loss, margin=s.margin)
    head_s = dataclasses.replace(s, warmup_steps=0)

    def optimiser(main_end: int | None):
        if main_end is None:
            params, total, cfg = list(net.parameters()), s.epochs * steps_per_epoch, s
        else:
            params, cfg = net.head_parameters(), head_s
            total = s.head_finetune_epochs * steps_per_epoch
        opt = torch.optim.AdamW(params, lr=s.lr, weight_decay=s.weight_decay)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: lr_factor(step, cfg, total))
        return params, opt, sched

    start_epoch, best, history = 1, BestSoFar(), []
    main_end, before_head = None, None
    if ckpt is not None:
        main_end, before_head = ckpt["main_end"], ckpt["before_head"]
        start_epoch = ckpt["epoch"] + 1
        best, history = BestSoFar.from_checkpoint(ckpt), ckpt["history"]
        _set_rng_state(np_rng, ckpt["rng"])
        table.forget_after(ckpt["epoch"])
    params, opt, sched = optimiser(main_end)
    if ckpt is not None:
        opt.load_state_dict(ckpt["optimizer"])
        sched.load_state_dict(ckpt["scheduler"])
    lines = [json.dumps(h) for h in history]
    (out / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))

    epoch = start_epoch
    try:
        while True:
            if main_end is None and (epoch > s.epochs or best.bad >= s.patience):
                main_end = epoch - 1  # the head fine-tuning phase starts from the best weights
                best.restore(net)
                before_head = validate(model, valid_items, s.chunk_size) if valid_items else None
                params, opt, sched = optimiser(main_end)
            if main_end is not None and epoch > main_end + s.head_finetune_epochs:
                break
            head = main_end is not None
            net.train()
            t0, seen_configs, losses, ages = time.perf_counter(), 0, [], []
            order = np.concatenate([np_rng.permutation(len(items))
                                    for _ in range(-(-steps_per_epoch * b // len(items)))])
            bar = tqdm(range(steps_per_epoch), desc=f"{'head' if head else 'gst'} epoch {epoch}",
                       disable=not s.progress, leave=False)
            for step in bar:
                gis = [int(i) for i in order[step * b:(step + 1) * b]]
                chosen = [items[i] for i in gis]
                slots = [sample_configs(np_rng, np.arange(it.configs.size),
                                        it.gt.runtime[it.configs], s.configs_per_graph,
                                        s.fast_bias) for it in chosen]
                c = max(sl.size for sl in slots)
                slots = [_pad(sl, c) for sl in slots]
                mask = torch.stack([torch.arange(c) < sl.size for sl in slots]).to(device)
                runtime = torch.stack([torch.as_tensor(it.gt.runtime[it.configs[sl]],
                                                       dtype=torch.float32)
                                       for it, sl in zip(chosen, slots, strict=True)]).to(device)
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                    if head:  # frozen encoder, exact embeddings of every segment
                        net.eval()
                        h = torch.stack([_historical(net, table, gi, it, sl, None, main_end + 1,
                                                     epoch)[0].sum(1)
                                         for gi, it, sl in zip(gis, chosen, slots, strict=True)])
                        net.train()
                        h = h.to(device)
                    else:
                        fresh = [fresh_segments(np_rng, len(it.segments), s.gst_fresh_segments)
                                 for it in chosen]
                        replay = None if all(f.size == 1 for f in fresh) else SegmentReplay(
                            net, device, amp)
                        h, parts = encode_fresh(net, chosen, fresh,
                                                [it.configs[sl] for it, sl in zip(chosen, slots,
                                                                                  strict=True)],
                                                device, replay)
                        stale = []
                        for k, (gi, it, sl) in enumerate(zip(gis, chosen, slots, strict=True)):
                            for f, e in zip(fresh[k], parts[k], strict=True):
                                table.write(gi, sl, int(f), e.detach().float().cpu().numpy(), epoch)
                            if len(it.segments) > fresh[k].size:
                                hist, age = _historical(net, table, gi, it, sl, list(fresh[k]), 0,
                                                        epoch)
                                ages.append(age)
                                stale.append(stale_sum(hist, list(fresh[k]), s.stale_drop_p,
                                                       np_rng))
                            else:
                                stale.append(torch.zeros(c, h.shape[-1]))
                        up = torch.tensor([fresh_weight(it.segments.share, f, s.stale_drop_p)
                                           for it, f in zip(chosen, fresh, strict=True)],
                                          device=device, dtype=h.dtype)
                        h = h * up[:, None, None] + torch.stack(stale).to(device, h.dtype)
                    scores = net.score_embedding(h, mask)
                loss = loss_fn(scores.float(), runtime, mask)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if not head and replay is not None:
                    replay.backward()
                if s.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(params, s.grad_clip)
                opt.step()
                sched.step()
                losses.append(loss.item())
                seen_configs += int(mask.sum())
                bar.set_postfix(loss=f"{losses[-1]:.4f}")
            seconds = time.perf_counter() - t0
            used = np.concatenate(ages) if ages else np.zeros(0)
            row = {"epoch": epoch, "phase": "head" if head else "gst",
                   "step": epoch * steps_per_epoch, "lr": sched.get_last_lr()[0],
                   "train_loss": float(np.mean(losses)), "seconds": seconds,
                   "seconds_per_step": seconds / steps_per_epoch,
                   "configs_per_s": seen_configs / seconds,
                   "stale_age": float(used.mean()) if used.size else 0.0}
            if valid_items:
                row.update(validate(model, valid_items, s.chunk_size))
                score = row["valid_score"]
            else:
                score = -row["train_loss"]
            best.update(score, epoch, model, out / "best.pt", count_bad=not head)
            row["best_epoch"] = best.epoch
            history.append(row)
            with open(out / "metrics.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            table.flush()
            atomic_save({"model": model.state(), "optimizer": opt.state_dict(),
                         "scheduler": sched.state_dict(), "rng": _rng_state(np_rng),
                         "epoch": epoch, **best.checkpoint(), "history": history,
                         "main_end": main_end, "before_head": before_head,
                         "settings": asdict(s)}, last)
            if s.progress:
                tqdm.write(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                    for k, v in row.items()))
            if s.stop_after_epoch and epoch >= s.stop_after_epoch:
                return {"history": history, "best_epoch": best.epoch, "best_score": best.score,
                        "out_dir": out_dir, "stopped": True, "before_head": before_head,
                        "table_bytes": table.nbytes}
            epoch += 1
    finally:
        table_bytes = table.nbytes
        table.close()
        if out_dir is None:
            shutil.rmtree(out, ignore_errors=True)

    best.restore(net)
    net.to(device)
    return {"history": history, "best_epoch": best.epoch, "best_score": best.score,
            "out_dir": out_dir, "stopped": False, "before_head": before_head,
            "table_bytes": table_bytes}
