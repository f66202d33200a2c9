"""`graphcost bench score`: configs/s of the exact fast scoring paths against the plain
forward pass, measured in the same run.

Each (kind, model, graph size) runs in its own spawned process. There the two paths
score the same configs, interleaved (their order alternating by round), at one thread
and at torch's default thread count. The per-graph setup (`config_scorer(graph)`) and
the call scoring the configs are timed apart (`compare_paths`); the table shows
plain/fast setup seconds and plain/fast peak resident memory added (Linux VmHWM,
reset before each step). Layout configs come in three kinds:

- random: the graph's own configs (a random layout at every configurable node);
- local: one random config with 1-3 nodes changed (what a search's mutations make);
- default: the compiler default (all −1) with 1-3 nodes set, as the official
  layout `default` collections and `graphcost collect --mode default` make them.

The limit of the batched path is its matmul work: `flops_per_config` counts the dense
layers' FLOPs (forward hooks on every Linear) while 8 random configs are scored, and
`bound_configs_per_s` divides the core's measured dense matmul throughput (one thread,
a (8192, 64) × (64, 64) product) by it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch_geometric.nn import Linear as PygLinear

from graphcost import children
from graphcost.bench import RowsResult
from graphcost.errors import UserError
from graphcost.models.registry import model_names


def configs_for(nodes: int) -> int:
    """Configs scored per call: fewer on the largest graphs, where the plain path takes
    seconds per config."""
    return 256 if nodes <= 10_000 else 64


def config_sets(gt, kind: str, count: int, rng: np.random.Generator) -> dict[str, torch.Tensor]:
    """The configs of each kind, shaped (and transformed) as `gt.configs(ids)` gives."""
    own = np.arange(count)
    if kind == "tile":
        return {"random": gt.configs(own)}
    raw = gt.graph.configs(own)  # (C, K, 18) raw layouts, random at every node
    k = raw.shape[1]

    def moved(start: np.ndarray) -> np.ndarray:
        out = np.repeat(start[None], count, axis=0)
        for q in range(count):
            for node in rng.choice(k, min(k, int(rng.integers(1, 4))), replace=False):
                out[q, node] = raw[rng.integers(count), node]
        return out

    sets = {"random": raw, "local": moved(raw[0]), "default": moved(np.full_like(raw[0], -1))}
    fix = gt.layout_config or (lambda a: a)
    return {name: torch.from_numpy(np.ascontiguousarray(fix(c), dtype=np.float32))
            for name, c in sets.items()}


def matmul_gflops(rows: int = 8192, width: int = 64, repeats: int = 50) -> float:
    """Dense float32 matmul throughput of this process's threads, (rows, w) × (w, w)."""
    a, b = torch.randn(rows, width), torch.randn(width, width)
    a @ b
    t = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * rows * width * width * repeats / (time.perf_counter() - t) / 1e9


def flops_per_config(net: torch.nn.Module, score: Callable[[torch.Tensor], torch.Tensor],
                     configs: torch.Tensor) -> float:
    """FLOPs per config of the dense layers (every Linear, 2·in·out per row) when
    scoring random `configs` (the batched path), setup excluded. Sparse aggregations
    are left out: they move memory rather than multiply."""
    total = [0]

    def count(_layer: torch.nn.Module, inputs: tuple, out: torch.Tensor) -> None:
        total[0] += 2 * inputs[0].numel() * out.shape[-1]

    hooks = [m.register_forward_hook(count) for m in net.modules()
             if isinstance(m, (torch.nn.Linear, PygLinear))]
    try:
        score(configs)
    finally:
        for h in hooks:
            h.remove()
    return total[0] / configs.shape[0]


def compare_paths(net, gt, configs: torch.Tensor, repeats: int) -> dict:
    """The plain and the fast path on the same configs, interleaved (their order
    alternating by round). Each round times the per-graph setup (`config_scorer(gt)`:
    graph states, a ranker's reference set) and the call scoring every config apart,
    as a search pays the first once per program and the second many times. Reported:
    configs/s of the call and seconds of the setup (median rounds), the ratio of the
    calls, peak MiB either added, and the largest score difference relative to the
    scores' scale (at least 1)."""
    from graphcost.bench import measure_call

    seconds = {(f, part): [] for f in (True, False) for part in ("setup", "call")}
    peak = {True: 0.0, False: 0.0}
    scores: dict[bool, torch.Tensor] = {}
    scorer: dict[bool, Callable] = {}

    for r in range(repeats):
        for fast in ((True, False) if r % 2 else (False, True)):
            s, p, _ = measure_call(
                lambda f=fast: scorer.__setitem__(f, net.config_scorer(gt, fast=f)))
            seconds[fast, "setup"].append(s)
            peak[fast] = max(peak[fast], p)
            s, p, _ = measure_call(lambda f=fast: scores.__setitem__(f, scorer[f](configs)))
            seconds[fast, "call"].append(s)
            peak[fast] = max(peak[fast], p)
            del scorer[fast]
    med = {key: float(np.median(v)) for key, v in seconds.items()}
    scale = max(1.0, float(scores[False].abs().max()))
    n = configs.shape[0]
    return {"plain_configs_per_s": n / med[False, "call"],
            "fast_configs_per_s": n / med[True, "call"],
            "ratio": med[False, "call"] / med[True, "call"],
            "plain_setup_s": med[False, "setup"], "fast_setup_s": med[True, "setup"],
            "plain_peak_mib": peak[False], "fast_peak_mib": peak[True],
            "max_rel_diff": float((scores[True] - scores[False]).abs().max()) / scale}


