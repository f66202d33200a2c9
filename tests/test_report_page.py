"""The report a person looks at: losses of any scale, per-graph scores at any count,
headings that name the split, and a page that renders with its pictures (Chromium)."""

import shutil
import subprocess
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from graphcost.eval.report import (
    RunResult,
    loss_curves,
    plot_per_graph,
    results_heading,
    write_report,
)

METRICS = ("kendall_tau", "opa", "slowdown@1", "slowdown@5", "score")


def result(model: str, taus, losses=(), split: str = "test") -> RunResult:
    graphs = {f"g{i:03d}": {m: (float(t) if m == "kendall_tau" else 1.0) for m in METRICS}
              for i, t in enumerate(taus)}
    summary = {m: {"mean": float(np.mean([g[m] for g in graphs.values()])), "lo": 0.0,
                   "hi": 1.0, "n": len(graphs), "left_out": {}} for m in METRICS}
    history = [{"epoch": e, "train_loss": loss, "valid_score": 0.3}
               for e, loss in enumerate(losses, 1)]
    return RunResult("layout:mini:random", model, Path("."),
                     {"graphs": graphs, "summary": summary, "split": split}, history)


def runs(count: int) -> list[RunResult]:
    rng = np.random.default_rng(0)
    base = rng.uniform(-0.3, 0.8, count)
    return [result("ranker", base + rng.normal(0.05, 0.1, count), (0.1, 0.06, 0.05)),
            result("resgcn", base + rng.normal(-0.05, 0.1, count), (28.0, 16.8, 14.0)),
            result("changed-bytes", base)]


def test_losses_a_hundredfold_apart_share_one_axis():
    curves = loss_curves(runs(5))
    assert set(curves) == {"ranker", "resgcn"}  # a rule has no loss
    for model, first in (("ranker", 0.1), ("resgcn", 28.0)):
        assert curves[model][0] == first
        assert np.allclose([v for _, v in curves[model][1]], [1.0, 0.6, 0.5])


def test_the_per_graph_figure_keeps_its_size_at_any_count_of_graphs(tmp_path):
    widths = []
    for count in (12, 400):
        path = plot_per_graph(runs(count), tmp_path / f"{count}.png", "per graph")
        widths.append(matplotlib.image.imread(path).shape[1])
    assert widths[0] == widths[1] <= 1500  # bars per graph and model grew 0.22 inch each


def test_the_table_heading_names_its_split():
    assert results_heading([{"split": "test"}]) == "Results on the test split"
    valid = results_heading([{"split": "valid"}])
    assert valid.startswith("Results on the valid split") and "not held out" in valid


def coloured_pixels(png: Path) -> int:
    """Pixels of a colour, not grey: the page's text and table are black on white, so only
    its pictures (the curves and points) draw them."""
    rgb = matplotlib.image.imread(png)[..., :3]
    return int(np.sum(rgb.max(axis=-1) - rgb.min(axis=-1) > 0.25))


def screenshot(page: Path, png: Path) -> None:
    subprocess.run([shutil.which("chromium"), "--headless", "--no-sandbox", "--disable-gpu",
                    "--hide-scrollbars", "--window-size=1200,1400", f"--screenshot={png}",
                    page.as_uri()], check=True, capture_output=True, timeout=120)


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="Debian's chromium is not installed (make test installs it)")
def test_the_page_shows_its_table_and_pictures_in_a_browser(tmp_path):
    page = write_report(runs(192), tmp_path / "report", "graphcost report")
    assert "<h2>Results on the test split</h2>" in page.read_text()
    screenshot(page, tmp_path / "page.png")
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(page, bare / "index.html")  # the same page without its pictures
    screenshot(bare / "index.html", tmp_path / "bare.png")
    shown, missing = coloured_pixels(tmp_path / "page.png"), coloured_pixels(tmp_path / "bare.png")
    assert shown > 5000 and missing < 500, (shown, missing)  # a broken-image icon: 64
