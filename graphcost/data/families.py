"""Program families and family folds: graphs of one family must never be split between
training and evaluation, or a model is scored on near-copies of what it trained on.

`family_of` (the part of a graph name before the first dot: `mlp.003` is family `mlp`)
lives here, below both the zoo (`graphcost.xla.programs` uses it) and training and
evaluation, which read from `data/` and never from `xla/` (docs/design.md §8).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import numpy as np

from graphcost.errors import UserError


def family_of(name: str) -> str:
    """The family of a graph name `family.rest` (a name with no dot is its own family)."""
    return name.split(".", 1)[0]


def family_sizes(names: Iterable[str]) -> dict[str, int]:
    """Graphs per family, families sorted by name."""
    counts = Counter(family_of(n) for n in names)
    return {f: counts[f] for f in sorted(counts)}


def family_folds(sizes: dict[str, int], folds: int, seed: int = 0) -> list[list[str]]:
    """Split families into `folds` groups of about equal graph count, each family in
    exactly one; deterministic for a seed.

    Greedy: families in a seeded random order, then largest first (stable), each to the
    fold with the fewest graphs so far (ties to the lower fold). Each fold's families are
    returned sorted by name.
    """
    if folds < 2:
        raise UserError(f"folds must be at least 2, got {folds}")
    if folds > len(sizes):
        raise UserError(f"{folds} folds need at least {folds} families; "
                         f"the data has {len(sizes)}: {', '.join(sizes) or 'none'}")
    names = sorted(sizes)
    order = [names[i] for i in np.random.default_rng(seed).permutation(len(names))]
    order.sort(key=lambda f: -sizes[f])
    groups: list[list[str]] = [[] for _ in range(folds)]
    totals = [0] * folds
    for f in order:
        i = min(range(folds), key=lambda j: (totals[j], j))
        groups[i].append(f)
        totals[i] += sizes[f]
    return [sorted(g) for g in groups]


def carve_families(sizes: dict[str, int], fraction: float, seed: int = 0) -> list[str]:
    """Families set aside from `sizes` (for validation): seeded random families until
    they hold at least `fraction` of the graphs, always leaving one family out of them.
    Empty when `fraction` is 0 or there is only one family."""
    if not 0.0 <= fraction < 1.0:
        raise UserError(f"the validation fraction must be in [0, 1), got {fraction}")
    names = sorted(sizes)
    if fraction == 0.0 or len(names) < 2:
        return []
    want, chosen, held = fraction * sum(sizes.values()), [], 0
    for i in np.random.default_rng(seed).permutation(len(names)):
        if held >= want or len(chosen) == len(names) - 1:
            break
        chosen.append(names[i])
        held += sizes[names[i]]
    return sorted(chosen)

