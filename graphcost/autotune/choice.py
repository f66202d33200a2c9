"""The choice: a config replaces the default only when fresh rounds say it is clearly
faster, since a config that merely ties the default risks a slowdown for nothing.

The tuner (`tune`) keeps its best only if `confirmed_faster` in the fresh rounds of
`confirm`; the benchmarks that pick among stored or batch-timed configs (`bench
families`) pick with `clearly_faster` from those rounds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graphcost.autotune.measure import measure
from graphcost.autotune.program import Tunable
from graphcost.autotune.space import Config
from graphcost.xla.timing import Protocol

#: the least measured gain over the default for which a config is chosen: on the bundled
#: collections' leave-family-out runs, model choices stored less than 1% faster than the
#: default confirmed at 0.998–1.003× (median), and 9 of the 10 that confirmed slower
#: than the default beyond noise had been stored less than 1% faster (docs/notebook/2026-11.md)
MIN_GAIN = 0.02


def clearly_faster(default_rounds: Sequence[float], rounds: Sequence[float],
                   min_gain: float = MIN_GAIN) -> bool:
    """Whether a config measured faster than the default by more than chance: its gain
    (the ratio of the two fastest rounds, as the protocol's minimum compares them) must
    exceed `min_gain` and the rounds' own disagreement (the wider max/min range of either
    config's rounds). Choosing a config that only ties the default risks a slowdown for
    nothing, so a tie keeps the default."""
    d, x = np.asarray(default_rounds, float), np.asarray(rounds, float)
    if not (d.size and x.size and np.isfinite(d).all() and np.isfinite(x).all()):
        return False
    noise = max(d.max() / d.min(), x.max() / x.min()) - 1
    return bool(d.min() / x.min() - 1 > max(min_gain, noise))


def confirmed_faster(speedup: float, low: float, high: float,
                     min_gain: float = MIN_GAIN) -> bool:
    """Whether a config confirmed faster than the default: its paired 95% interval over
    the fresh rounds lies above 1 and the gain exceeds `min_gain` (a tie keeps the
    default: choosing it risks a slowdown for nothing)."""
    return bool(low > 1 and speedup > 1 + min_gain)


def confirm(t: Tunable, configs: dict[str, Config], protocol: Protocol,
            core: int | None) -> dict[str, list[float]]:
    """Each named config's runtime in every round of a fresh measurement of just these
    (a config named twice is timed once)."""
    keys = list(dict.fromkeys(t.configs.key(c) for c in configs.values()))
    by_key = {t.configs.key(c): c for c in configs.values()}
    results = measure(t, [by_key[key] for key in keys], protocol, core)
    out = {}
    for arm, c in configs.items():
        r = results[keys.index(t.configs.key(c))]
        if not r.ok:
            raise RuntimeError(f"{t.name}: the {arm} config measured ok in the selection "
                               f"round failed in the confirmation round ({r.status}: "
                               f"{r.error})")
        out[arm] = list(r.rounds_ns)
    return out
