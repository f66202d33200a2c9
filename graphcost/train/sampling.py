"""Which configs a step trains on and which a validation pass scores."""

from __future__ import annotations

import numpy as np

from graphcost.data.dedup import dedup_configs
from graphcost.formats import Graph
from graphcost.models.base import GraphTensors


def train_config_ids(graph: Graph, dedup: bool, cap: int = 0,
                     seed: int | tuple[int, int] = 0) -> tuple[np.ndarray, np.ndarray]:
    """The configs of a train graph that steps sample from, and the target to train them
    on: with `dedup`, one config per group of identical rows at the group's median
    (`dedup_configs`); then a fixed seeded subset of at most `cap` (0: no cap)."""
    if dedup:
        ids, target = dedup_configs(graph)
    else:
        ids, target = np.arange(graph.num_configs), np.asarray(graph.target, np.float64)
    if cap and ids.size > cap:
        pick = np.random.default_rng(seed).choice(ids.size, cap, replace=False)
        ids = ids[np.sort(pick)]
    return ids, target


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


def epoch_order(rng: np.random.Generator, items: int, steps: int, per_step: int) -> np.ndarray:
    """Graph indices for an epoch's steps: whole shuffled passes, as many as it takes."""
    return np.concatenate([rng.permutation(items) for _ in range(-(-steps * per_step // items))])
