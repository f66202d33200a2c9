"""The one training loop (nanoGPT style): every kind of training runs through `fit`.

Each step takes B graphs and hands them to the step strategy (`steps.py`,
`segment_steps.py`), which samples C configs of each and returns the loss; `fit` does
the rest, the same for every strategy: AdamW with parameter groups, linear warm-up and
cosine decay (or the official baselines' constant-rate Adam, `optim.py`), gradient
clipping (global or per tensor), validation τ / OPA / score after every epoch on a fixed
config subset per graph (or one drawn afresh each epoch), early stopping, the best
weights kept, and an optional final phase training only the head (GST). A model's
default settings are `settings.train_defaults(name)`: the official recipe for the
official baselines.

Run directory: `best.pt` (the best model, loadable with `Model.load`), `last.pt` (the
full training state, written atomically after every epoch) and `metrics.jsonl` (one
line per epoch). `resume=True` restores weights, optimiser, scheduler, phase and the
python, numpy and torch RNG states from `last.pt`, so a killed run that is resumed ends
exactly where an uninterrupted one would. Under torchrun, full-graph training runs
data-parallel (`distributed.py`); only rank 0 writes files and prints.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphcost.atomic import write_json, write_text
from graphcost.errors import UserError
from graphcost.formats import Graph
from graphcost.models.base import GraphTensors
from graphcost.models.checkpoint import atomic_save, load_checkpoint
from graphcost.models.model import Model
from graphcost.progress import Progress
from graphcost.train import distributed
from graphcost.train.optim import optimiser
from graphcost.train.resume import (
    BestSoFar,
    check_resume,
    rng_state,
    seed_everything,
    set_rng_state,
    trained_on,
)
from graphcost.train.sampling import (
    epoch_order,
    extremes_and_middle,
    least_configs,
    sample_configs,
    source_weights,
    steps_per_epoch,
    validation_ids,
)
from graphcost.train.segment_steps import HistoryStep, SegmentStep
from graphcost.train.settings import TrainSettings, train_defaults
from graphcost.train.steps import FullGraphStep, Step
from graphcost.train.validation import validate


def step_strategy(s: TrainSettings) -> type[Step]:
    """The strategy the settings ask for (see `steps.py`)."""
    if s.mode == "full":
        return FullGraphStep
    return SegmentStep if s.gst_fresh_segments <= 0 else HistoryStep


@distributed.in_process_group  # under torchrun: DDP across the processes
def fit(model: Model, train_graphs: Sequence[Graph], valid_graphs: Sequence[Graph] | None = None,
        settings: TrainSettings | None = None, out_dir: str | Path | None = None,
        resume: bool = False, record: Mapping[str, Any] | None = None,
        sources: Mapping[str, str] | None = None) -> dict:
    """Train `model` on graphs; returns {'history', 'best_epoch', 'best_by', 'best_value',
    'best_score', 'out_dir', 'stopped', 'early_stop', 'before_head'} and what the strategy
    reports (GST: 'table_bytes'). `early_stop` says when and why early stopping ended the
    main phase (None when it ran all its epochs).

    Leaves the best weights in `model`: by validation score (or pooled OPA), or by train
    loss when there is nothing to validate on, which is said on stderr up front (for a
    run with a folder) and recorded (`best_by` in `run.json` and in each `metrics.jsonl`
    row). `best_by` names the `metrics.jsonl` figure the best epoch was chosen by and
    `best_value` is its value then; `best_score` is the validation figure (NaN without
    validation), never a loss.
    `before_head` holds the validation metrics of the best weights before a head-only
    phase (None without one).

    `record` says what the run trains on (the collection's `data` path and name, …):
    written to `run.json` and, with a fingerprint of the graph names, into `last.pt`, so
    that resuming the run on other graphs, or with another model or other model
    settings, is refused (`check_resume`) before anything in the run folder changes.

    `sources` (graph name → source of programs) is where the train graphs pool several
    sources; with setting `balance='source'` (the layout ranker's default) each source
    is then drawn equally often.
    """
    s = settings or train_defaults(model.name)
    s.check()
    if not train_graphs:
        raise ValueError("no train graphs")
    ctx = distributed.context(s.device)  # rank and world size (1 without torchrun)
    out = Path(out_dir) if out_dir is not None and ctx.is_main else None  # rank 0 writes
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    last = out / "last.pt" if out is not None else None
    if model.spec.net.closed_form:  # a heuristic baseline: nothing for an optimiser
        return fit_closed_form(model, train_graphs, valid_graphs, s, out, resume, record)

    rng = seed_everything(s.seed)
    resuming = resume and last is not None and last.exists()
    ckpt = load_checkpoint(last) if resuming else None
    ckpt = ctx.broadcast(ckpt)  # rank 0's last.pt restores every rank
    strategy = step_strategy(s)
    strategy.configure(model, s)  # GST: the model encodes in segments from now on
    run_data = trained_on(train_graphs, valid_graphs, record)
    if ckpt is not None:
        check_resume(ckpt, Path(out_dir or ".") / "last.pt", model, s, run_data)
    if ckpt is not None:  # the transform and weights of the run being resumed
        model.load_state(ckpt["model"])
    elif not s.warm_start:
        model.build(model.fit_transform(train_graphs))
        model.net.fit_prior(model.prepare(g) for g in train_graphs)
    elif model.net is None:
        raise ValueError("warm_start needs a fitted model: train or load one first")
    net = model.net.to(ctx.device)
    step = strategy(model, ctx.wrap(net) if strategy.ddp else net, train_graphs, s, ctx, out)
    valid_pool = validation_items(model, valid_graphs or [], s)
    valid = valid_pool
    best_by, unvalidated = selection(valid_graphs, bool(valid_pool), s)
    # said before training, not only in its last line; a fit with no run folder (a cost
    # model updated on one program's measurements) has no validation by design
    if unvalidated and ctx.is_main and out is not None:
        print(f"warning: {unvalidated}: the best epoch is chosen by training loss, and "
              "early stopping follows it", file=sys.stderr, flush=True)
    balance = s.balance or model.default_balance
    if out is not None and record is not None:
        drawn = {"balance": balance} if sources else {}
        write_json({**record, **drawn, "best_by": best_by}, out / "run.json")

    b = max(1, min(s.graphs_per_batch, len(step)))  # the global batch, split across ranks
    distributed.check_batch_split(s.graphs_per_batch, len(step), ctx.world)
    per_epoch = s.steps_per_epoch or steps_per_epoch(len(step), b, s.last_batch)
    weights = source_weights(step.names, sources) if balance == "source" and sources else None

    def phase_optimiser(head: bool):
        """A fresh optimiser for the main phase, or the head phase (no warm-up)."""
        params = step.parameters(head)
        cfg = dataclasses.replace(s, warmup_steps=0) if head else s
        epochs = step.head_epochs if head else s.epochs
        return params, *optimiser(net, params, cfg, epochs * per_epoch)

    start, best, history, main_end, before_head = 1, BestSoFar(), [], None, None
    if ckpt is not None:
        start, history = ckpt["epoch"] + 1, ckpt["history"]
        best = BestSoFar.from_checkpoint(ckpt)
        main_end, before_head = ckpt["main_end"], ckpt["before_head"]
        set_rng_state(rng, ckpt["rng"])
    step.resume(start - 1)
    if main_end is not None:
        step.begin_head(main_end + 1)
    params, opt, sched = phase_optimiser(main_end is not None)
    if ckpt is not None:
        opt.load_state_dict(ckpt["optimizer"])
        sched.load_state_dict(ckpt["scheduler"])
    if out is not None:  # drop lines of epochs that a killed run logged after its checkpoint
        write_text("".join(json.dumps(h) + "\n" for h in history), out / "metrics.jsonl")

    stopped, epoch, early = False, start, None
    try:
        while True:
            if main_end is None and (epoch > s.epochs or best.bad >= s.patience):
                if epoch <= s.epochs:
                    early = early_stop_reason(epoch - 1, s, best, bool(valid))
                    if s.progress and ctx.is_main:
                        print(early, flush=True)
                if not step.head_epochs:
                    break
                main_end = epoch - 1  # the head phase starts from the best weights
                best.restore(net)
                before_head = validate(model, valid, s.chunk_size, ctx) if valid else None
                step.begin_head(epoch)
                params, opt, sched = phase_optimiser(True)
            if main_end is not None and epoch > main_end + step.head_epochs:
                break
            head = main_end is not None
            net.train()
            t0, seen_graphs, seen_configs, losses = time.perf_counter(), 0, 0, []
            order = epoch_order(rng, len(step), per_epoch, b, s.last_batch, weights)
            label = (f"head epoch {epoch - main_end}/{step.head_epochs}" if head
                     else f"{step.name} epoch {epoch}/{s.epochs}")  # each phase counts its own
            bar = Progress(per_epoch, label, "step", enabled=s.progress and ctx.is_main,
                           lines=False, leave=False)  # off a terminal: the epoch's line alone
            for i in range(per_epoch):
                loss, configs = step.loss(order[i], rng, epoch)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                step.sync_gradients(params)
                clip_gradients(params, s)
                opt.step()
                sched.step()
                losses.append(loss.item())
                seen_graphs += len(order[i])
                seen_configs += configs
                rate = seen_configs / max(time.perf_counter() - t0, 1e-9)
                bar.set_postfix(loss=f"{losses[-1]:.4f}", cfg_s=f"{rate:.0f}")
                bar.update()
            bar.close()
            losses, seen_configs = ctx.all_mean(losses), ctx.all_sum(seen_configs)  # all ranks
            seconds = time.perf_counter() - t0
            row = {"epoch": epoch, "phase": "head" if head else step.name,
                   "step": epoch * per_epoch, "lr": sched.get_last_lr()[0],
                   "train_loss": sum(losses) / len(losses), "seconds": seconds,
                   "seconds_per_step": seconds / per_epoch,
                   "graphs_per_s": seen_graphs / seconds, "configs_per_s": seen_configs / seconds,
                   **step.stats()}
            if valid:
                if s.valid_resample:  # fresh configs each epoch, drawn as training draws
                    valid = [(gt, sample_configs(rng, cand, gt.runtime, s.valid_configs,
                                                 s.fast_bias)) for gt, cand in valid_pool]
                row.update(validate(model, valid, s.chunk_size, ctx))
                score = row["valid_opa_pooled" if s.select_on == "opa" else "valid_score"]
            else:
                score = -row["train_loss"]  # the lowest loss is the best
            best.update(score, epoch, model, out / "best.pt" if out is not None else None,
                        count_bad=not head)
            row["best_epoch"], row["best_by"] = best.epoch, best_by
            history.append(row)
            if out is not None:  # rewritten whole: a full disk leaves no half line
                write_text("".join(json.dumps(h) + "\n" for h in history), out / "metrics.jsonl")
                atomic_save({"model": model.state(), "optimizer": opt.state_dict(),
                             "scheduler": sched.state_dict(), "rng": rng_state(rng),
                             "epoch": epoch, **best.checkpoint(), "history": history,
                             "main_end": main_end, "before_head": before_head,
                             "settings": dataclasses.asdict(s), "trained_on": run_data},
                            out / "last.pt")
            if s.progress and ctx.is_main:
                print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                               for k, v in row.items()), flush=True)
            if s.stop_after_epoch and epoch >= s.stop_after_epoch:
                stopped = True
                break
            epoch += 1
    finally:
        closing = step.close()
    if not stopped:
        best.restore(net)
        net.to(ctx.device)
    by_loss = best_by == "train_loss"
    return {"history": history, "best_epoch": best.epoch, "best_by": best_by,
            "best_value": -best.score if by_loss else best.score,
            "best_score": float("nan") if by_loss else best.score,
            "no_validation": unvalidated, "out_dir": out, "stopped": stopped,
            "early_stop": early, "before_head": before_head, **closing}


def fit_closed_form(model: Model, train_graphs: Sequence[Graph],
                    valid_graphs: Sequence[Graph] | None, s: TrainSettings, out: Path | None,
                    resume: bool = False, record: Mapping[str, Any] | None = None) -> dict:
    """`fit` for a heuristic baseline (`models/heuristics.py`): what it needs from the
    train graphs is set once, in closed form, with no optimiser step (config-only's least
    squares; nothing for a training-free rule); then it is validated once. The run folder
    gets what a trained run's has, bar `last.pt`: `run.json`, `metrics.jsonl` (one row,
    epoch 0) and `best.pt`. The result says what was fitted under 'closed_form', and
    under 'no_validation' why it was not validated (None when it was)."""
    if resume and out is not None and (out / "last.pt").exists():
        raise UserError(f"{out}: holds a trained run (last.pt); {model.name} is fitted at "
                        "once and has nothing to resume: pass --overwrite or another --out")
    t0 = time.perf_counter()
    model.build(model.fit_transform(train_graphs))
    assert model.net is not None
    note = f"{model.name}: {model.net.fit_closed_form(model.prepare(g) for g in train_graphs)}"
    row: dict[str, Any] = {"epoch": 0, "phase": "closed-form",
                           "seconds": time.perf_counter() - t0}
    valid = validation_items(model, valid_graphs or [], s)
    if valid:
        row.update(validate(model, valid, s.chunk_size))
    best_by, unvalidated = selection(valid_graphs, bool(valid), s)
    score = row.get(best_by, float("nan"))  # no train loss: only a validation figure
    if out is not None:
        if record is not None:
            write_json(dict(record), out / "run.json")
        write_text(json.dumps(row) + "\n", out / "metrics.jsonl")
        model.save(out / "best.pt")
    return {"history": [row], "best_epoch": 0, "best_by": None if unvalidated else best_by,
            "best_value": score, "best_score": score, "no_validation": unvalidated,
            "out_dir": out, "stopped": False, "early_stop": None, "before_head": None,
            "closed_form": note}


def selection(graphs: Sequence[Graph] | None, validated: bool,
              s: TrainSettings) -> tuple[str, str | None]:
    """The `metrics.jsonl` figure that picks the best epoch and drives early stopping,
    and, when there is nothing to validate on, why (for the warning and the last line):
    then it is the train loss, and the user must know that no validation chose it."""
    if validated:
        return "valid_opa_pooled" if s.select_on == "opa" else "valid_score", None
    if not graphs:
        return "train_loss", "no valid/ split"
    least = least_configs(s.min_configs, s.configs_per_graph)
    return "train_loss", (f"none of the {len(graphs)} valid graphs has the {least} configs "
                          "that min_configs asks for")


def validation_items(model: Model, graphs: Sequence[Graph],
                     s: TrainSettings) -> list[tuple[GraphTensors, np.ndarray]]:
    """Validation graphs with the configs each epoch scores: a fixed subset, or (with
    `valid_resample`) all candidates, sampled afresh by `fit`. Graphs with fewer configs
    than `min_configs` are dropped and `max_configs` applies, as for training; with
    last_batch='drop', only whole batches of graphs are kept (official tile pipeline)."""
    least = least_configs(s.min_configs, s.configs_per_graph)
    items = []
    for n, g in enumerate(graphs):
        if g.num_configs < least:
            continue
        gt = model.prepare(g)
        if s.valid_resample or s.max_configs:
            ids = extremes_and_middle(np.arange(gt.num_configs), gt.runtime, s.max_configs,
                                      np.random.default_rng((s.seed, 1, n)))
        else:
            ids = validation_ids(gt, s.valid_configs, s.seed)
        items.append((gt, ids))
    if s.last_batch == "drop" and len(items) >= s.graphs_per_batch:
        items = items[:len(items) // s.graphs_per_batch * s.graphs_per_batch]
    return items


def clip_gradients(params: list[torch.nn.Parameter], s: TrainSettings) -> None:
    """Bound the norm of all gradients together (global) or of each tensor's (per_tensor,
    Keras' clipnorm) to `grad_clip`; 0: no clipping."""
    if s.grad_clip <= 0:
        return
    if s.clip == "global":
        torch.nn.utils.clip_grad_norm_(params, s.grad_clip)
        return
    for p in params:
        if p.grad is not None:
            torch.nn.utils.clip_grad_norm_(p, s.grad_clip)


def early_stop_reason(last: int, s: TrainSettings, best: BestSoFar, valid: bool) -> str:
    """Why the main phase ended after epoch `last` of `s.epochs`, for the user."""
    what = "validation score" if valid else "train loss"
    return (f"early stopping after epoch {last} of {s.epochs}: {best.bad} epochs without a "
            f"better {what} than epoch {best.epoch}'s (patience={s.patience}); the model is "
            f"epoch {best.epoch}'s")
