"""The figures of `graphcost bench families`: per family, per headroom and overall.

Every figure is a geometric mean over programs of speed-ups over the default, with a
95% interval; the model's (and learning's, and the search's) also against random-K and
the portfolio, and as a share of the pool's log speed-up. A program's *headroom* is its
pool best's speed-up over the default, confirmed when its rows were timed again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from graphcost.stats import geomean_ci

STRATEGIES = ("pool", "model", "portfolio", "random", "default")
HEADROOM = ((0.0, 1.05, "< 5%"), (1.05, 1.10, "5-10%"), (1.10, math.inf, ">= 10%"))


def headroom_of(row: dict[str, Any]) -> float:
    """The pool best's speed-up over the default: confirmed when timed again."""
    return row.get("confirmed", row["stored"])["pool"]


def share_of_pool(arm: np.ndarray, pool: np.ndarray) -> list[float] | None:
    """Σ log arm / Σ log pool over programs (the share of the pool's log speed-up
    reached), with a bootstrap 95% interval over programs; None where the pool's
    geometric-mean speed-up is below 1.05 (a share of almost nothing is noise)."""
    logs = np.log(np.stack([arm, pool], axis=1))
    if logs[:, 1].mean() < math.log(HEADROOM[1][0]):
        return None
    rng = np.random.default_rng(0)
    boot = [logs[j, 0].sum() / logs[j, 1].sum() for j in
            (rng.integers(0, len(logs), len(logs)) for _ in range(1000))
            if logs[j, 1].sum() > 0]
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return [float(logs[:, 0].sum() / logs[:, 1].sum()), float(lo), float(hi)]


def figures(rows: list[dict[str, Any]], source: str) -> dict[str, Any]:
    """Geometric means over programs with 95% intervals: each strategy's speed-up over
    the default, the model's (and the search's) over random-K and over the portfolio,
    and the share of the pool's log speed-up each reaches."""
    out: dict[str, Any] = {"programs": len(rows)}
    if not rows:
        return out
    arms = [s for s in (*STRATEGIES, "learn", "search", "model_fastest")
            if all(s in r[source] for r in rows)]
    v = {s: np.array([r[source][s] for r in rows]) for s in arms}
    for s in arms:
        out[s] = geomean_ci(v[s])
    for s in {"model", "learn", "search"} & set(arms):
        out[f"{s}_vs_random"] = geomean_ci(v[s] / v["random"])
        out[f"{s}_vs_portfolio"] = geomean_ci(v[s] / v["portfolio"])
        share = share_of_pool(v[s], v["pool"])
        if share:
            out[f"{s}_share_of_pool"] = share
    if "search" in arms:  # configs beyond the pool: the search beat the pool's best
        out["search_beats_pool"] = int((v["search"] > v["pool"]).sum())
    return out


def summarize_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Figures over every program, per family and per headroom bucket; confirmed ones
    when the rows were timed again, else stored ones."""
    source = "confirmed" if rows and all("confirmed" in r for r in rows) else "stored"
    out: dict[str, Any] = {"source": source, "all": figures(rows, source), "families": {},
                           "headroom": {}}
    for fam in sorted({r["family"] for r in rows}):
        out["families"][fam] = figures([r for r in rows if r["family"] == fam], source)
    for lo, hi, label in HEADROOM:
        out["headroom"][label] = figures([r for r in rows if lo <= headroom_of(r) < hi],
                                         source)
    if source == "confirmed":  # the model's choice slower than the default beyond noise
        for arm in ("model", "model_fastest"):
            out[f"{arm}_slower_than_default"] = sorted(
                r["program"] for r in rows if any(ci[2] < 1 for ci in r.get(f"{arm}_ci", [])))
    return out


def _ci(v: Sequence[float] | None) -> str:
    return f"{v[0]:.3f} [{v[1]:.3f}, {v[2]:.3f}]" if v else "-"


def format_families(result: dict[str, Any]) -> str:
    """Per family, per headroom bucket and overall: geometric-mean speed-ups over the
    default of each strategy, and the model against random-K and the portfolio."""
    s = result["summary"]
    k = result["k"]
    search = "search" in s["all"]
    head = (f"{'':24} {'n':>3} {'pool best':>9} {'model':>7} {'portfolio':>9} "
            f"{'random-' + str(k):>9} {'model/random':>12} {'model/portf.':>12}"
            + (f" {'search':>7}" if search else ""))

    def line(label: str, f: dict[str, Any]) -> str:
        if not f["programs"]:
            return f"{label:24} {0:>3}"
        return (f"{label:24} {f['programs']:>3} {f['pool'][0]:>8.3f}x {f['model'][0]:>6.3f}x "
                f"{f['portfolio'][0]:>8.3f}x {f['random'][0]:>8.3f}x "
                f"{f['model_vs_random'][0]:>11.3f}x {f['model_vs_portfolio'][0]:>11.3f}x"
                + (f" {f['search'][0]:>6.3f}x" if search else ""))

    lines = [f"{result['collection']}: {result['model']} (seeds {result['seeds']}, "
             f"{result['folds']}-fold leave-family-out) against portfolio "
             f"{result['portfolio']}, random-{k} and the pool's best; K = {k}; "
             f"{s['source']} runtimes, geometric means of speed-ups over the default"
             + (f"; search: the model's best {k} of {result['samples']} fresh configs "
                f"({result['evaluations']} scored; seed {result['seeds'][0]}'s model)"
                if search else ""), head]
    lines += [line(fam, f) for fam, f in s["families"].items()]
    lines += ["by headroom (the pool best's speed-up over the default):"]
    lines += [line(label, f) for label, f in s["headroom"].items()]
    lines += [line("all", s["all"])]
    for label, f in [("all", s["all"]), *s["headroom"].items()]:
        if f["programs"] < 2:
            continue
        for arm in [a for a in ("model", "learn", "search") if a in f]:
            lines.append(f"{label}, {arm}: {_ci(f[arm])} vs random-{k} {_ci(f['random'])}, "
                         f"portfolio {_ci(f['portfolio'])}; {arm}/random "
                         f"{_ci(f[arm + '_vs_random'])}, {arm}/portfolio "
                         f"{_ci(f[arm + '_vs_portfolio'])}; share of the pool's log speed-up "
                         f"{_ci(f.get(arm + '_share_of_pool'))}")
        if search:
            lines.append(f"{label}: the search beat the pool's best on "
                         f"{f['search_beats_pool']} of {f['programs']} programs")
    if "model_slower_than_default" in s:
        slow, plain = s["model_slower_than_default"], s["model_fastest_slower_than_default"]
        lines.append(f"model's choice slower than the default beyond the rounds' noise: "
                     f"{len(slow)} programs{': ' + ', '.join(slow) if slow else ''}; "
                     f"choosing the fastest stored instead (no noise rule): {len(plain)}"
                     f"{': ' + ', '.join(plain) if plain else ''}")
    if "model_fastest" in s["all"]:
        lines.append("the model's choice without the noise rule (the fastest stored of its "
                     "picks): " + "; ".join(
                         f"{label} {_ci(f['model_fastest'])}"
                         for label, f in [*s["headroom"].items(), ("all", s["all"])]
                         if f["programs"]))
    lines.append("(95% intervals over programs)")
    return "\n".join(lines)
