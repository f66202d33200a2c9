"""`graphcost bench baselines`: the official baselines at their official settings, side
by side with the official TF code's results on the same data.

Each (collection, model, seed) trains in a fresh spawned process with `graphcost train`'s
defaults for that model (the official recipe, `models.registry.MODELS`) and only the seed
set, then scores every config of every test graph. Per test graph: Kendall τ (layout)
or the tile score (tile); per run: seconds per epoch (the whole training run's wall
time, data loading, validation and checkpoints included, over its epochs) and peak
resident memory (VmHWM).

`--official DIR` reads the official code's runs: one JSON per run with `collection`
(e.g. 'layout/cpu/default'), `model` (e.g. 'ResModel'), `seed`, `test` (graph file stem
→ the score of every config, in file order, lower = faster), `epochs_run`,
`train_lib_wall_seconds` (its `train_lib.train`, which also writes its test CSV) and
`peak_rss_mb`. Both sides' scores become metrics through the same code here.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphcost import children
from graphcost.bench import BenchResult
from graphcost.errors import UserError

#: bundled collection → the kind of graph it holds: every official baseline of that kind
#: (`models.registry.official_models`) runs on it
COLLECTIONS = {"layout/cpu/default": "layout", "layout/cpu/random": "layout",
               "options/cpu": "tile"}


def graph_metric(kind: str, scores: np.ndarray, runtime: np.ndarray) -> float:
    """τ for layout, the tile score for tile: the collection's headline metric."""
    from graphcost.stats import kendall_tau, tile_score

    return tile_score(scores, runtime) if kind == "tile" else kendall_tau(scores, runtime)


def test_runtimes(data: Path) -> tuple[str, dict[str, np.ndarray]]:
    """The collection's kind and the runtime each test graph is ranked by."""
    from graphcost.data.collection import open_collection

    coll = open_collection(data)
    if "test" not in coll.splits:
        raise UserError(f"collection {coll.name} at {data} has no test split")
    return coll.kind, {g.name: np.asarray(g.target, np.float64)
                       for g in coll.graphs("test", lazy=True)}


def run_one(data: str, model: str, seed: int, threads: int) -> dict:
    """Train `model` on `data` at its defaults with `seed`; per-graph test metric, time
    and memory (run in a fresh process: its peak RSS is its own)."""
    import torch

    from graphcost.bench import peak_bytes
    from graphcost.data.collection import open_collection
    from graphcost.models.scorer import score_graph
    from graphcost.train.run import train_model
    from graphcost.train.settings import train_defaults

    torch.set_num_threads(threads)
    settings = train_defaults(model)
    settings.seed, settings.progress = seed, False
    coll = open_collection(data)
    kind, runtimes = test_runtimes(Path(data))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-baselines-") as tmp:
        m, result = train_model(coll, model, tmp, settings)
    wall = time.perf_counter() - t0
    history = result["history"]
    try:
        test = {g.name: graph_metric(kind, score_graph(m, g), runtimes[g.name])
                for g in coll.graphs("test", lazy=True)}
    except UserError:  # the scorer refuses NaN scores: the training diverged
        return {"model": model, "seed": seed, "diverged": True, "epochs_run": len(history)}
    return {"model": model, "seed": seed, "test": test, "epochs_run": len(history),
            "best_epoch": result["best_epoch"],
            "valid_opa": [h.get("valid_opa_pooled") for h in history],
            "train_seconds_per_epoch": float(np.mean([h["seconds"] for h in history])),
            "seconds_per_epoch": wall / len(history),  # with validation and checkpoints
            "peak_rss_mb": peak_bytes() / 2**20}


def load_official(directory: str | Path, root: Path) -> dict[tuple[str, str], list[dict]]:
    """The official runs in `directory`, as rows like `run_one`'s, by (collection, model)."""
    from graphcost.models.registry import official_names

    out: dict[tuple[str, str], list[dict]] = {}
    files = sorted(Path(directory).glob("*.json"))
    if not files:
        raise UserError(f"--official {directory}: no .json result files there")
    kinds: dict[str, tuple[str, dict[str, np.ndarray]]] = {}
    for f in files:
        try:
            run = json.loads(f.read_text())
            coll, name = run["collection"], official_names()[run["model"]]
            scores = run["test"]
        except (json.JSONDecodeError, KeyError) as e:
            raise UserError(f"{f}: not an official run result (missing or bad {e})") from None
        if coll not in kinds:
            kinds[coll] = test_runtimes(root / "npz" / coll)
        kind, runtimes = kinds[coll]
        missing = sorted(set(runtimes) - set(scores))
        if missing:
            raise UserError(f"{f}: no scores for test graphs {', '.join(missing[:3])}")
        if not all(np.isfinite(scores[n]).all() for n in runtimes):
            out.setdefault((coll, name), []).append(
                {"model": name, "seed": run.get("seed"), "diverged": True})
            continue
        out.setdefault((coll, name), []).append({
            "model": name, "seed": run.get("seed"), "epochs_run": run.get("epochs_run"),
            "best_epoch": None if run.get("best_epoch") is None else run["best_epoch"] + 1,
            "valid_opa": [e.get("val_opa") for e in run.get("train_curve", [])],
            "seconds_per_epoch": (run["train_lib_wall_seconds"] / run["epochs_run"]
                                  if run.get("train_lib_wall_seconds") else None),
            "peak_rss_mb": run.get("peak_rss_mb"),
            "test": {n: graph_metric(kind, np.asarray(scores[n], float), rt)
                     for n, rt in runtimes.items()}})
    return out


