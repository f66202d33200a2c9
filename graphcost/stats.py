"""The statistics every layer shares, at the bottom of the package (it imports nothing of
graphcost): the ranking metrics of one graph (docs/design.md §5), means with 95%
intervals, geometric means of speed-ups, and what k configs picked at random are worth,
the floor a model's picks must clear.

Metric conventions, decided once here: a prediction is a score where LOWER means FASTER
(a predicted runtime), so a perfect model has τ = 1 against measured runtimes.
- fewer than two configs, or all runtimes equal: τ and OPA are undefined (NaN) and
  left out of means (the summary counts them);
- all predictions equal: τ = 0 (no information), OPA = 0 (no pair ordered correctly);
- OPA counts a pair as correct only when the prediction orders it strictly the same
  way as the runtimes (the TpuGraphs paper's definition); pairs of equal runtime are
  not counted;
- slowdown@K with K larger than the number of configs uses all configs (slowdown 0);
  ties in prediction are broken by config index (stable sort).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.stats

# ---------------------------------------------------------------- ranking metrics of a graph


def _check(pred: np.ndarray, runtime: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pred = np.asarray(pred, dtype=np.float64).reshape(-1)
    runtime = np.asarray(runtime, dtype=np.float64).reshape(-1)
    if pred.shape != runtime.shape:
        raise ValueError(f"pred has {pred.size} values but runtime has {runtime.size}")
    if not np.all(np.isfinite(pred)):  # NaNs have no order: τ and OPA would be wrong
        raise ValueError("NaN or infinite predictions (a diverged model) cannot be scored")
    return pred, runtime


def _pair_counts(x: np.ndarray) -> int:
    """Pairs of equal values (equal rows, for a 2-d array)."""
    _, counts = np.unique(x, axis=0, return_counts=True)
    return int((counts * (counts - 1) // 2).sum())


def kendall_tau(pred: np.ndarray, runtime: np.ndarray) -> float:
    """Kendall τ-b between predicted and measured runtimes."""
    pred, runtime = _check(pred, runtime)
    if pred.size < 2 or np.all(runtime == runtime[0]):
        return float("nan")
    if np.all(pred == pred[0]):
        return 0.0
    return float(scipy.stats.kendalltau(pred, runtime).statistic)


def kendall_tau_ranked(pred: np.ndarray, runtime: np.ndarray) -> float:
    """Kendall τ of the ranking a tuner makes from `pred`, ties broken uniformly at random,
    in expectation: τ-b credits a tie as neither right nor wrong, which a ranking cannot
    be. A broken tie is concordant or discordant with equal odds, so P − Q keeps its
    expectation and only the n1 pairs tied in pred join the denominator:
    τ_b·sqrt((n0 − n1)/n0). Equal to τ-b where pred has no ties; a rule that ties many
    configs is judged here as it would be used."""
    tau = kendall_tau(pred, runtime)
    if np.isnan(tau):
        return tau
    pred, _ = _check(pred, runtime)
    n0 = pred.size * (pred.size - 1) // 2
    return tau * math.sqrt((n0 - _pair_counts(pred)) / n0)


def opa(pred: np.ndarray, runtime: np.ndarray) -> float:
    """Ordered pair accuracy: of the pairs with different runtimes, the fraction whose
    predictions are ordered the same way (strictly).

    Derived from τ-b and tie counts, so it costs O(c log c) even for 100k configs:
    with n0 pairs, n1 tied in pred, n2 tied in runtime and n3 tied in both,
    P − Q = τ_b·sqrt((n0−n1)(n0−n2)) and P + Q = n0 − n1 − n2 + n3.
    """
    pred, runtime = _check(pred, runtime)
    n = pred.size
    n0 = n * (n - 1) // 2
    n2 = _pair_counts(runtime)
    if n < 2 or n2 == n0:
        return float("nan")
    n1 = _pair_counts(pred)
    if n1 == n0:
        return 0.0
    n3 = _pair_counts(np.stack([pred, runtime], 1))
    tau = scipy.stats.kendalltau(pred, runtime).statistic
    p_minus_q = tau * np.sqrt(float(n0 - n1) * float(n0 - n2))
    p_plus_q = n0 - n1 - n2 + n3
    concordant = (p_plus_q + p_minus_q) / 2.0
    return float(np.clip(round(concordant) / (n0 - n2), 0.0, 1.0))


def top_k(pred: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k best-predicted configs, best first (ties by index)."""
    pred = np.asarray(pred, dtype=np.float64).reshape(-1)
    return np.argsort(pred, kind="stable")[: max(1, min(k, pred.size))]


def slowdown_at_k(pred: np.ndarray, runtime: np.ndarray, k: int) -> float:
    """min(runtime of the k best-predicted) / min(runtime of all) − 1."""
    pred, runtime = _check(pred, runtime)
    if pred.size == 0:
        return float("nan")
    return float(runtime[top_k(pred, k)].min() / runtime.min() - 1.0)


def tile_score(pred: np.ndarray, normalized_runtime: np.ndarray) -> float:
    """The competition's tile score of one kernel: 2 − min(top-5 predicted)/min(all)."""
    return 1.0 - slowdown_at_k(pred, normalized_runtime, 5)


