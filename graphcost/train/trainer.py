"""A plain training loop (nanoGPT style): all settings in `TrainSettings`.

Each step takes B graphs and C sampled configs of each; AdamW with linear warm-up and
cosine decay; gradient clipping; after every epoch, validation τ / OPA / score on a
fixed config subset per graph, early stopping, and the best weights kept.

Run directory: `best.pt` (the best model, loadable with `Model.load`), `last.pt` (the
full training state, written atomically after every epoch) and `metrics.jsonl` (one
line per epoch). `resume=True` restores weights, optimiser, scheduler and the python,
numpy and torch RNG states from `last.pt`, so a killed run that is resumed ends
exactly where an uninterrupted one would.
"""

from __future__ import annotations

import copy
import json
import math
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from graphcost.data.dedup import dedup_configs
from graphcost.data.features import FeatureTransform
from graphcost.eval.metrics import kendall_tau, opa, tile_score
from graphcost.formats import Graph
from graphcost.models.base import GraphTensors, collate
from graphcost.models.losses import RankingLoss
from graphcost.models.model import Model, atomic_save
from graphcost.train import distributed


@dataclass
class TrainSettings:
    epochs: int = 30
    steps_per_epoch: int = 0  # 0: one pass over the train graphs per epoch
    graphs_per_batch: int = 4
    configs_per_graph: int = 32
    fast_bias: float = 0.0  # > 0 samples fast configs more often (weight exp(−bias·rank/c))
    dedup: bool = True  # drop duplicate configs from training (keep the fastest)
    lr: float = 2e-3
    weight_decay: float = 1e-4
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
    # Graph Segment Training and the full-graph memory budget (graphcost.train.gst)
    mode: str = "full"  # 'full': back-propagate through whole graphs; 'gst': one segment each
    segment_size: int = 1000  # gst: nodes per segment
    # gst: segments back-propagated per graph and step; 0: all, one at a time (exact
    # gradient, ~4/3 of a full step's compute); 1: the paper's GST (time per step constant
    # in graph size; needs more epochs: `graphcost bench gst --gst-epochs`)
    gst_fresh_segments: int = 0
    stale_drop_p: float = 0.5  # gst: drop each historical embedding with this probability
    head_finetune_epochs: int = 2  # gst: final epochs training only the head, encoder frozen
    gst_max_configs: int = 1000  # gst: train on a fixed subset of ≤ this many configs per graph
    memory_budget: str = "75%"  # full: refuse steps estimated above this ('75%', '8G', 'off')


def lr_factor(step: int, s: TrainSettings, total: int) -> float:
    """Linear warm-up to 1, then cosine decay to `min_lr_ratio` at `total` steps."""
    if step < s.warmup_steps:
        return (step + 1) / s.warmup_steps
    t = min(1.0, (step - s.warmup_steps) / max(1, total - s.warmup_steps))
    return s.min_lr_ratio + (1 - s.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t))


def sample_configs(rng: np.random.Generator, candidates: np.ndarray, runtime: np.ndarray,
                   c: int, fast_bias: float) -> np.ndarray:
    """C distinct configs of one graph (all of them if it has fewer)."""
    if candidates.size <= c:
        return candidates
    p = None
    if fast_bias > 0:
        rank = np.argsort(np.argsort(runtime[candidates], kind="stable"), kind="stable")
        w = np.exp(-fast_bias * rank / candidates.size)
        p = w / w.sum()
    return rng.choice(candidates, size=c, replace=False, p=p)


def validation_ids(g: GraphTensors, n: int, seed: int) -> np.ndarray:
    """A fixed subset of a validation graph's configs (the same in every epoch and run)."""
    if g.num_configs <= n:
        return np.arange(g.num_configs)
    return np.sort(np.random.default_rng(seed).choice(g.num_configs, n, replace=False))


def validate(model: Model, items: Sequence[tuple[GraphTensors, np.ndarray]],
             chunk_size: int = 1024,
             ctx: distributed.Context | None = None) -> dict[str, float]:
    """Mean τ, OPA and competition score (tile: 2 − top-5 ratio; layout: τ) over graphs."""
    taus, opas, scores = [], [], []
    for g, ids in (ctx.shard(items) if ctx else items):  # under DDP: this rank's graphs
        pred = model.predict(g, ids, chunk_size=chunk_size)
        runtime = g.runtime[ids]
        taus.append(kendall_tau(pred, runtime))
        opas.append(opa(pred, runtime))
        scores.append(tile_score(pred, runtime) if g.kind == "tile" else taus[-1])
    if ctx is not None and ctx.world > 1:  # every rank gets every graph's metrics, in order
        rows = ctx.unshard(list(zip(taus, opas, scores, strict=True)), len(items))
        taus, opas, scores = ([r[i] for r in rows] for i in range(3))
    mean = lambda v: float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")  # noqa: E731
    return {"valid_tau": mean(taus), "valid_opa": mean(opas), "valid_score": mean(scores)}


