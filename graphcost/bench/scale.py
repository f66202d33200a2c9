"""`graphcost bench scale`: peak memory and step time of training as graphs grow.

For synthetic layout graphs of growing size (one graph per size, 10k configs read
lazily from an uncompressed `.npz`), trains the default ranker in each mode:

- full: the whole graph, every node (`prune_hops=-1`);
- pruned: configurable nodes and their 2-hop neighbourhood, whole graph per step;
- gst: Graph Segment Training on the unpruned graph, one segment back-propagated per
  step and the rest from the historical table (the paper's GST, `gst_fresh_segments=1`);
- gst-exact: every segment back-propagated, one at a time (`gst_fresh_segments=0`, the
  default of `--set mode=gst`): memory of one segment, compute of a full step.

Each (size, mode) runs in a fresh spawned process, so its peak RSS is its own. A full
or pruned step whose memory estimate (`train.memory.check_full_graph_memory`) exceeds the
budget is skipped and reported as such, not run into the OOM killer. Growth with size
is summarised by the exponent k of a least-squares fit  metric ∝ nodesᵏ.
"""

from __future__ import annotations

import shutil
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

MODES = ("full", "pruned", "gst", "gst-exact")


def make_graph_file(directory: str | Path, num_nodes: int, num_configs: int,
                    configurable_fraction: float = 0.01, seed: int = 0) -> Path:
    """Write one synthetic layout graph, uncompressed (so configs memory-map in place)."""
    from graphcost.data.synthetic import make_large_layout_graph
    from graphcost.formats.npz import write_graph

    directory = Path(directory)
    path = directory / f"scale_{num_nodes}_{num_configs}.npz"
    if path.exists():
        return path
    cfg = directory / f"configs_{num_nodes}.npy"
    nc = max(4, int(num_nodes * configurable_fraction))
    g = make_large_layout_graph(np.random.default_rng(seed), num_nodes, num_configs, nc,
                                name=path.stem, config_file=cfg)
    write_graph(path, g, compress=False)
    del g
    cfg.unlink()
    return path


def measure(path: str | Path, mode: str, configs: int = 32, steps: int = 3,
            segment_size: int = 1000, memory_budget: str = "75%", threads: int = 0,
            seed: int = 0) -> dict:
    """Train on one graph for 2 epochs of `steps` steps; time the second (GST fills its
    table in the first) and report the process's peak RSS: VmHWM, its own since it
    started, not getrusage's ru_maxrss, which Linux carries over from the parent through
    fork and exec (a spawned worker of a 1 GB parent reported 1 GB whatever it did)."""
    import torch

    from graphcost.bench import peak_bytes
    from graphcost.formats import read_graph
    from graphcost.models.model import Model
    from graphcost.train import MemoryBudgetError, TrainSettings, fit

    if threads:
        torch.set_num_threads(threads)
    graph = read_graph(path, lazy=True)
    row = {"nodes": graph.num_nodes, "mode": mode, "configs_total": graph.num_configs}
    gst = mode.startswith("gst")
    model = Model("ranker", "layout", prune_hops=2 if mode == "pruned" else -1,
                  **({"segment_size": segment_size} if gst else {}))
    s = TrainSettings(epochs=2, steps_per_epoch=steps, graphs_per_batch=1,
                      configs_per_graph=configs, warmup_steps=1, progress=False, seed=seed,
                      mode="gst" if gst else "full",
                      gst_fresh_segments=0 if mode == "gst-exact" else 1,
                      head_finetune_epochs=0, gst_max_configs=configs,
                      memory_budget=memory_budget)
    t0 = time.perf_counter()
    try:
        history = fit(model, [graph], None, s)["history"]
    except MemoryBudgetError as e:
        row.update(skipped=str(e))
        return row
    row.update(seconds_per_step=history[-1]["seconds"] / steps,
               first_epoch_s=history[0]["seconds"], total_s=time.perf_counter() - t0,
               nodes_trained=int(model.prepare(graph).x.shape[0]),
               peak_rss_mb=peak_bytes() / 2**20)
    return row


def growth_exponent(sizes: Sequence[float], values: Sequence[float]) -> float:
    """k of the least-squares fit log(value) = k·log(size) + c (NaN with < 2 points)."""
    x, y = np.log(np.asarray(sizes, float)), np.log(np.asarray(values, float))
    if x.size < 2 or np.ptp(x) == 0:
        return float("nan")
    return float(np.polyfit(x, y, 1)[0])


@dataclass
class ScaleResult(BenchResult):
    """`bench scale`'s figures: a `measure` row per (size, mode) and, per mode, the
    growth exponents of peak RSS and seconds per step (`growth_exponent`)."""

    rows: list[dict[str, Any]]
    growth: dict[str, dict[str, float]]  # mode -> {"peak_rss", "seconds_per_step"}


def bench_scale(sizes: Sequence[int] = (1000, 10000, 50000, 200000),
                modes: Sequence[str] = MODES, configs: int = 32, num_configs: int = 10000,
                steps: int = 3, segment_size: int = 1000, memory_budget: str = "75%",
                threads: int = 0, data_dir: str | Path | None = None,
                on_row: Callable[[dict], None] | None = None) -> ScaleResult:
    """Rows per (size, mode) and per-mode growth exponents of peak RSS and s/step;
    `on_row` sees each row as soon as it is measured (a big size takes minutes)."""
    bad = sorted(set(modes) - set(MODES))
    if bad:
        raise UserError(f"unknown mode(s) {bad}; known: {', '.join(MODES)}")
    tmp = Path(tempfile.mkdtemp(prefix="scale-")) if data_dir is None else Path(data_dir)
    tmp.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for n in sizes:
            with children.pool() as pool:
                path = pool.submit(make_graph_file, tmp, n, num_configs).result()
            for mode in modes:
                with children.pool() as pool:
                    rows.append(pool.submit(measure, path, mode, configs, steps, segment_size,
                                            memory_budget, threads).result())
                if on_row is not None:
                    on_row(rows[-1])
            if data_dir is None:
                path.unlink()
    finally:
        if data_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    growth = {}
    for mode in modes:
        done = [r for r in rows if r["mode"] == mode and "skipped" not in r]
        growth[mode] = {
            "peak_rss": growth_exponent([r["nodes"] for r in done],
                                        [r["peak_rss_mb"] for r in done]),
            "seconds_per_step": growth_exponent([r["nodes"] for r in done],
                                                [r["seconds_per_step"] for r in done])}
    return ScaleResult(rows=rows, growth=growth)


HEADER = (f"{'nodes':>8} {'mode':<9} {'trained':>8} {'peak RSS MB':>12} {'s/step':>9} "
          f"{'1st epoch s':>11}")


def format_row(r: dict) -> str:
    if "skipped" in r:
        return f"{r['nodes']:>8} {r['mode']:<9} skipped: {r['skipped']}"
    return (f"{r['nodes']:>8} {r['mode']:<9} {r['nodes_trained']:>8} {r['peak_rss_mb']:>12.0f} "
            f"{r['seconds_per_step']:>9.3f} {r['first_epoch_s']:>11.2f}")


def format_scale(result: ScaleResult) -> str:
    """The table again, whole, then each mode's growth exponents."""
    lines = [HEADER, *(format_row(r) for r in result.rows), ""]
    lines.append("growth with graph size (exponent k of metric ∝ nodesᵏ):")
    for mode, g in result.growth.items():
        lines.append(f"  {mode:<9} peak RSS k={g['peak_rss']:.2f}   s/step "
                     f"k={g['seconds_per_step']:.2f}")
    return "\n".join(lines)
