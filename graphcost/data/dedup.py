"""De-duplication of identical configuration rows (docs/design.md §1: they occur, with
slightly different runtimes: repeated measurements of one configuration).

A group of identical rows is kept as one row (its first) carrying the group's median
runtime: the central value of the repeated measurements. Keeping the minimum, as
this module once did, biased every duplicated config fast by the noise's lower tail.
"""

from __future__ import annotations

import hashlib

import numpy as np

from graphcost.formats import Graph, TileGraph
from graphcost.formats.records import row_blocks


def _row_digests(graph: Graph) -> list[bytes]:
    if isinstance(graph, TileGraph):
        rows = np.ascontiguousarray(graph.config_feat, dtype=np.float32)
        return [hashlib.blake2b(r.tobytes(), digest_size=16).digest() for r in rows]
    digests = []
    for _, block in row_blocks(graph.node_config_feat):  # a memory map stays on disk
        digests += [hashlib.blake2b(r.tobytes(), digest_size=16).digest() for r in block]
    return digests


def dedup_configs(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """Sorted ids of the configs to keep (the first of each group of identical rows) and
    the graph's target (runtime; tile: normalized runtime) as a new float64 array in
    which each kept id holds its group's median. Removed: `num_configs - len(ids)`."""
    target = np.array(graph.target, dtype=np.float64)
    groups: dict[bytes, list[int]] = {}
    for i, d in enumerate(_row_digests(graph)):
        groups.setdefault(d, []).append(i)
    keep = np.array(sorted(g[0] for g in groups.values()), dtype=np.int64)
    for members in groups.values():
        if len(members) > 1:
            target[members[0]] = np.median(target[members])
    return keep, target
