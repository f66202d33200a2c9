"""Which configs a step trains on and which a validation pass scores."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

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


def least_configs(min_configs: int, configs_per_graph: int) -> int:
    """Fewest configs a train or validation graph needs to be kept (setting min_configs)."""
    return configs_per_graph if min_configs < 0 else min_configs


def extremes_and_middle(ids: np.ndarray, runtime: np.ndarray, cap: int,
                        rng: np.random.Generator) -> np.ndarray:
    """At most `cap` of `ids` as the official layout loader keeps them (`max_configs`):
    the fastest third, the slowest third, and the rest drawn from the middle at random,
    with replacement as `np.random.choice` draws there."""
    third = cap // 3
    if cap <= 0 or ids.size <= cap or third == 0:
        return ids
    ranked = ids[np.argsort(runtime[ids], kind="stable")]
    middle = rng.choice(ranked[third:-third], cap - 2 * third)
    return np.concatenate([ranked[:third], ranked[-third:], middle])


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


def source_weights(names: Sequence[str], sources: Mapping[str, str]) -> np.ndarray:
    """Drawing weights of train graphs `names` under which each source of programs
    (`sources`: graph name → source) is drawn equally often, its graphs equally among
    them."""
    of = [sources.get(n, "") for n in names]
    size = Counter(of)
    w = np.array([1.0 / size[s] for s in of])
    return w / w.sum()


def steps_per_epoch(items: int, per_step: int, last_batch: str) -> int:
    """Steps of one pass over `items` graphs (setting last_batch: 'drop' leaves out a
    last partial step, unless that is the only one)."""
    return max(1, items // per_step) if last_batch == "drop" else -(-items // per_step)


def epoch_order(rng: np.random.Generator, items: int, steps: int, per_step: int,
                last_batch: str = "fill", weights: np.ndarray | None = None) -> list[np.ndarray]:
    """Graph indices of an epoch's steps: whole shuffled passes, as many as it takes
    ('fill'), or one pass whose last step is shorter ('keep') or left out ('drop'). With
    `weights` (one per graph, summing to 1) there are no passes: each step draws
    `per_step` distinct graphs with those probabilities."""
    if weights is not None:
        return [rng.choice(items, size=min(per_step, items), replace=False, p=weights)
                for _ in range(steps)]
    if last_batch == "fill":
        order = np.concatenate([rng.permutation(items)
                                for _ in range(-(-steps * per_step // items))])
        return [order[i * per_step:(i + 1) * per_step] for i in range(steps)]
    out: list[np.ndarray] = []
    while len(out) < steps:  # passes of their own, each cut into steps
        order = rng.permutation(items)
        out += [order[i:i + per_step] for i in range(0, items, per_step)
                if last_batch == "keep" or i + per_step <= items or i == 0]
    return out[:steps]
