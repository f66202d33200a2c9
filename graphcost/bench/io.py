"""`graphcost bench io`: the cost of lazy config reading and of scanning a collection.

Figures are wall seconds (median of repeats) and the peak resident memory the step
added (Linux VmHWM, reset before each step). The eager row loads the whole
`node_config_feat`, as `np.load` would, so the lazy rows have something to be
compared with in the same run. A deflated file is read through the read cache, in its
compact form and, for comparison, in the plain one (every config uncompressed); the
first read of each builds it, and inflating the member alone (what any reader of a
deflated member pays to reach its last config) is timed beside them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from graphcost.bench import RowsResult, measure_call
from graphcost.data.inspect import summarize, validate_paths
from graphcost.data.synthetic import make_large_layout_graph, make_layout_graph
from graphcost.formats import LayoutGraph, read_graph, write_graph


def big_layout_graph(num_configs: int, num_configurable: int, seed: int = 0) -> LayoutGraph:
    """A graph of a few hundred nodes with a huge `node_config_feat` of layouts as the
    published files hold them (each role a permutation of its tensor's dimensions, or
    unset), built vectorised."""
    return make_large_layout_graph(np.random.default_rng(seed),
                                   max(200, 8 * num_configurable), num_configs,
                                   num_configurable, name="big")


def inflate(path: Path, key: str = "node_config_feat") -> int:
    """Stream one deflated member through zlib and drop it: the least a first read of
    its last config costs. Returns the bytes inflated."""
    with zipfile.ZipFile(path) as zf, zf.open(key + ".npy") as f:
        return sum(len(b) for b in iter(lambda: f.read(16 << 20), b""))


class IoResult(RowsResult):
    """`bench io`'s figures: one row per measured step (step, runs, seconds, peak_mib,
    private_mib)."""


def bench_io(num_configs: int = 100_000, num_configurable: int = 64, reads: int = 64,
             scan_files: int = 200, repeats: int = 5,
             log: Callable[[str], None] = print) -> IoResult:
    """Run the benchmark in a temporary folder; one row per measured step."""
    rows: list[dict] = []
    rng = np.random.default_rng(1)
    saved_cache = os.environ.get("GRAPHCOST_CACHE")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["GRAPHCOST_CACHE"] = str(Path(tmp) / "cache")  # start cold, clean up after
        saved_form = os.environ.get("GRAPHCOST_COMPACT_CACHE")
        try:
            _run(tmp, rows, rng, num_configs, num_configurable, reads, scan_files, repeats, log)
        finally:
            for var, saved in (("GRAPHCOST_CACHE", saved_cache),
                               ("GRAPHCOST_COMPACT_CACHE", saved_form)):
                if saved is None:
                    os.environ.pop(var, None)
                else:
                    os.environ[var] = saved
    return IoResult(rows)


def _run(tmp: str, rows: list[dict], rng: np.random.Generator, num_configs: int,
         num_configurable: int, reads: int, scan_files: int, repeats: int,
         log: Callable[[str], None]) -> None:
    g = big_layout_graph(num_configs, num_configurable)
    nbytes = g.node_config_feat.nbytes
    log(f"layout file: {num_configs} configs x {g.node_config_ids.size} configurable "
        f"nodes x 18 = {nbytes / 2**20:.0f} MiB of node_config_feat")
    paths = {}
    for name in ("stored", "deflated"):
        t = time.perf_counter()
        paths[name] = write_graph(Path(tmp) / f"{name}.npz", g, compress=name == "deflated")
        log(f"wrote {name} file in {time.perf_counter() - t:.1f} s "
            f"({paths[name].stat().st_size / 2**20:.0f} MiB)")
    del g

    def read_some(path: Path) -> np.ndarray:
        graph = read_graph(path, lazy=True)
        return graph.configs(rng.choice(graph.num_configs, size=reads, replace=False))

    rows.append(_row(f"open stored + read {reads} configs",
                     [measure_call(lambda: read_some(paths["stored"]))
                      for _ in range(repeats)]))
    first: dict[str, list] = {"compact": [], "plain": [], "inflate": []}
    cache = Path(os.environ["GRAPHCOST_CACHE"])
    for _ in range(repeats):  # the three first reads interleaved, each from a cold cache
        for form in first:
            shutil.rmtree(cache, ignore_errors=True)
            os.environ["GRAPHCOST_COMPACT_CACHE"] = "0" if form == "plain" else "1"
            call = (lambda: inflate(paths["deflated"])) if form == "inflate" else \
                (lambda: read_some(paths["deflated"]))
            first[form].append(measure_call(call))
    rows.append(_row("inflate the deflated configs alone", first["inflate"]))
    for form in ("compact", "plain"):
        os.environ["GRAPHCOST_COMPACT_CACHE"] = "0" if form == "plain" else "1"
        rows.append(_row(f"open deflated + read {reads}, first: builds the {form} cache",
                         first[form]))
        read_some(paths["deflated"])  # the cache of this form
        rows.append(_row(f"open deflated + read {reads} configs, {form} cache",
                         [measure_call(lambda: read_some(paths["deflated"]))
                          for _ in range(repeats)]))
    os.environ.pop("GRAPHCOST_COMPACT_CACHE")
    rows.append(_row("eager: load deflated file whole",
                     [measure_call(lambda: read_graph(paths["deflated"], lazy=False))]))

    scan = Path(tmp) / "npz" / "layout" / "bench" / "random" / "train"
    for i in range(scan_files):
        write_graph(scan / f"g{i:04d}.npz",
                    make_layout_graph(rng, num_nodes=300, num_configs=200, name=f"g{i}"))
    rows.append(_row(f"info: scan {scan_files} files (headers)",
                     [measure_call(lambda: summarize(scan.parent))]))
    rows.append(_row(f"validate: {scan_files} files (full read)",
                     [measure_call(lambda: validate_paths([scan]))]))


def _row(step: str, runs: list[tuple[float, float, float]]) -> dict:
    """Median seconds over the runs, worst memory figures."""
    return dict(step=step, runs=len(runs), seconds=float(np.median([r[0] for r in runs])),
                peak_mib=max(r[1] for r in runs), private_mib=max(r[2] for r in runs))