def summarize(runs: list[dict]) -> dict:
    """Mean over graphs of the seed-averaged metric with its 95% interval; the seed
    means and their spread; mean seconds per epoch and peak MB. Runs whose training
    diverged (NaN scores) are left out and listed."""
    from graphcost.stats import bootstrap_ci

    diverged = [r["seed"] for r in runs if r.get("diverged")]
    runs = [r for r in runs if not r.get("diverged")]
    if not runs:
        return {"diverged_seeds": diverged, "mean": float("nan")}
    names = sorted(runs[0]["test"])
    per_graph = np.array([[r["test"][n] for n in names] for r in runs])  # (seeds, graphs)
    mean, lo, hi = bootstrap_ci(np.nanmean(per_graph, 0))
    seed_means = np.nanmean(per_graph, 1)
    sec = [r["seconds_per_epoch"] for r in runs if r.get("seconds_per_epoch") is not None]
    mb = [r["peak_rss_mb"] for r in runs if r.get("peak_rss_mb") is not None]
    return {"graphs": names, "per_graph": np.nanmean(per_graph, 0).tolist(), "mean": mean,
            "lo": lo, "hi": hi, "seeds": [r["seed"] for r in runs],
            "seed_means": seed_means.tolist(), "spread": [float(seed_means.min()),
                                                          float(seed_means.max())],
            "epochs_run": [r["epochs_run"] for r in runs],
            "best_epoch": [r["best_epoch"] for r in runs],
            "valid_opa": [r.get("valid_opa", []) for r in runs],
            "seconds_per_epoch": float(np.mean(sec)) if sec else None,
            "peak_rss_mb": float(np.max(mb)) if mb else None, "diverged_seeds": diverged}


def compare(ours: dict, official: dict) -> dict:
    """graphcost − official: the paired difference over the same graphs (95% interval),
    and whether the gap between the two means is within the official code's own
    run-to-run spread (the range of its seed means), and inside that range."""
    from graphcost.stats import bootstrap_ci

    assert ours["graphs"] == official["graphs"]
    d = bootstrap_ci(np.asarray(ours["per_graph"]) - np.asarray(official["per_graph"]))
    lo, hi = official["spread"]
    ratio = (official["seconds_per_epoch"] / ours["seconds_per_epoch"]
             if ours["seconds_per_epoch"] and official["seconds_per_epoch"] else None)
    mine = ours["spread"]
    return {"difference": list(d), "gap": ours["mean"] - official["mean"],
            "official_spread": hi - lo,
            "within_spread": abs(ours["mean"] - official["mean"]) <= hi - lo,
            "mean_inside_range": bool(lo <= ours["mean"] <= hi),
            "ranges_overlap": bool(mine[0] <= hi and lo <= mine[1]), "speedup": ratio}


@dataclass
class BaselinesResult(BenchResult):
    """`bench baselines`' table: per (collection, model), graphcost's runs summarised,
    beside the official code's and `compare`d with them when there are some."""

    root: str  # the folder holding npz/
    seeds: list[int]
    table: list[dict[str, Any]]  # collection, model, graphcost[, official, compare's keys]


