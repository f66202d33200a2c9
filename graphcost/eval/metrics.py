"""The official ranking metrics (docs/design.md §5), per graph and as means with 95% intervals.

Convention everywhere: a prediction is a score where LOWER means FASTER (a predicted
runtime), so a perfect model has τ = 1 against measured runtimes.

Edge cases, decided once here:
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

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats


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
    return float(stats.kendalltau(pred, runtime).statistic)


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
    tau = stats.kendalltau(pred, runtime).statistic
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
    ci = stats.bootstrap((v,), np.mean, n_resamples=n_boot, confidence_level=level,
                         method="percentile", vectorized=True,
                         rng=np.random.default_rng(seed)).confidence_interval
    return mean, float(ci.low), float(ci.high)


def t_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student t interval (paired differences, log ratios). One value, or all
    equal, has no spread: the interval is the mean itself; no values, NaN."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size == 0:
        return float("nan"), float("nan"), float("nan")
    mean = float(v.mean())
    if v.size < 2 or np.all(v == v[0]):
        return mean, mean, mean
    half = float(stats.t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size))
    return mean, mean - half, mean + half


@dataclass
class MeanCI:
    mean: float
    lo: float
    hi: float
    n: int  # graphs that had a defined value

    def __str__(self) -> str:
        return f"{self.mean:.4f} [{self.lo:.4f}, {self.hi:.4f}]"


def graph_metrics(kind: str, pred: np.ndarray, runtime: np.ndarray) -> dict[str, float]:
    """All metrics of one graph. For tile, `runtime` must be the normalized runtime."""
    row = {"configs": int(np.asarray(runtime).size),
           "kendall_tau": kendall_tau(pred, runtime), "opa": opa(pred, runtime)}
    for k in (1, 5, 10):
        row[f"slowdown@{k}"] = slowdown_at_k(pred, runtime, k)
    row["score"] = tile_score(pred, runtime) if kind == "tile" else row["kendall_tau"]
    return row


def evaluate_graphs(kind: str, preds: Mapping[str, np.ndarray],
                    runtimes: Mapping[str, np.ndarray], n_boot: int = 1000,
                    seed: int = 0) -> dict:
    """Per-graph metrics and their means with bootstrap 95% intervals.

    Returns {"kind", "graphs": {name: row}, "summary": {metric: MeanCI as dict}}; the
    collection's competition score is summary["score"] (tile: mean 2 − top-5 ratio,
    layout: mean τ).
    """
    missing = sorted(set(runtimes) - set(preds))
    if missing:
        raise ValueError(f"no predictions for {len(missing)} graphs, e.g. {missing[:3]}")
    for name in sorted(runtimes):
        if not np.all(np.isfinite(np.asarray(preds[name], dtype=np.float64))):
            raise ValueError(f"graph {name}: NaN or infinite predictions; a diverged model "
                             "cannot be scored")
    rows = {name: graph_metrics(kind, preds[name], runtimes[name]) for name in sorted(runtimes)}
    return {"kind": kind, "graphs": rows, "summary": summarize(rows, n_boot, seed)}


def summarize(rows: Mapping[str, Mapping[str, float]], n_boot: int = 1000,
              seed: int = 0) -> dict[str, dict]:
    """Every metric's mean over per-graph rows with its bootstrap 95% interval (MeanCI as
    dict); apart from `evaluate_graphs` so that rows pooled from several evaluations
    (cross-validation folds) are summarised the same way."""
    summary = {}
    for metric in ("kendall_tau", "opa", "slowdown@1", "slowdown@5", "slowdown@10", "score"):
        values = np.array([r[metric] for r in rows.values()], dtype=np.float64)
        mean, lo, hi = bootstrap_ci(values, n_boot=n_boot, seed=seed)
        summary[metric] = asdict(MeanCI(mean, lo, hi, int((~np.isnan(values)).sum())))
    return summary


def overall_score(collection_scores: Mapping[str, float]) -> float:
    """The competition's final score: the plain mean over collections."""
    return float(np.mean(list(collection_scores.values())))
