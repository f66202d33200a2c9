"""Model-guided search over a configuration space, for a fixed budget of model scores.

Random sampling finds good configs slowly when there are many configurable nodes, but
the model is cheap next to a measurement, so search spends its budget on model scores:

1. score the initial sample (the default first) in one large batch;
2. each round, propose (a) every other value of one unit of the best config so far
   (greedy coordinate descent, the units taken in turn), (b) one-unit mutations of
   the `population` best configs, some mutated twice, and (c) crosses of two of them;
3. score the proposals not seen before in one batch and keep everything (elitism).

Every config scored is kept, so the best config returned is never worse by model score
than the best of the initial sample. A space small enough for the budget is scored
exhaustively instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from graphcost.autotune.space import Config, SearchSpace, distinct


@dataclass
class SearchResult:
    """Every distinct config scored, in the order scored, with its model score."""

    configs: list[Config]
    scores: np.ndarray
    sampled: int  # the first `sampled` configs are the initial sample
    exhaustive: bool = False

    def order(self) -> np.ndarray:
        """Indices of all scored configs, best predicted first (ties: first scored)."""
        return np.argsort(self.scores, kind="stable")

    @property
    def best_sampled_score(self) -> float:
        return float(self.scores[:self.sampled].min())

    @property
    def best_score(self) -> float:
        return float(self.scores.min())


def search(space: SearchSpace, score: Callable[[np.ndarray], np.ndarray],
           initial: Sequence[Config], rng: np.random.Generator, evaluations: int = 4096,
           population: int = 16, round_size: int = 256, patience: int = 3) -> SearchResult:
    """Search `space` starting from `initial` (scored first), for `evaluations` scores.

    `score(encoded) -> scores` is the model (lower = faster). Stops early only after
    `patience` rounds in a row that propose nothing new.
    """
    result = SearchResult([], np.zeros(0), 0)
    seen: set = set()
    parts: list[np.ndarray] = []

    def evaluate(configs: Sequence[Config]) -> None:
        fresh = [c for c in distinct(space, configs) if space.key(c) not in seen]
        fresh = fresh[:max(0, evaluations - len(result.configs))]
        if not fresh:
            return
        s = np.asarray(score(space.encode(fresh)), dtype=np.float64)
        seen.update(space.key(c) for c in fresh)
        result.configs.extend(fresh)
        parts.append(s)
        result.scores = np.concatenate(parts)

    if space.size() <= evaluations:
        everything = space.enumerate()
        default = space.key(space.default())
        evaluate([space.default()] + [c for c in everything if space.key(c) != default])
        result.sampled, result.exhaustive = len(result.configs), True
        return result

    evaluate(list(initial))
    result.sampled = len(result.configs)
    unit, idle = 0, 0
    while len(result.configs) < evaluations and idle < patience and space.units:
        order = result.order()
        parents = [result.configs[i] for i in order[:population]]
        proposals = space.values(parents[0], unit % len(space.units))
        unit += 1
        while len(proposals) < round_size:
            a = parents[int(rng.integers(len(parents)))]
            r = rng.random()
            if r < 0.2 and len(parents) > 1:
                child = space.cross(a, parents[int(rng.integers(len(parents)))], rng)
            else:
                child = space.mutate(a, rng)
                if r > 0.8:
                    child = space.mutate(child, rng)
            proposals.append(child)
        count = len(result.configs)
        evaluate(proposals)
        idle = 0 if len(result.configs) > count else idle + 1
    return result


def top_picks(scores: Sequence[float], default: int, k: int) -> list[int]:
    """The K best-scored configs other than the default (ties: first in the pool)."""
    order = np.argsort(np.asarray(scores, dtype=np.float64), kind="stable")
    return [int(i) for i in order if i != default][:k]


def best_of(picks: Sequence[int], runtime: np.ndarray, with_default: bool = True,
            default: int = 0) -> int:
    """The fastest measured pick (failed ones are NaN), or the default unless a pick is
    faster (a tie keeps the default)."""
    ids = ([default] if with_default else []) + [i for i in picks if np.isfinite(runtime[i])]
    return min(ids, key=lambda i: (runtime[i], i != default, i)) if ids else default
