"""Reports a person can look at: learning curves, per-graph scores, predicted vs measured.

Everything here works from plain data (training histories, evaluation dicts from
`evaluate_graphs`, and a few graphs' predictions), so a report can be redrawn from a
run directory's files without a model or torch.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and in CI
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from graphcost.atomic import atomic_open, write_json, write_text  # noqa: E402
from graphcost.errors import UserError  # noqa: E402
from graphcost.stats import MeanCI  # noqa: E402

SUMMARY_METRICS = ("kendall_tau", "opa", "slowdown@1", "slowdown@5", "score")


@dataclass
class RunResult:
    """One trained model evaluated on one collection's split."""

    collection: str
    model: str
    run_dir: Path
    evaluation: dict  # as returned by evaluate_graphs (+ collection, split, model)
    history: list[dict] = field(default_factory=list)  # metrics.jsonl rows
    samples: dict[str, dict[str, list[float]]] = field(default_factory=dict)  # pred, runtime


def read_history(run_dir: str | Path) -> list[dict]:
    """The per-epoch rows of a run's `metrics.jsonl` (none when it has no such file).
    Training rewrites the file whole, so a line that is not an epoch's row is damage (a
    hand edit), not a killed run: refused with the file and line named, never skipped."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if line.strip():
            rows.append(_history_row(path, number, line))
    return rows


def _history_row(path: Path, number: int, line: str) -> dict:
    """One line of `metrics.jsonl` as a row: a JSON object with an integer `epoch` and
    numbers (or null) as its `train_loss` and `valid_score`, what the report draws."""
    expected = ("expected one JSON object per epoch with an integer 'epoch' and numbers as "
                "'train_loss' and 'valid_score'")
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}, line {number}: not JSON ({e.msg}); {expected}") from None
    if not isinstance(row, dict):
        raise UserError(f"{path}, line {number}: {expected}, found {type(row).__name__} "
                        f"{line[:60]}")
    if type(row.get("epoch")) is not int:
        found = f"'epoch' {row['epoch']!r}" if "epoch" in row else "no 'epoch'"
        raise UserError(f"{path}, line {number}: {expected}, found {found}")
    for key in ("train_loss", "valid_score"):
        value = row.get(key)
        if value is not None and (isinstance(value, bool) or
                                  not isinstance(value, (int, float))):
            raise UserError(f"{path}, line {number}: {expected}, found {key!r} {value!r}")
    return row


def read_run_data(run_dir: str | Path) -> str:
    """The collection a training run was trained on: `data` of its `run.json`. A
    missing or damaged file is refused with the file named, since the report needs it."""
    path = Path(run_dir) / "run.json"
    if not path.exists():
        raise UserError(f"{path} not found: is {run_dir} a training run? Pass the data it "
                        "was trained on with --data")
    expected = "expected a JSON object whose 'data' is the collection's folder"
    try:
        record = json.loads(path.read_text(errors="replace"))
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not JSON ({e}); {expected}, or pass --data") from None
    if not isinstance(record, dict) or not isinstance(record.get("data"), str):
        found = (type(record).__name__ if not isinstance(record, dict)
                 else f"'data' {record['data']!r}" if "data" in record else "no 'data'")
        raise UserError(f"{path}: {expected}, found {found}; or pass --data")
    if not Path(record["data"]).is_dir():
        raise UserError(f"{path}: 'data' is {record['data']}, which is no folder here (moved "
                        "or deleted?); pass --data")
    return record["data"]


def loss_curves(runs: list[RunResult]) -> dict[str, tuple[float, list[tuple[int, float]]]]:
    """Each model's training loss per epoch divided by its first epoch's, with that first
    loss: losses differ in scale by 100× or more between models (the ranker's ≈ 0.1,
    ResModel's ≈ 28), so on one axis the smaller would draw a flat line at 0."""
    curves = {}
    for r in runs:
        points = [(h["epoch"], h["train_loss"]) for h in r.history
                  if h.get("train_loss") is not None]
        if points:  # a heuristic baseline has no loss
            first = points[0][1]
            scale = abs(first) or 1.0
            curves[r.model] = (first, [(e, v / scale) for e, v in points])
    return curves


def plot_learning_curves(runs: list[RunResult], path: Path, title: str) -> Path:
    """Train loss (each model's relative to its first epoch) and validation score per
    epoch, one line per model."""
    fig, (ax_loss, ax_val) = plt.subplots(1, 2, figsize=(10, 3.6))
    for model, (first, points) in loss_curves(runs).items():
        ax_loss.plot(*zip(*points, strict=True), marker=".",
                     label=f"{model} (epoch 1: {first:.3g})")
    for r in runs:
        points = [(h["epoch"], h["valid_score"]) for h in r.history
                  if h.get("valid_score") is not None]
        if points:  # a run without validation has no score
            ax_val.plot(*zip(*points, strict=True), marker=".", label=r.model)
    ax_loss.set(xlabel="epoch", ylabel="train loss ÷ its epoch 1", title="training loss")
    ax_val.set(xlabel="epoch", ylabel="validation score",
               title="validation score (τ; tile: 2 − top-5 ratio)")
    chosen = [n for n in map(selection_note, runs) if n]
    if chosen:  # no validation line: say what chose the best epoch instead
        ax_val.text(0.5, 0.5, "\n".join(chosen), ha="center", va="center", wrap=True,
                    transform=ax_val.transAxes)
    for ax in (ax_loss, ax_val):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # a heuristic alone draws no loss line
            ax.legend()
    fig.suptitle(title)
    return _save(fig, path)


def selection_note(run: RunResult) -> str | None:
    """What chose a run's best epoch when no validation did (its `metrics.jsonl` rows
    say `best_by`: train_loss): the training loss, said with the epoch and the loss, as
    the learning curves then have no validation line. None when validation chose it."""
    last = run.history[-1] if run.history else {}
    if last.get("best_by") != "train_loss":
        return None
    epoch = last.get("best_epoch")
    loss = next((h.get("train_loss") for h in run.history if h.get("epoch") == epoch), None)
    at = "" if loss is None else f" {loss:.4f}"
    return f"{run.model}: no validation graphs; best epoch {epoch} chosen by training loss{at}"


def plot_per_graph(runs: list[RunResult], path: Path, title: str,
                   metric: str = "kendall_tau") -> Path:
    """Per-graph values readable at any number of graphs: each model's values sorted
    (x: the share of graphs at or below), then the first model against each other one,
    a point per graph (above the diagonal: the first model is better there)."""
    first = runs[0]
    fig, axes = plt.subplots(1, len(runs), figsize=(4.4 * len(runs), 4.0), squeeze=False)
    ax = axes[0][0]
    for r in runs:
        values = _values(r, metric, list(r.evaluation["graphs"]))
        values = np.sort(values[~np.isnan(values)])
        share = (np.arange(len(values)) + 0.5) / max(len(values), 1)
        mean = r.evaluation["summary"][metric]["mean"]
        ax.plot(share, values, marker="." if len(values) <= 60 else None,
                label=f"{r.model} (mean {mean:.3f})")
    ax.set(xlabel="share of graphs", ylabel=metric, title=f"{metric} per graph, sorted")
    ax.legend(fontsize=8)
    for ax, other in zip(axes[0][1:], runs[1:], strict=True):
        names = [n for n in first.evaluation["graphs"] if n in other.evaluation["graphs"]]
        x, y = _values(other, metric, names), _values(first, metric, names)
        keep = ~(np.isnan(x) | np.isnan(y))
        ax.scatter(x[keep], y[keep], s=12, alpha=0.6)
        low = min([-0.05, *x[keep], *y[keep]])
        high = max([0.05, *x[keep], *y[keep]])
        ax.plot([low, high], [low, high], color="black", lw=0.8)
        above, below = int(np.sum(y[keep] > x[keep])), int(np.sum(y[keep] < x[keep]))
        ax.set(xlabel=f"{other.model}", ylabel=f"{first.model}",
               title=f"{first.model} better on {above}, {other.model} on {below}")
    for ax in axes[0]:
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    return _save(fig, path)


def _values(run: RunResult, metric: str, names: list[str]) -> np.ndarray:
    """`metric` of the named graphs, NaN where undefined (stored as null)."""
    graphs = run.evaluation["graphs"]
    return np.array([np.nan if graphs[n].get(metric) is None else graphs[n][metric]
                     for n in names], dtype=float)


def plot_scatter(run: RunResult, path: Path, title: str) -> Path:
    """Predicted score against measured runtime for a few graphs, with each graph's τ."""
    graphs = list(run.samples.items())
    cols = max(1, len(graphs))
    fig, axes = plt.subplots(1, cols, figsize=(3.2 * cols, 3.2), squeeze=False)
    for ax, (name, s) in zip(axes[0], graphs, strict=False):
        runtime, pred = np.asarray(s["runtime"]), np.asarray(s["pred"])
        tau = stats.kendalltau(pred, runtime).statistic if len(runtime) > 1 else np.nan
        ax.scatter(runtime / runtime.min(), pred, s=10, alpha=0.7)
        ax.set(xlabel="measured runtime / fastest", ylabel="predicted score",
               title=f"{name[:28]}\nτ = {tau:.3f}")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    try:
        with atomic_open(path) as f:
            fig.savefig(f, dpi=110, format=path.suffix[1:])
    finally:
        plt.close(fig)
    return path


def summary_rows(runs: list[RunResult], noise: dict[str, float] | None = None) -> list[dict]:
    """One row per (collection, model): the means with 95% intervals, and the ceiling."""
    rows = []
    for r in runs:
        s = r.evaluation["summary"]
        row = {"collection": r.collection, "model": r.model,
               "split": r.evaluation.get("split", ""), "graphs": len(r.evaluation["graphs"]),
               "noise_ceiling_tau": (noise or {}).get(r.collection)}
        for m in SUMMARY_METRICS:
            row[m] = s[m]
        rows.append(row)
    return rows


def format_table(rows: list[dict]) -> str:
    """The comparison table printed by the demo."""
    head = (f"{'collection':22} {'model':14} {'scored':>6}  {'kendall τ [95% CI]':>26}  "
            f"{'OPA':>6} {'slowdown@1':>10} {'score':>7} {'noise ceiling τ':>15}")
    lines = [head, "-" * len(head)]
    for r in rows:
        t = r["kendall_tau"]
        ceiling = r["noise_ceiling_tau"]
        lines.append(
            f"{r['collection']:22} {r['model']:14} {r['graphs']:6d}  "
            f"{t['mean']:8.3f} [{t['lo']:6.3f}, {t['hi']:6.3f}]  "
            f"{r['opa']['mean']:6.3f} {r['slowdown@1']['mean']:10.3f} {r['score']['mean']:7.3f} "
            f"{'n/a' if ceiling is None else f'{ceiling:.3f}':>15}")
    return "\n".join(lines + [f"  {note}" for note in left_out_notes(rows)])


def left_out_notes(rows: list[dict]) -> list[str]:
    """A line for each mean of the table that left graphs out (their metric undefined):
    over how many graphs it is, which were left out and why."""
    notes = []
    for r in rows:
        for metric in ("kendall_tau", "opa", "slowdown@1", "score"):
            ci = MeanCI(**r[metric])
            if ci.left_out:
                notes.append(f"{r['collection']} {r['model']}: {metric} mean {ci.over()}")
    return notes


def write_report(runs: list[RunResult], out_dir: str | Path, title: str = "graphcost report",
                 noise: dict[str, float] | None = None, notes: str = "") -> Path:
    """Draw every picture and write `index.html` and `summary.json`; return the page."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = summary_rows(runs, noise)
    write_json(rows, out / "summary.json")
    by_collection: dict[str, list[RunResult]] = {}
    for r in runs:
        by_collection.setdefault(r.collection, []).append(r)
    parts = [f"<h1>{html.escape(title)}</h1>",
             f"<p>{html.escape(notes)}</p>" if notes else "",
             f"<h2>{html.escape(results_heading(rows))}</h2>", _html_table(rows)]
    for coll, group in by_collection.items():
        slug = coll.replace(":", "_")
        pics = [plot_learning_curves(group, out / f"{slug}_learning.png", coll),
                plot_per_graph(group, out / f"{slug}_per_graph_tau.png",
                               f"{coll}: Kendall τ per graph of the "
                               f"{group[0].evaluation.get('split', '')} split")]
        for r in group:
            if r.samples:
                pics.append(plot_scatter(r, out / f"{slug}_{r.model}_scatter.png",
                                         f"{coll}, {r.model}: predicted vs measured"))
        parts.append(f"<h2>{html.escape(coll)}</h2>")
        parts += [f"<p>{html.escape(n)}</p>" for n in map(selection_note, group) if n]
        parts += [f'<p><img src="{p.name}" alt="{html.escape(p.stem)}"></p>' for p in pics]
    page = out / "index.html"
    write_text("<!doctype html><meta charset='utf-8'><title>" + html.escape(title)
               + "</title><style>body{font-family:sans-serif;max-width:1100px;margin:auto}"
               "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;"
               "text-align:right}img{max-width:100%}</style>\n" + "\n".join(parts) + "\n",
               page)  # last: a page that exists has every picture it shows
    return page


def results_heading(rows: list[dict]) -> str:
    """The table's heading, naming the split it scores: a validation split chose the
    training's best epoch, so its graphs were not held out."""
    splits = sorted({r["split"] for r in rows if r["split"]})
    if not splits:
        return "Results"
    heading = f"Results on the {' and '.join(splits)} split{'s' if len(splits) > 1 else ''}"
    if "valid" in splits:
        heading += " (the valid split chose each model's best epoch: not held out)"
    return heading


def _html_table(rows: list[dict]) -> str:
    head = ["collection", "model", "split", "scored", "Kendall τ [95% CI]", "OPA",
            "slowdown@1", "score", "noise ceiling τ"]
    out = ["<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for r in rows:
        t = r["kendall_tau"]
        ceiling = r["noise_ceiling_tau"]
        cells = [r["collection"], r["model"], r["split"], str(r["graphs"]),
                 f"{t['mean']:.3f} [{t['lo']:.3f}, {t['hi']:.3f}]", f"{r['opa']['mean']:.3f}",
                 f"{r['slowdown@1']['mean']:.3f}", f"{r['score']['mean']:.3f}",
                 "n/a" if ceiling is None else f"{ceiling:.3f}"]
        out.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    notes = [f"<p>{html.escape(note)}</p>" for note in left_out_notes(rows)]
    return "\n".join(out + ["</table>", *notes])
