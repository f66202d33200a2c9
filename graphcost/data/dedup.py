"""De-duplication of identical configuration rows (DESIGN §1: they occur, with
slightly different runtimes). Keeps the fastest of each group."""

from __future__ import annotations

import hashlib

import numpy as np

from graphcost.formats import Graph, TileGraph

_CHUNK = 4096


def _row_digests(graph: Graph) -> list[bytes]:
    if isinstance(graph, TileGraph):
        rows = np.ascontiguousarray(graph.config_feat, dtype=np.float32)
        return [hashlib.blake2b(r.tobytes(), digest_size=16).digest() for r in rows]
    digests = []
    for start in range(0, graph.num_configs, _CHUNK):  # a memory map stays on disk
        block = np.ascontiguousarray(graph.node_config_feat[start:start + _CHUNK], np.float32)
        digests += [hashlib.blake2b(r.tobytes(), digest_size=16).digest() for r in block]
    return digests


def dedup_configs(graph: Graph) -> tuple[np.ndarray, int]:
    """Sorted ids of the configs to keep (the fastest of each identical group) and how
    many were removed."""
    runtime = np.asarray(graph.target, dtype=np.float64)
    best: dict[bytes, int] = {}
    for i, d in enumerate(_row_digests(graph)):
        j = best.get(d)
        if j is None or runtime[i] < runtime[j]:
            best[d] = i
    keep = np.array(sorted(best.values()), dtype=np.int64)
    return keep, graph.num_configs - keep.size
