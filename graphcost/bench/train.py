"""`graphcost bench train`: training and inference throughput and peak memory per model.

Every model runs in its own spawned process so that its peak RSS is its own.
"""

from __future__ import annotations

import resource
import time

import numpy as np
import torch

from graphcost import children
from graphcost.bench import RowsResult
from graphcost.data.synthetic import make_layout_graph, make_tile_graph
from graphcost.models.model import Model
from graphcost.models.registry import model_names
from graphcost.models.scorer import score_graph
from graphcost.train import TrainSettings, fit


def _graphs(kind: str, rng: np.random.Generator, count: int, **kw) -> list:
    make = make_tile_graph if kind == "tile" else make_layout_graph
    return [make(rng, name=f"bench{i}", **kw) for i in range(count)]


def bench_one(name: str, kind: str, steps: int = 20, seed: int = 0,
              sizes: tuple[int, ...] = (1000, 10000), inference_configs: int = 128,
              threads: int = 0) -> dict:
    """Train `name` on synthetic `kind` data for 2 × `steps` steps (the second epoch is
    timed) and time full prediction on graphs of each size in `sizes`."""
    if threads:
        torch.set_num_threads(threads)
    rng = np.random.default_rng(seed)
    train_graphs = _graphs(kind, rng, 16)
    s = TrainSettings(epochs=2, steps_per_epoch=steps, warmup_steps=5, progress=False,
                      seed=seed, valid_configs=64)
    history = fit(Model(name, kind), train_graphs, None, s)["history"]
    row = {"model": name, "kind": kind, "train_graphs_per_s": history[-1]["graphs_per_s"],
           "train_configs_per_s": history[-1]["configs_per_s"]}
    for n in sizes:
        big = _graphs(kind, rng, 1, num_nodes=n, num_configs=inference_configs)[0]
        infer = Model(name, kind)
        infer.build(infer.fit_transform(train_graphs))
        t0 = time.perf_counter()
        gt = infer.prepare(big)
        t1 = time.perf_counter()
        score_graph(infer, gt)
        t2 = time.perf_counter()
        row[f"infer_{n}_configs_per_s"] = big.num_configs / (t2 - t1)
        row[f"infer_{n}_nodes_after_prune"] = int(gt.x.shape[0])
        row[f"prepare_{n}_s"] = t1 - t0
    row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return row


class TrainResult(RowsResult):
    """`bench train`'s figures: one `bench_one` row per (model, kind)."""


def bench_train(models: list[str] | None = None, kinds: tuple[str, ...] = ("layout", "tile"),
                steps: int = 20, seed: int = 0, sizes: tuple[int, ...] = (1000, 10000),
                inference_configs: int = 128, threads: int = 0) -> TrainResult:
    """One row per (model, kind): the default ranker and every baseline of each kind."""
    rows = []
    for kind in kinds:
        for name in models or model_names(kind, learned=True):
            if name not in model_names(kind, learned=True):  # heuristics do not train
                continue
            with children.pool() as pool:
                rows.append(pool.submit(bench_one, name, kind, steps, seed, sizes,
                                        inference_configs, threads).result())
    return TrainResult(rows)


def format_bench(result: TrainResult) -> str:
    """One line per (model, kind) row, every figure in its own column."""
    rows = result.rows
    keys = [k for k in rows[0] if k not in ("model", "kind")] if rows else []
    lines = ["model      kind    " + " ".join(f"{k:>24}" for k in keys)]
    for r in rows:
        lines.append(f"{r['model']:<10} {r['kind']:<7} " + " ".join(
            f"{r[k]:>24.1f}" if isinstance(r[k], float) else f"{r[k]:>24}" for k in keys))
    return "\n".join(lines)
