"""De-duplication of identical configuration rows (docs/design.md §1: they occur, with
slightly different runtimes: repeated measurements of one configuration).

A group of identical rows is kept as one row (its first) carrying the group's median
runtime: the central value of the repeated measurements. Keeping the minimum, as
this module once did, biased every duplicated config fast by the noise's lower tail.

A group whose runtimes differ by more than `CONTRADICTION_RATIO` is not noise: one
config measured that differently says the timing is broken (`duplicates`, reported by
`graphcost validate` and `graphcost evaluate`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graphcost.formats import Graph, TileGraph
from graphcost.formats.compact import CompactConfigs
from graphcost.formats.records import row_blocks

#: identical configs whose runtimes (tile: normalized runtimes) differ by more than this
#: factor, max/min, contradict each other: repeated measurements of one config differ
#: slightly (docs/design.md §1), and the median graph of the bundled sample spans
#: 1.2–3.2× over all its configs (docs/figures.md)
CONTRADICTION_RATIO = 2.0


def _row_digests(graph: Graph, ids: np.ndarray | None = None) -> list[bytes]:
    feat = graph.config_feat if isinstance(graph, TileGraph) else graph.node_config_feat
    if isinstance(feat, CompactConfigs):  # equal rows, equal row numbers: 2 bytes, not 72
        feat = feat.codes
    if ids is not None:
        feat = feat[ids]
    digests = []
    for _, block in row_blocks(feat):  # a memory map stays on disk
        digests += [hashlib.blake2b(r.tobytes(), digest_size=16).digest() for r in block]
    return digests


def _groups(graph: Graph, ids: np.ndarray | None = None) -> list[list[int]]:
    """Positions (in `ids`, or config ids) of identical rows, a group per distinct row."""
    groups: dict[bytes, list[int]] = {}
    for i, d in enumerate(_row_digests(graph, ids)):
        groups.setdefault(d, []).append(i)
    return list(groups.values())


@dataclass
class Duplicates:
    """A graph's groups of identical configs and how far apart their runtimes lie."""

    groups: int  # groups of two or more identical configs
    contradicting: int  # those whose runtimes differ by more than CONTRADICTION_RATIO
    worst: float  # the largest max/min runtime ratio of a group (1.0: no duplicates)

    def warning(self, path: str | Path) -> str:
        return (f"{path}: {self.contradicting} of its {self.groups} groups of identical "
                f"configs have runtimes more than {CONTRADICTION_RATIO:g}× apart (up to "
                f"{self.worst:.3g}×): one config measured that differently is not noise")


def duplicates(graph: Graph, ids: np.ndarray | None = None) -> Duplicates:
    """The duplicate groups among a graph's configs (those of `ids`, when given) and
    how many contradict (`CONTRADICTION_RATIO`); runtimes must be real (positive)."""
    target = np.asarray(graph.target, dtype=np.float64)
    if ids is not None:
        target = target[ids]
    ratios = [target[g].max() / target[g].min() for g in _groups(graph, ids) if len(g) > 1]
    return Duplicates(len(ratios), sum(r > CONTRADICTION_RATIO for r in ratios),
                      max(ratios, default=1.0))


def dedup_configs(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """Sorted ids of the configs to keep (the first of each group of identical rows) and
    the graph's target (runtime; tile: normalized runtime) as a new float64 array in
    which each kept id holds its group's median. Removed: `num_configs - len(ids)`."""
    target = np.array(graph.target, dtype=np.float64)
    groups = _groups(graph)
    keep = np.array(sorted(g[0] for g in groups), dtype=np.int64)
    for members in groups:
        if len(members) > 1:
            target[members[0]] = np.median(target[members])
    return keep, target