@dataclass
class BestSoFar:
    """Early-stopping state, saved inside `last.pt`: the best score, its epoch and
    weights, and how many epochs have passed without beating it."""

    score: float = -math.inf
    epoch: int = 0
    bad: int = 0
    state: dict | None = None

    def update(self, score: float, epoch: int, model: Model, path: Path | None,
               count_bad: bool = True) -> None:
        """Keep `model` if `score` beats the best (writing it to `path`), else count a bad
        epoch (unless `count_bad` is off, as in GST's head phase)."""
        if score > self.score or (math.isnan(self.score) and not math.isnan(score)):
            self.score, self.epoch, self.bad = score, epoch, 0
            self.state = copy.deepcopy(model.state())
            if path is not None:
                atomic_save(self.state, path)
        elif count_bad:
            self.bad += 1

    def restore(self, net: torch.nn.Module) -> None:
        if self.state is not None:
            net.load_state_dict(self.state["state_dict"])

    def checkpoint(self) -> dict:
        return {"best_score": self.score, "best_epoch": self.epoch, "bad": self.bad,
                "best_state": self.state}

    @classmethod
    def from_checkpoint(cls, ckpt: dict) -> BestSoFar:
        return cls(ckpt["best_score"], ckpt["best_epoch"], ckpt["bad"], ckpt["best_state"])


def seed_everything(seed: int) -> np.random.Generator:
    """Seed python, torch and a fresh numpy generator: a run is a function of its seed."""
    random.seed(seed)
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


def build_or_restore(model: Model, train_graphs: Sequence[Graph], ckpt: dict | None) -> None:
    """Build the network with a feature transform fitted on the train graphs, or with the
    transform and weights of a checkpoint being resumed."""
    if ckpt is not None:
        model.build(FeatureTransform.from_dict(ckpt["model"]["transform"]))
        model.net.load_state_dict(ckpt["model"]["state_dict"])
    else:
        model.build(FeatureTransform.fit(train_graphs))


