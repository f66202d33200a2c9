"""Validation during training: the metrics that drive early stopping."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from graphcost.models.base import GraphTensors
from graphcost.models.model import Model
from graphcost.models.scorer import score_graph
from graphcost.stats import kendall_tau, opa, tile_score
from graphcost.train import distributed


def validate(model: Model, items: Sequence[tuple[GraphTensors, np.ndarray]],
             chunk_size: int = 1024,
             ctx: distributed.Context | None = None) -> dict[str, float]:
    """Mean τ, OPA and competition score (tile: 2 − top-5 ratio; layout: τ) over graphs,
    and the configs scored and the seconds it took (this rank's, under DDP): prediction
    speed, measured where training already scores."""
    t0 = time.perf_counter()
    taus, opas, scores, pairs = [], [], [], []
    mine = ctx.shard(items) if ctx else items
    for g, ids in mine:  # under DDP: this rank's graphs
        pred = score_graph(model, g, ids, chunk_size)
        runtime = g.runtime[ids]
        taus.append(kendall_tau(pred, runtime))
        opas.append(opa(pred, runtime))
        scores.append(tile_score(pred, runtime) if g.kind == "tile" else taus[-1])
        pairs.append(ordered_pairs(runtime))
    if ctx is not None and ctx.world > 1:  # every rank gets every graph's metrics, in order
        rows = ctx.unshard(list(zip(taus, opas, scores, pairs, strict=True)), len(items))
        taus, opas, scores, pairs = ([r[i] for r in rows] for i in range(4))
    mean = lambda v: float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")  # noqa: E731
    w = np.asarray(pairs, float) * np.isfinite(opas)
    pooled = float(np.nansum(np.asarray(opas) * w) / w.sum()) if w.sum() else float("nan")
    return {"valid_tau": mean(taus), "valid_opa": mean(opas), "valid_score": mean(scores),
            "valid_opa_pooled": pooled, "valid_configs": sum(len(ids) for _, ids in mine),
            "valid_seconds": time.perf_counter() - t0}


def ordered_pairs(runtime: np.ndarray) -> int:
    """Pairs of configs with different runtimes: the weight of a graph's OPA when pairs
    are pooled over graphs (TF-Ranking's OPAMetric)."""
    _, counts = np.unique(runtime, return_counts=True)
    n = runtime.size
    return int(n * (n - 1) // 2 - (counts * (counts - 1) // 2).sum())