def measure_cell(kind: str, name: str, nodes: int, configs: int, repeats: int = 2,
                 seed: int = 0) -> dict:
    """Both paths on one synthetic graph: configs/s per config kind and thread count,
    peak MiB added per call, and the largest difference between their scores."""
    from graphcost.data.synthetic import make_layout_graph, make_tile_graph
    from graphcost.models.model import Model
    from graphcost.models.scorer import eval_mode

    rng = np.random.default_rng(seed)
    make = make_tile_graph if kind == "tile" else make_layout_graph
    model = Model(name, kind)
    torch.manual_seed(seed)
    model.build(model.fit_transform([make(rng, name=f"train{i}") for i in range(4)]))
    if getattr(model.net, "prior", None) is not None:  # a rule underneath starts the head at
        torch.nn.init.normal_(model.net.head[1].lins[-1].weight)  # zero: give it weights, so
        # the paths' scores differ where the network's do (as a trained model's would)
    gt = model.prepare(make(rng, num_nodes=nodes, num_configs=configs, name="bench"))
    sets = config_sets(gt, kind, configs, rng)
    net = model.net
    all_threads = torch.get_num_threads()
    row: dict = {"kind": kind, "model": name, "nodes": nodes, "nodes_scored": int(gt.x.shape[0]),
                 "configs": configs, "threads_all": all_threads, "cells": []}
    with eval_mode(net), torch.inference_mode():
        for threads in sorted({1, all_threads}):
            torch.set_num_threads(threads)
            for cfg_kind, cfg in sets.items():
                cell = compare_paths(net, gt, cfg, repeats)
                row["cells"].append({"threads": threads, "configs_kind": cfg_kind, **cell})
        torch.set_num_threads(1)
        row["flops_per_config"] = flops_per_config(net, net.config_scorer(gt, fast=True),
                                                   sets["random"][:8])
        row["matmul_gflops_1t"] = matmul_gflops()
        row["bound_configs_per_s"] = (row["matmul_gflops_1t"] * 1e9
                                      / max(1.0, row["flops_per_config"]))
    torch.set_num_threads(all_threads)
    return row


class ScoreResult(RowsResult):
    """`bench score`'s figures: one `measure_cell` row per (kind, model, graph size)."""


def bench_score(kinds: Sequence[str] = ("layout", "tile"), models: Sequence[str] | None = None,
                sizes: Sequence[int] = (1000, 10_000, 50_000), repeats: int = 2,
                configs: int = 0, on_row: Callable[[dict], None] | None = None) -> ScoreResult:
    """One row per (kind, model, size), each measured in a fresh spawned process; the
    models: every learned one of the kind, or those of `models` that rank it."""
    known = [n for k in kinds for n in model_names(k, learned=True)]
    unknown = sorted(set(models or ()) - set(known))
    if unknown:
        raise UserError(f"bench score --model {', '.join(unknown)}: no learned model of "
                        f"{' or '.join(kinds)}; known: {', '.join(known)}")
    rows = []
    for kind in kinds:
        for name in model_names(kind, learned=True):
            if models and name not in models:
                continue
            for n in sizes:
                with children.pool() as pool:
                    row = pool.submit(measure_cell, kind, name, n, configs or configs_for(n),
                                      repeats).result()
                rows.append(row)
                if on_row is not None:
                    on_row(row)
    return ScoreResult(rows)


HEADER = (f"{'kind':<6} {'model':<10} {'nodes':>6} {'scored':>6} {'configs':<8} {'thr':>3} "
          f"{'plain c/s':>10} {'fast c/s':>10} {'ratio':>7} {'setup s':>13} {'peak MiB':>11} "
          f"{'max rel diff':>12}")


def format_row(row: dict) -> str:
    """The row's cells, one line each, then its matmul bound."""
    lines = []
    for c in row["cells"]:
        lines.append(
            f"{row['kind']:<6} {row['model']:<10} {row['nodes']:>6} {row['nodes_scored']:>6} "
            f"{c['configs_kind']:<8} {c['threads']:>3} {c['plain_configs_per_s']:>10.1f} "
            f"{c['fast_configs_per_s']:>10.1f} {c['ratio']:>6.1f}× "
            f"{c['plain_setup_s']:>6.3f}/{c['fast_setup_s']:<6.3f} "
            f"{c['plain_peak_mib']:>5.0f}/{c['fast_peak_mib']:<5.0f} {c['max_rel_diff']:>12.1e}")
    lines.append(f"{'':<6} {'':<10} {'':>13} batched path: {row['flops_per_config'] / 1e6:.1f} "
                 f"MFLOP/config of dense layers, {row['matmul_gflops_1t']:.0f} GFLOP/s on one core "
                 f"→ at most {row['bound_configs_per_s']:.0f} configs/s "
                 f"({row['configs']} configs per call)")
    return "\n".join(lines)