def _rng_state(rng: np.random.Generator) -> dict:
    return {"python": random.getstate(), "numpy": rng.bit_generator.state,
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def _set_rng_state(rng: np.random.Generator, st: dict) -> None:
    random.setstate(st["python"])
    rng.bit_generator.state = st["numpy"]
    torch.set_rng_state(st["torch"])
    if st.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(st["cuda"])


@distributed.in_process_group  # under torchrun: DDP across the processes
def train(model: Model, train_graphs: Sequence[Graph], valid_graphs: Sequence[Graph] | None = None,
          settings: TrainSettings | None = None, out_dir: str | Path | None = None,
          resume: bool = False) -> dict:
    """Fit `model` on graphs; returns {'history', 'best_epoch', 'best_score', 'out_dir'}.

    Leaves the best weights (by validation score; by train loss without validation
    graphs) in `model`.
    """
    s = settings or TrainSettings()
    if s.mode not in ("full", "gst"):
        raise ValueError(f"mode must be 'full' or 'gst', got '{s.mode}'")
    if s.mode == "gst":
        from graphcost.train.gst import train_gst
        return train_gst(model, train_graphs, valid_graphs, s, out_dir, resume)
    ctx = distributed.context(s.device)  # rank and world size (1 without torchrun)
    device = ctx.device
    amp = device.type == "cuda"
    out = Path(out_dir) if out_dir is not None and ctx.is_main else None  # rank 0 writes
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    last = out / "last.pt" if out is not None else None
    resuming = resume and last is not None and last.exists()
    if not train_graphs:
        raise ValueError("no train graphs")

    np_rng = seed_everything(s.seed)
    ckpt = torch.load(last, map_location="cpu", weights_only=False) if resuming else None
    ckpt = ctx.broadcast(ckpt)  # rank 0's last.pt restores every rank
    build_or_restore(model, train_graphs, ckpt)
    net = model.net
    net.to(device)
    ddp = ctx.wrap(net)  # DDP when world size > 1, else `net` itself

    items = []  # (graph tensors, candidate config ids)
    for g in train_graphs:
        gt = model.prepare(g)
        ids = dedup_configs(g)[0] if s.dedup else np.arange(gt.num_configs)
        if ids.size >= 2:
            items.append((gt, ids))
    from graphcost.train.gst import check_full_graph_memory  # refuse before running out
    check_full_graph_memory(model, [gt.x.shape[0] for gt, _ in items], s)
    valid_items = [(gt, validation_ids(gt, s.valid_configs, s.seed))
                   for gt in (model.prepare(g) for g in (valid_graphs or []))]

    b = max(1, min(s.graphs_per_batch, len(items)))  # the global batch, split across ranks
    ctx.check_batch(b)
    steps_per_epoch = s.steps_per_epoch or -(-len(items) // b)
    total = s.epochs * steps_per_epoch
    opt = torch.optim.AdamW(net.parameters(), lr=s.lr, weight_decay=s.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: lr_factor(step, s, total))
    loss_fn = ctx.loss(RankingLoss(s.loss or model.default_loss, margin=s.margin))

    start_epoch, best, history = 1, BestSoFar(), []
    if ckpt is not None:
        opt.load_state_dict(ckpt["optimizer"])
        sched.load_state_dict(ckpt["scheduler"])
        _set_rng_state(np_rng, ckpt["rng"])
        start_epoch = ckpt["epoch"] + 1
        best = BestSoFar.from_checkpoint(ckpt)
        history = ckpt["history"]
    if out is not None:  # drop lines of epochs that a killed run logged after its checkpoint
        lines = [json.dumps(h) for h in history]
        (out / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))

    for epoch in range(start_epoch, s.epochs + 1):
        if best.bad >= s.patience:
            break
        net.train()
        t0, seen_graphs, seen_configs, losses = time.perf_counter(), 0, 0, []
        order = np.concatenate([np_rng.permutation(len(items))
                                for _ in range(-(-steps_per_epoch * b // len(items)))])
        bar = tqdm(range(steps_per_epoch), desc=f"epoch {epoch}/{s.epochs}",
                   disable=not (s.progress and ctx.is_main), leave=False)
        for step in bar:
            chosen = [items[i] for i in order[step * b:(step + 1) * b]]
            picked = [(gt, sample_configs(np_rng, ids, gt.runtime, s.configs_per_graph,
                                          s.fast_bias)) for gt, ids in chosen]
            batch = collate(ctx.shard(picked), with_runtime=True).to(device)  # this rank's
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
                scores = ddp(batch)
            loss = loss_fn(scores.float(), batch.runtime, batch.mask)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if s.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(net.parameters(), s.grad_clip)
            opt.step()
            sched.step()
            losses.append(loss.item())
            seen_graphs += len(picked)
            seen_configs += int(batch.mask.sum())
            rate = seen_configs / max(time.perf_counter() - t0, 1e-9)
            bar.set_postfix(loss=f"{losses[-1]:.4f}", cfg_s=f"{rate:.0f}")
        losses, seen_configs = ctx.all_mean(losses), ctx.all_sum(seen_configs)  # all ranks
        seconds = time.perf_counter() - t0
        row = {"epoch": epoch, "step": epoch * steps_per_epoch, "lr": sched.get_last_lr()[0],
               "train_loss": float(np.mean(losses)), "seconds": seconds,
               "graphs_per_s": seen_graphs / seconds, "configs_per_s": seen_configs / seconds}
        if valid_items:
            row.update(validate(model, valid_items, s.chunk_size, ctx))
            score = row["valid_score"]
        else:
            score = -row["train_loss"]
        best.update(score, epoch, model, out / "best.pt" if out is not None else None)
        row["best_epoch"] = best.epoch
        history.append(row)
        if out is not None:
            with open(out / "metrics.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            atomic_save({"model": model.state(), "optimizer": opt.state_dict(),
                         "scheduler": sched.state_dict(), "rng": _rng_state(np_rng),
                         "epoch": epoch, **best.checkpoint(), "history": history,
                         "settings": asdict(s)}, last)
        if s.progress and ctx.is_main:
            tqdm.write(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                for k, v in row.items()))
        if s.stop_after_epoch and epoch >= s.stop_after_epoch:
            return {"history": history, "best_epoch": best.epoch, "best_score": best.score,
                    "out_dir": out, "stopped": True}

    best.restore(net)
    net.to(device)
    return {"history": history, "best_epoch": best.epoch, "best_score": best.score,
            "out_dir": out, "stopped": False}