def bench_baselines(root: str | Path, seeds: Sequence[int] = (0, 1, 2),
                    collections: Sequence[str] | None = None,
                    models: Sequence[str] | None = None, official: str | Path | None = None,
                    jobs: int = 1, threads: int = 1,
                    on_row: Callable[[dict], None] | None = None) -> BaselinesResult:
    """Rows (collection, model, seed) as they finish, then a summary per (collection,
    model), side by side with the official runs when `official` is given."""
    root = Path(root)
    from graphcost.models.registry import official_models

    plan = [(c, m) for c, kind in COLLECTIONS.items() if collections is None or c in collections
            for m in official_models(kind) if models is None or m in models]
    if not plan:
        raise UserError(f"nothing to run: collections {list(COLLECTIONS)} with their models")
    for c, _ in plan:
        if not (root / "npz" / c).is_dir():
            raise UserError(f"{root / 'npz' / c}: no such collection (--data is the folder "
                            "holding npz/)")
    theirs = load_official(official, root) if official is not None else {}
    ours: dict[tuple[str, str], list[dict]] = {}
    # one fresh process per run, so that each run's peak memory is its own
    with children.pool(max(1, jobs), max_tasks_per_child=1) as pool:
        futures = [(c, m, pool.submit(run_one, str(root / "npz" / c), m, s, threads))
                   for c, m in plan for s in seeds]
        for c, m, fut in futures:
            row = fut.result()
            row["collection"] = c
            ours.setdefault((c, m), []).append(row)
            if on_row:
                on_row(row)
    table = []
    for (c, m), runs in ours.items():
        entry = {"collection": c, "model": m, "graphcost": summarize(runs)}
        if (c, m) in theirs:
            entry["official"] = summarize(theirs[(c, m)])
            if "spread" in entry["graphcost"] and "spread" in entry["official"]:
                entry.update(compare(entry["graphcost"], entry["official"]))
        table.append(entry)
    return BaselinesResult(root=str(root), seeds=list(seeds), table=table)


HEADER = f"{'collection':<20} {'model':<13} {'seed':>4} {'metric':>7} {'epochs':>6} " \
         f"{'s/epoch':>8} {'peak MB':>8}"


def format_row(r: dict) -> str:
    if r.get("diverged"):
        return f"{r['collection']:<20} {r['model']:<13} {r['seed']:>4} diverged (NaN scores)"
    metric = float(np.nanmean(list(r["test"].values())))
    return (f"{r['collection']:<20} {r['model']:<13} {r['seed']:>4} {metric:>7.3f} "
            f"{r['epochs_run']:>6} {r['seconds_per_epoch']:>8.2f} {r['peak_rss_mb']:>8.0f}")


def _side(s: dict) -> str:
    if "spread" not in s:
        return f"every run diverged (seeds {s['diverged_seeds']})"
    lo, hi = s["spread"]
    gone = (f"; diverged, left out: seed {', '.join(map(str, s['diverged_seeds']))}"
            if s["diverged_seeds"] else "")
    sec = f"{s['seconds_per_epoch']:.2f}" if s["seconds_per_epoch"] is not None else "?"
    mb = f"{s['peak_rss_mb']:.0f}" if s["peak_rss_mb"] is not None else "?"
    return (f"{s['mean']:.3f} [{s['lo']:.3f}, {s['hi']:.3f}] seeds {lo:.3f}–{hi:.3f}, "
            f"{sec} s/epoch, {mb} MB{gone}")


def format_baselines(result: BaselinesResult) -> str:
    """Per (collection, model): graphcost, the official code, their paired difference."""
    lines = ["mean over test graphs of the seed-averaged metric (layout τ, tile score), "
             "95% interval; seed means min–max"]
    for e in result.table:
        lines.append(f"{e['collection']} {e['model']}")
        lines.append(f"  graphcost  {_side(e['graphcost'])}")
        if "official" in e and "difference" not in e:
            lines.append(f"  official   {_side(e['official'])}")
        elif "official" in e:
            d = e["difference"]
            speed = f", graphcost {e['speedup']:.1f}x faster per epoch" if e["speedup"] else ""
            lines.append(f"  official   {_side(e['official'])}")
            lines.append(f"  graphcost − official {d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}]; "
                         f"|gap| within the official seed spread ({e['official_spread']:.3f}): "
                         f"{'yes' if e['within_spread'] else 'no'}; inside its range: "
                         f"{'yes' if e['mean_inside_range'] else 'no'}; seed ranges overlap: "
                         f"{'yes' if e['ranges_overlap'] else 'no'}{speed}")
    return "\n".join(lines)


def plot_curves(result: BaselinesResult, path: str | Path) -> Path:
    """Validation OPA per epoch of every run, graphcost and official side by side, one
    panel per (collection, model): do the two learn at the same pace?"""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = result.table
    cols = min(4, len(table))
    rows = -(-len(table) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(table):]:
        ax.set_visible(False)
    for ax, e in zip(axes.flat, table, strict=False):
        for side, style in (("official", "C1"), ("graphcost", "C0")):
            for i, curve in enumerate(e.get(side, {}).get("valid_opa", [])):
                ax.plot(range(1, len(curve) + 1), curve, style, alpha=0.7, lw=1,
                        label=side if i == 0 else None)
        ax.set_title(f"{e['collection']}\n{e['model']}", fontsize=9)
        ax.set_xlabel("epoch")
    for row in axes:
        row[0].set_ylabel("validation OPA")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
