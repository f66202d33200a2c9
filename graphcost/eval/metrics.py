"""A collection's evaluation: every metric of each graph (`graph_metrics`) and their
means over graphs with 95% intervals (`summarize`), the competition's score per
collection and overall (docs/design.md §5). The per-graph metrics themselves and their
edge cases are `graphcost.stats`'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import numpy as np

from graphcost.stats import kendall_tau, mean_over, opa, slowdown_at_k, tile_score


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
    dict); a graph whose value is undefined is left out, named with why (`left_out`).
    Apart from `evaluate_graphs` so that rows pooled from several evaluations
    (cross-validation folds) are summarised the same way."""
    summary = {}
    for metric in ("kendall_tau", "opa", "slowdown@1", "slowdown@5", "slowdown@10", "score"):
        values = {name: float(r[metric]) for name, r in rows.items()}
        summary[metric] = asdict(mean_over(values, lambda g, m=metric: why_undefined(rows[g], m),
                                           n_boot, seed))
    return summary


def why_undefined(row: Mapping[str, Any], metric: str) -> str:
    """Why a graph has no value of `metric` (NaN): ranking needs two configs of different
    runtimes (`read_graph` has checked the runtimes finite; graphcost.stats says the rest)."""
    label = {"kendall_tau": "τ", "opa": "OPA"}.get(metric, metric)
    configs = int(row.get("configs", 0))
    if configs < 2:
        return f"{configs} config{'' if configs == 1 else 's'}, {label} undefined"
    return f"all runtimes equal, {label} undefined"


def overall_score(collection_scores: Mapping[str, float]) -> float:
    """The competition's final score: the plain mean over collections."""
    return float(np.mean(list(collection_scores.values())))
