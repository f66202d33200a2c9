"""Synthetic TpuGraphs-format data with planted signal, for tests and benchmarks.

Graphs are random DAGs whose nodes carry realistic feature columns (docs/design.md §2).
Runtimes come from a hidden function of the graph and the configuration, so a model
that reads both can rank configurations and a random guess cannot:

- tile: every kernel has a preferred tile size, set by its largest tensor; runtime
  grows with the squared log-distance of each tile dimension from it.
- layout: every configurable node prefers its largest dimension minor-most; a
  node pays its tensor's log-size when it is laid out otherwise, and pays again for
  every edge to a configurable neighbour whose layout differs (a transpose).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from graphcost.formats.npz import LayoutGraph, TileGraph, write_graph

# opcode ids of docs/design.md §3 that the generator uses, with a relative cost weight
OPCODE_WEIGHTS = {63: 0.0, 2: 0.2, 59: 0.2, 13: 0.1, 75: 0.1, 98: 0.5, 70: 0.6,
                  34: 2.0, 26: 3.0, 41: 1.0, 24: 0.0, 57: 0.2, 37: 0.3}
_OPCODES = np.array(list(OPCODE_WEIGHTS))
_COMPUTE_OPS = np.array([2, 59, 13, 75, 98, 70, 34, 26, 41, 57, 37])
_CONFIGURABLE_OPS = (34, 26, 98, 75, 41)
_F32_COLUMN = 13  # one-hot columns 2..20: invalid, pred, s8, ..., f32 is the 12th
_BF16_COLUMN = 15


def _random_dag(rng: np.random.Generator, n: int) -> np.ndarray:
    """Edges [consumer, producer] with producer < consumer: nodes are in topological order."""
    rows = []
    for v in range(1, n):
        k = min(v, int(rng.integers(1, 4)))
        lo = max(0, v - 20)  # operands are mostly recent, as in real programs
        for u in rng.choice(np.arange(lo, v), size=min(k, v - lo), replace=False):
            rows.append((v, int(u)))
    return np.array(rows, dtype=np.int64).reshape(-1, 2)


def _node_features(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    feat = np.zeros((n, 140), np.float32)
    opcode = rng.choice(_COMPUTE_OPS, size=n)
    n_params = max(1, n // 10)
    opcode[:n_params] = 63  # parameters come first
    rank = rng.integers(1, 5, size=n)
    for i in range(n):
        r = int(rank[i])
        dims = 2 ** rng.integers(1, 9, size=r)
        feat[i, 21:21 + r] = dims
        feat[i, 27] = dims.sum()
        feat[i, 28] = dims.prod()
        feat[i, 134:134 + r] = np.arange(r)[::-1]  # default layout: last dim minor-most
        feat[i, _F32_COLUMN if rng.random() < 0.8 else _BF16_COLUMN] = 1.0
        if opcode[i] == 63:
            feat[i, 30] = i
    feat[n - 1, 0] = 1.0  # is_root
    return feat, opcode.astype(np.int64)


def _rank(feat_row: np.ndarray) -> int:
    nz = np.flatnonzero(feat_row[21:27])
    return int(nz[-1]) + 1 if nz.size else 0


def _log_size(feat: np.ndarray) -> np.ndarray:
    return np.log2(np.maximum(feat[:, 28], 1.0))


def make_tile_graph(rng: np.random.Generator, num_nodes: int = 30, num_configs: int = 50,
                    name: str = "tile", noise: float = 0.01) -> TileGraph:
    """A fused kernel with tile configurations; config 0 is the default."""
    edges = _random_dag(rng, num_nodes)
    feat, opcode = _node_features(rng, num_nodes)
    weights = np.array([OPCODE_WEIGHTS[int(o)] for o in opcode])
    work = float((weights * _log_size(feat)).sum()) + 1.0
    biggest = feat[np.argmax(feat[:, 28])]
    best = np.log2(np.maximum(biggest[21:23], 2.0)) - 1.0  # preferred log2 tile, 2 dims
    cfg = np.zeros((num_configs, 24), np.float32)
    log_tiles = rng.integers(0, 9, size=(num_configs, 2)).astype(np.float64)
    for block in range(3):  # kernel, output and input bounds share the tile
        base = 8 * block
        cfg[:, base:base + 2] = 2.0 ** log_tiles
        cfg[:, base + 6] = cfg[:, base:base + 2].sum(1)
        cfg[:, base + 7] = cfg[:, base:base + 2].prod(1)
    penalty = ((log_tiles - best) ** 2).sum(1)
    runtime = work * 1e4 * (1.0 + 0.1 * penalty) * rng.lognormal(0.0, noise, num_configs)
    runtime = np.maximum(runtime.astype(np.int64), 1)
    return TileGraph(name=name, node_feat=feat, node_opcode=opcode, edge_index=edges,
                     config_feat=cfg, config_runtime=runtime,
                     config_runtime_normalizers=np.full(num_configs, runtime[0], np.int64))


def make_layout_graph(rng: np.random.Generator, num_nodes: int = 200, num_configs: int = 100,
                      num_configurable: int | None = None, name: str = "layout",
                      noise: float = 0.01, default_fraction: float = 0.2) -> LayoutGraph:
    """A program with node-level layout configurations and planted layout costs."""
    edges = _random_dag(rng, num_nodes)
    feat, opcode = _node_features(rng, num_nodes)
    candidates = np.flatnonzero(np.isin(opcode, _CONFIGURABLE_OPS))
    if candidates.size == 0:
        candidates = np.arange(num_nodes)
    nc = num_configurable or max(1, min(candidates.size, num_nodes // 8))
    ids = np.sort(rng.choice(candidates, size=min(nc, candidates.size), replace=False))
    ncf = layout_configs(rng, feat[ids], num_configs, default_fraction)
    return LayoutGraph(name=name, node_feat=feat, node_opcode=opcode, edge_index=edges,
                       node_config_ids=ids, node_config_feat=ncf,
                       config_runtime=layout_runtime(feat, edges, ids, ncf, rng, noise),
                       node_splits=np.array([0], np.int64))


def layout_configs(rng: np.random.Generator, node_feat: np.ndarray, num_configs: int,
                   default_fraction: float = 0.2) -> np.ndarray:
    """(c, nc, 18): random minor-to-major orders per node, −1 padded; some all −1 (default)."""
    nc = node_feat.shape[0]
    out = np.full((num_configs, nc, 18), -1.0, np.float32)
    for j in range(nc):
        r = max(1, _rank(node_feat[j]))
        for c in range(num_configs):
            if rng.random() < default_fraction:
                continue
            perm = rng.permutation(r)
            out[c, j, 0:r] = perm  # output layout
            out[c, j, 6:6 + r] = perm  # input layout follows the output here
    return out


def layout_runtime(feat: np.ndarray, edges: np.ndarray, ids: np.ndarray, ncf: np.ndarray,
                   rng: np.random.Generator, noise: float = 0.01) -> np.ndarray:
    """The hidden runtime of every layout config (see the module docstring)."""
    size = _log_size(feat)
    base = 0.05 * float(size.sum()) + 1.0  # config-independent work, kept small
    cost = np.full(ncf.shape[0], base)
    minor = ncf[:, :, 0].copy()  # minor-most dim of the output layout, −1 = default
    for j, node in enumerate(ids):
        r = max(1, _rank(feat[node]))
        preferred = r - 1 - int(np.argmax(feat[node, 21:21 + r][::-1]))  # largest dim, last wins
        chosen = np.where(minor[:, j] < 0, r - 1, minor[:, j])  # default = last dim minor
        cost += size[node] * (chosen != preferred)
    position = {int(v): j for j, v in enumerate(ids)}
    for u, v in edges:
        if int(u) in position and int(v) in position:
            a, b = minor[:, position[int(u)]], minor[:, position[int(v)]]
            cost += 0.5 * np.minimum(size[u], size[v]) * (a != b)
    return cost * 1e3 * rng.lognormal(0.0, noise, ncf.shape[0])


def write_collection(root: str | Path, kind: str = "layout", source: str = "synth",
                     search: str = "random", splits: dict[str, int] | None = None,
                     seed: int = 0, compress: bool = True, **graph_kwargs) -> Path:
    """Write a synthetic collection in the TpuGraphs directory layout; return its folder.

    `root/npz/tile/<source>/<split>/` or `root/npz/layout/<source>/<search>/<split>/`.
    """
    splits = splits or {"train": 8, "valid": 4, "test": 4}
    rng = np.random.default_rng(seed)
    base = Path(root) / "npz" / kind / source
    if kind == "layout":
        base = base / search
    for split, count in splits.items():
        for i in range(count):
            name = f"{source}_{split}_{i:04d}"
            g = (make_tile_graph(rng, name=name, **graph_kwargs) if kind == "tile"
                 else make_layout_graph(rng, name=name, **graph_kwargs))
            write_graph(base / split / f"{name}.npz", g, compress=compress)
    return base


# --------------------------------------------------------------------------- large graphs


def make_large_layout_graph(rng: np.random.Generator, num_nodes: int = 200_000,
                            num_configs: int = 10_000, num_configurable: int | None = None,
                            name: str = "large", noise: float = 0.01,
                            default_fraction: float = 0.2,
                            config_file: str | Path | None = None,
                            chunk: int = 256) -> LayoutGraph:
    """`make_layout_graph`'s distribution, vectorised for graphs of 100k+ nodes.

    Not the same random stream, so not the same graphs for a seed. With `config_file`
    the (c, nc, 18) configs are generated `chunk` configs at a time into a memory map
    there, so a config array larger than memory can be made (and written with
    `write_graph(..., compress=False)`, which streams it).
    """
    n = num_nodes
    v = np.arange(n)
    offsets = np.argsort(rng.random((n, 20)), axis=1)[:, :3] + 1  # distinct, in 1..20
    k = rng.integers(1, 4, size=n)
    ok = (offsets <= v[:, None]) & (np.arange(3)[None, :] < k[:, None])
    edges = np.stack([np.broadcast_to(v[:, None], offsets.shape)[ok],
                      (v[:, None] - offsets)[ok]], axis=1).astype(np.int64)

    feat = np.zeros((n, 140), np.float32)
    opcode = rng.choice(_COMPUTE_OPS, size=n)
    opcode[:max(1, n // 10)] = 63
    rank = rng.integers(1, 5, size=n)
    cols = np.arange(4)[None, :]
    inside = cols < rank[:, None]
    dims = np.where(inside, 2.0 ** rng.integers(1, 9, size=(n, 4)), 0.0)
    feat[:, 21:25] = dims
    feat[:, 27] = dims.sum(1)
    feat[:, 28] = np.where(inside, dims, 1.0).prod(1)
    feat[:, 134:138] = np.where(inside, rank[:, None] - 1 - cols, 0)
    f32 = rng.random(n) < 0.8
    feat[v, np.where(f32, _F32_COLUMN, _BF16_COLUMN)] = 1.0
    feat[:, 30] = np.where(opcode == 63, v, 0)
    feat[n - 1, 0] = 1.0

    candidates = np.flatnonzero(np.isin(opcode, _CONFIGURABLE_OPS))
    nc = num_configurable or max(1, min(candidates.size, n // 8))
    ids = np.sort(rng.choice(candidates, size=min(nc, candidates.size), replace=False))
    nc = ids.size
    r = rank[ids]
    shape = (num_configs, nc, 18)
    ncf = (np.lib.format.open_memmap(config_file, "w+", np.float32, shape)
           if config_file is not None else np.empty(shape, np.float32))

    size = _log_size(feat)
    d = np.where(cols < r[:, None], dims[ids], -np.inf)
    preferred = 3 - np.argmax(d[:, ::-1], axis=1)
    position = np.full(n, -1)
    position[ids] = np.arange(nc)
    pairs = position[edges]
    pairs = pairs[(pairs >= 0).all(1)]
    pair_cost = 0.5 * np.minimum(size[ids[pairs[:, 0]]], size[ids[pairs[:, 1]]])
    cost = np.full(num_configs, 0.05 * float(size.sum()) + 1.0)
    for lo in range(0, num_configs, chunk):
        cc = min(chunk, num_configs - lo)
        keys = np.where(cols[None] < r[None, :, None], rng.random((cc, nc, 4)), 2.0)
        perm = np.argsort(keys, axis=-1).astype(np.float32)
        perm = np.where(cols[None] < r[None, :, None], perm, -1.0)
        perm[rng.random((cc, nc)) < default_fraction] = -1.0
        block = np.full((cc, nc, 18), -1.0, np.float32)
        block[:, :, 0:4] = perm
        block[:, :, 6:10] = perm
        ncf[lo:lo + cc] = block
        minor = perm[:, :, 0]
        chosen = np.where(minor < 0, r[None, :] - 1, minor)
        cost[lo:lo + cc] += (size[ids][None, :] * (chosen != preferred[None, :])).sum(1)
        cost[lo:lo + cc] += (pair_cost[None, :] *
                             (minor[:, pairs[:, 0]] != minor[:, pairs[:, 1]])).sum(1)
    if isinstance(ncf, np.memmap):
        ncf.flush()
    runtime = cost * 1e3 * rng.lognormal(0.0, noise, num_configs)
    return LayoutGraph(name=name, node_feat=feat, node_opcode=opcode.astype(np.int64),
                       edge_index=edges, node_config_ids=ids, node_config_feat=ncf,
                       config_runtime=runtime, node_splits=np.array([0], np.int64))
