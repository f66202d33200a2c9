"""The noise ceiling of measured graphs: how well the runtimes agree with themselves.

Each graph graphcost measures keeps every timing round's runtime per config
(`config_runtime_rounds`, by default the minimum of the round's calls) and which
configs share one executable (`config_fingerprint`). Kendall τ between the first two
rounds, over distinct executables, is the best τ any model can expect on that graph: a
model scored against one round cannot agree with it better than another round of the
same measurement does.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from graphcost.formats.npz import read_extra
from graphcost.stats import bootstrap_ci, kendall_tau


def rounds_tau(rounds: np.ndarray) -> float | None:
    """τ between the first two rounds (columns) of one graph's executables (rows)."""
    rounds = np.asarray(rounds, dtype=np.float64)
    if rounds.ndim != 2 or rounds.shape[0] < 2 or rounds.shape[1] < 2:
        return None
    return kendall_tau(rounds[:, 0], rounds[:, 1])


def file_noise_tau(path: str | Path) -> float | None:
    """A measured file's round-to-round τ over its distinct executables (None when the
    file does not keep its rounds, as published TpuGraphs files do not)."""
    extra = read_extra(path)
    rounds = extra.get("config_runtime_rounds")
    if rounds is None:
        return None
    if "config_fingerprint" in extra:
        _, first = np.unique(extra["config_fingerprint"], return_index=True)
        rounds = rounds[np.sort(first)]
    return rounds_tau(rounds)


def noise_ceiling(files: Iterable[str | Path]) -> tuple[float, float, float, int] | None:
    """Mean per-graph round-to-round τ with its 95% bootstrap interval and the number of
    graphs, over the files that keep their rounds (None when none does)."""
    taus = [t for t in map(file_noise_tau, files) if t is not None]
    if not taus:
        return None
    mean, low, high = bootstrap_ci(np.array(taus))
    return mean, low, high, int(np.sum(~np.isnan(taus)))  # the graphs averaged