# ---------------------------------------------------------------- means and intervals


def bootstrap_ci(values: np.ndarray, n_boot: int = 1000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float, float]:
    """Mean and percentile bootstrap interval over graphs (NaNs left out).

    One value, or all equal, has no spread to resample: the interval is the mean itself
    (scipy would refuse one value and could differ from the mean by rounding).
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(v.mean())
    if np.all(v == v[0]):
        return mean, mean, mean
    ci = scipy.stats.bootstrap((v,), np.mean, n_resamples=n_boot, confidence_level=level,
                               method="percentile", vectorized=True,
                               rng=np.random.default_rng(seed)).confidence_interval
    return mean, float(ci.low), float(ci.high)


def ratio_of_means_ci(num: Sequence[float], den: Sequence[float], n_boot: int = 1000,
                      seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """mean(num) / mean(den) over paired items (graphs, programs), with a percentile
    bootstrap interval that resamples the pairs: a pooled share, which stays defined
    where a single item's share would divide by almost nothing."""
    n, d = np.asarray(num, np.float64).reshape(-1), np.asarray(den, np.float64).reshape(-1)
    if n.size == 0:
        return float("nan"), float("nan"), float("nan")
    point = float(n.mean() / d.mean())
    if n.size < 2:
        return point, point, point
    rng = np.random.default_rng(seed)
    picks = rng.integers(n.size, size=(n_boot, n.size))
    ratios = n[picks].mean(axis=1) / d[picks].mean(axis=1)
    low, high = np.percentile(ratios, [50 - 50 * level, 50 + 50 * level])
    return point, float(low), float(high)


def t_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student t interval (paired differences, log ratios). One value, or all
    equal, has no spread: the interval is the mean itself; no values, NaN."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(v.mean())
    if v.size < 2 or np.all(v == v[0]):
        return mean, mean, mean
    half = float(scipy.stats.t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return mean, mean - half, mean + half


@dataclass
class MeanCI:
    mean: float
    lo: float
    hi: float
    n: int  # graphs that had a defined value
    left_out: dict[str, str] = field(default_factory=dict)  # graph -> why it had none

    def __str__(self) -> str:
        return f"{self.mean:.4f} [{self.lo:.4f}, {self.hi:.4f}]"

    def over(self) -> str:
        """The graphs the mean is over and, when some had no value, how many were left out
        and why: the count printed beside a mean is the count averaged."""
        text = f"over {self.n} graph{'' if self.n == 1 else 's'}"
        if not self.left_out:
            return text
        names = sorted(self.left_out)
        which = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        reasons = Counter(self.left_out.values())
        why = "; ".join(r if len(reasons) == 1 else f"{k} {r}" for r, k in reasons.items())
        return f"{text}; {len(names)} left out ({which}): {why}"

    def noting(self, sep: str = " ") -> str:
        """The mean and interval, and after `sep`, when graphs were left out of it, over
        how many it is and which were left out and why (`over`)."""
        return f"{self}{sep}({self.over()})" if self.left_out else str(self)


def mean_over(values: Mapping[str, float], why: Callable[[str], str], n_boot: int = 1000,
              seed: int = 0) -> MeanCI:
    """The mean of the graphs' values with its bootstrap 95% interval (`bootstrap_ci`);
    a graph whose value is NaN is left out and kept in `left_out` with `why(graph)`."""
    v = np.array(list(values.values()), dtype=np.float64)
    left_out = {name: why(name) for name, x in values.items() if math.isnan(x)}
    return MeanCI(*bootstrap_ci(v, n_boot=n_boot, seed=seed), n=len(values) - len(left_out),
                  left_out=left_out)


def ratio_interval(slow: Sequence[float], fast: Sequence[float],
                   level: float = 0.95) -> tuple[float, float, float]:
    """slow/fast as the geometric mean of per-round ratios, with a t interval over the
    rounds' log ratios (rounds pair up: both configs were timed in each)."""
    d = np.log(np.asarray(slow, float)) - np.log(np.asarray(fast, float))
    mean, lo, hi = t_interval(d, level)
    return float(np.exp(mean)), float(np.exp(lo)), float(np.exp(hi))


def paired_difference(a: Sequence[float], b: Sequence[float], n_boot: int = 2000,
                      seed: int = 0) -> tuple[float, float, float]:
    """Mean of a − b over the same graphs with its bootstrap 95% interval."""
    d = np.asarray(a, float) - np.asarray(b, float)
    return bootstrap_ci(d, n_boot=n_boot, seed=seed)


def geomean_ci(x: Sequence[float]) -> list[float]:
    """Geometric mean of speed-ups with a 95% t interval over them (log scale)."""
    return list(ratio_interval(x, np.ones(len(x)))) if len(x) else [float("nan")] * 3


def geomean(x: Sequence[float]) -> float:
    """Geometric mean of the finite positive values: speed-ups multiply."""
    v = np.asarray([a for a in x if np.isfinite(a) and a > 0], dtype=np.float64)
    return float(np.exp(np.log(v).mean())) if v.size else float("nan")


# ---------------------------------------------------------------- best of random


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
