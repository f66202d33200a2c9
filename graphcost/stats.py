"""Best-of-random expectations: what k configs picked at random are worth, the floor a
model's picks must clear. Pure functions of runtimes, at the bottom of the package, so
that the collector (`xla/collect.py`) and the benchmarks (`bench/`) share one formula.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def draw_weights(n: int, k: int) -> np.ndarray:
    """(n,): the probability that the j-th fastest of n configs is the fastest of k drawn
    at random without replacement, C(n-1-j, k-1) / C(n, k) (k at most n, at least 1)."""
    return np.array([math.comb(n - 1 - j, k - 1) for j in range(n)],
                    dtype=np.float64) / math.comb(n, k)


def expected_best_of_random(runtime: Sequence[float], k: int,
                            default: float = math.inf) -> float:
    """E[min(default, the fastest of k configs drawn without replacement from `runtime`)],
    over every draw (`draw_weights`)."""
    rt = np.sort(np.asarray(runtime, dtype=np.float64))
    n, k = len(rt), min(k, len(rt))
    if k < 1:
        return default
    return float((draw_weights(n, k) * np.minimum(rt, default)).sum())


def random_pick_score(runtime: Sequence[float], k: int = 5) -> float:
    """The expected tile score (2 − best of the top k / best of all) of k configs picked
    at random: the floor a model must clear on this graph."""
    best = float(np.min(runtime))
    return 2.0 - expected_best_of_random(runtime, k) / best
