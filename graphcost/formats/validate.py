"""Consistency checks for graphs read from or written to `.npz` (docs/design.md §1).

The first problem found is raised as a `GraphFileError`; `deep=True` also scans the
big arrays for NaNs, chunk by chunk so a memory-mapped layout file stays on disk.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphcost.formats.compact import CompactConfigs
from graphcost.formats.errors import GraphFileError
from graphcost.formats.records import (
    NUM_LAYOUT_CONFIG_FEATURES,
    NUM_NODE_FEATURES,
    NUM_TILE_CONFIG_FEATURES,
    Graph,
    LayoutGraph,
    TileGraph,
    row_blocks,
)

MAX_OPCODE = 255  # ids are stored as uint8 in the wild; docs/design.md §3 uses 0..120


def validate_graph(g: Graph, path: str | Path, deep: bool = False,
                   runtimes: bool = True) -> None:
    """Raise `GraphFileError` on the first inconsistency of `g` (read from `path`);
    `runtimes=False` reads a file to rank, not to score: its runtimes may be placeholders
    (`_placeholder`), but real runtimes are checked as in any file."""

    def fail(key: str, expected: str) -> None:
        raise GraphFileError(path, key, expected)

    n = g.node_feat.shape[0] if g.node_feat.ndim == 2 else -1
    if g.node_feat.ndim != 2 or g.node_feat.shape[1] != NUM_NODE_FEATURES:
        fail("node_feat", f"shape (n, {NUM_NODE_FEATURES}), got {g.node_feat.shape}")
    if n == 0:
        fail("node_feat", "at least one node, got 0")
    if g.node_opcode.shape != (n,):
        fail("node_opcode", f"shape ({n},) to match node_feat's {n} nodes, "
             f"got {g.node_opcode.shape}")
    if g.node_opcode.min() < 0 or g.node_opcode.max() > MAX_OPCODE:
        fail("node_opcode", f"opcode ids in 0..{MAX_OPCODE}, got "
             f"{g.node_opcode.min()}..{g.node_opcode.max()}")
    if g.edge_index.ndim != 2 or g.edge_index.shape[1] != 2:
        fail("edge_index", f"shape (m, 2), got {g.edge_index.shape}")
    if g.edge_index.size and (g.edge_index.min() < 0 or g.edge_index.max() >= n):
        bad = g.edge_index[(g.edge_index < 0).any(1) | (g.edge_index >= n).any(1)][0]
        fail("edge_index", f"node ids in 0..{n - 1} (the graph has {n} nodes), "
             f"got edge {bad.tolist()}")
    if isinstance(g, TileGraph):
        _validate_tile(g, fail, runtimes)
    else:
        _validate_layout(g, n, fail, runtimes)
    if deep:
        _finite(g.node_feat, "node_feat", fail)
        _finite(g.config_feat if isinstance(g, TileGraph) else g.node_config_feat,
                "config_feat" if isinstance(g, TileGraph) else "node_config_feat", fail)


def _placeholder(values: np.ndarray) -> bool:
    """Runtimes that measure nothing, as a file to rank may hold: absent (read as NaN)
    or one value for every config (the zeros of the published test split)."""
    return bool(np.all(np.isnan(values)) or np.all(values == values.flat[0]))


def _validate_runtime(rt: np.ndarray, c: int, key: str, fail, runtimes: bool) -> None:
    """One check of runtimes for every reader (validate, evaluate, train, submit): those
    of a file to score, and those of a file to rank unless they are placeholders; a
    NaN among real runtimes is a broken file wherever it lies."""
    if rt.shape != (c,):
        fail(key, f"shape ({c},), one runtime per config, got {rt.shape}")
    if not runtimes and _placeholder(rt):
        return
    if not np.all(np.isfinite(rt)):
        bad = int(np.flatnonzero(~np.isfinite(rt))[0])
        fail(key, f"finite runtimes, got {rt[bad]} at config {bad}")
    if np.any(rt <= 0):
        fail(key, f"positive runtimes, got {rt[rt <= 0][0]} at config "
             f"{int(np.flatnonzero(rt <= 0)[0])}")


def _validate_tile(g: TileGraph, fail, runtimes: bool) -> None:
    cf = g.config_feat
    if cf.ndim != 2 or cf.shape[1] != NUM_TILE_CONFIG_FEATURES:
        fail("config_feat", f"shape (c, {NUM_TILE_CONFIG_FEATURES}), got {cf.shape}")
    c = cf.shape[0]
    if c == 0:
        fail("config_feat", "at least one configuration, got 0")
    _validate_runtime(g.config_runtime, c, "config_runtime", fail, runtimes)
    norm = g.config_runtime_normalizers
    if norm.shape != (c,):
        fail("config_runtime_normalizers", f"shape ({c},), got {norm.shape}")
    if (runtimes or not _placeholder(norm)) and not np.all(norm > 0):  # NaN fails too
        bad = int(np.flatnonzero(~(norm > 0))[0])
        fail("config_runtime_normalizers", "positive normalizers (the default config's "
             f"runtime), got {norm[bad]} at config {bad}")


def _validate_layout(g: LayoutGraph, n: int, fail, runtimes: bool) -> None:
    ids = g.node_config_ids
    if ids.ndim != 1:
        fail("node_config_ids", f"a 1-d array, got shape {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        fail("node_config_ids", f"node ids in 0..{n - 1}, got {ids.min()}..{ids.max()}")
    ncf = g.node_config_feat
    nc = ids.shape[0]
    if ncf.ndim != 3 or ncf.shape[1:] != (nc, NUM_LAYOUT_CONFIG_FEATURES):
        fail("node_config_feat", f"shape (c, {nc}, {NUM_LAYOUT_CONFIG_FEATURES}) for {nc} "
             f"configurable nodes, got {ncf.shape}")
    c = ncf.shape[0]
    if c == 0:
        fail("node_config_feat", "at least one configuration, got 0")
    _validate_runtime(g.config_runtime, c, "config_runtime", fail, runtimes)
    sp = g.node_splits
    if sp.size and (sp.min() < 0 or sp.max() > n):
        fail("node_splits", f"node ids in 0..{n}, got {sp.min()}..{sp.max()}")


def _finite(a: np.ndarray, key: str, fail) -> None:
    if isinstance(a, CompactConfigs):  # every value is one of its rows': those suffice
        a = a.rows
    for start, block in row_blocks(a):
        if not np.all(np.isfinite(block)):
            row = start + int(np.flatnonzero(~np.isfinite(block).reshape(len(block), -1).all(1))[0])
            fail(key, f"finite values, got NaN/inf in row {row}")
