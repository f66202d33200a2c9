"""Every `graphcost bench` benchmark, one module each; the modules import none of each
other. What several of them share, measuring a step of this very process, the base of
their results, a pool's default config and the anytime plot of search strategies, is
here."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from graphcost.errors import UserError
from graphcost.formats.npz import LayoutGraph


class BenchResult:
    """Base of the dataclass each benchmark's entry function returns, so that its
    signature says what the benchmark holds; `to_json` is what `--json` writes."""

    def to_json(self) -> dict[str, Any]:
        """The fields as one JSON object, in their order (a dataclass field as an object
        too): the dict the benchmark returned before it had a result type."""
        return dataclasses.asdict(self)  # every subclass is a dataclass


@dataclasses.dataclass
class RowsResult(BenchResult):
    """A benchmark's figures that are one row per measured step and nothing else."""

    rows: list[dict[str, Any]]

    def to_json(self) -> list[dict[str, Any]]:  # type: ignore[override]
        """The rows alone, a bare JSON list: what `--json` wrote before results had types."""
        return self.rows


def _reset_peak() -> None:
    """Reset the kernel's resident high-water mark (VmHWM) to the current resident set.

    psutil has no peak figure on Linux and `resource.getrusage`'s ru_maxrss cannot be
    reset, so the per-step peak needs /proc: writing 5 to clear_refs (Linux 4.0+).
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_bytes() -> int:
    """VmHWM (since the process started, or the last `_reset_peak`), from /proc for the
    same reason."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def measure_call(fn: Callable[[], object]) -> tuple[float, float, float]:
    """(seconds, peak resident MiB added, private MiB added and held by the result).

    The peak counts file pages a memory map touched, which the kernel may map in
    large runs and can drop at any time; the private figure is anonymous memory only.
    """
    proc = psutil.Process()
    _reset_peak()
    before = proc.memory_info()
    t = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - t
    after = proc.memory_info()
    peak = max(0, peak_bytes() - before.rss) / 2**20
    # On Linux psutil's `shared` is the file-backed (and shmem) part of `rss`, so the rest
    # is anonymous memory (RssAnon); `uss` would also count the pages a memory map touched.
    private = max(0, (after.rss - after.shared) - (before.rss - before.shared)) / 2**20
    del result
    return seconds, peak, private


def plot_anytime(curves: Mapping[str, Sequence[Sequence[float]]], path: str | Path, title: str,
                 optimum: Sequence[float] = ()) -> Path:
    """Anytime curves, written whole or not at all: per strategy, the geometric mean over
    programs of the best speed-up found after K = 1, 2, … executables timed (`curves`:
    strategy -> one curve per program), and the mean `optimum` as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from graphcost.atomic import atomic_open

    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = plt.get_cmap("tab20").colors  # distinct for up to 20 strategies
    for i, (name, per_program) in enumerate(curves.items()):
        if len(per_program):
            curve = np.exp(np.mean(np.log(np.asarray(per_program, dtype=float)), axis=0))
            ax.plot(np.arange(1, len(curve) + 1), curve, label=name,
                    color=colours[(2 * i) % 20 + (i // 10) % 2],  # dark shades first
                    ls="--" if name.startswith("model") else "-")
    if len(optimum):
        ax.axhline(float(np.exp(np.mean(np.log(optimum)))), color="k", ls="--", lw=1,
                   label="optimum")
    ax.set(xlabel="executables timed after the default (K)",
           ylabel="speed-up over the default (geometric mean)", xscale="log", title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    try:
        with atomic_open(path) as f:
            fig.savefig(f, dpi=110, format="png")
    finally:
        plt.close(fig)
    return path


def default_index(g: Any) -> int:
    """The default config's row: no layout set (every feature −1) or every knob unset."""
    from graphcost.xla.options import OptionConfig

    if isinstance(g, LayoutGraph):
        rows = np.all(np.asarray(g.node_config_feat) == -1, axis=(1, 2))
    else:
        rows = np.all(np.asarray(g.config_feat) == OptionConfig.default().features(), axis=1)
    found = np.flatnonzero(rows)
    if not found.size:
        raise UserError(f"{g.name}: no default config among its {g.num_configs} configs; "
                        "a pool without the default cannot say what tuning gains")
    return int(found[0])
