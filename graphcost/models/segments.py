"""Graph segments: encode a huge layout graph piece by piece (GST, DESIGN §6).

A layout graph's nodes are in topological order, so a segment is a contiguous range of
about `size` nodes, cut at a computation boundary (`node_splits`) when one is near. A
segment is itself a `GraphTensors`: the induced subgraph (edges that cross a cut are
dropped), its configurable nodes, and a config reader that hands it only their columns
(the graph's configs are read from disk once per id list, not once per segment).

Networks that support segments offer `encode_segment(batch, share)`: the (B, C, d)
embedding of a segment weighted by `share`, its fraction of the graph's nodes, so that
the graph embedding is the plain SUM of its segments' embeddings (exact for mean and
sum pooling; max pooling becomes a weighted mean of segment maxima), and
`score_embedding(h, mask)`: the head from a graph embedding to (B, C) scores.
Summation is what lets GST replace the segments it does not back-propagate through by
historical embeddings, and what lets prediction run in memory bounded by one segment.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from graphcost.models.base import GraphTensors, collate


def segment_bounds(num_nodes: int, node_splits: np.ndarray, size: int) -> np.ndarray:
    """(S + 1,) increasing node ids [0, …, num_nodes]: segment s is [b[s], b[s+1]).

    Cuts are evenly spaced (so segments are within a factor ~1.5 of `size`) and moved to
    the nearest computation start within size/4, where operands rarely cross.
    """
    if size <= 0 or num_nodes <= size:
        return np.array([0, num_nodes], dtype=np.int64)
    count = max(1, int(round(num_nodes / size)))
    cuts = np.linspace(0, num_nodes, count + 1).round().astype(np.int64)[1:-1]
    splits = np.unique(np.asarray(node_splits, dtype=np.int64).reshape(-1))
    splits = splits[(splits > 0) & (splits < num_nodes)]
    if splits.size:
        right = np.clip(np.searchsorted(splits, cuts), 0, splits.size - 1)
        left = np.clip(right - 1, 0, splits.size - 1)
        near = np.where(np.abs(splits[left] - cuts) <= np.abs(splits[right] - cuts),
                        splits[left], splits[right])
        cuts = np.where(np.abs(near - cuts) <= size // 4, near, cuts)
    return np.unique(np.concatenate([[0], cuts, [num_nodes]])).astype(np.int64)


class ConfigReader:
    """Reads configs of one layout graph once per id list; segments take their columns."""

    def __init__(self, graph) -> None:
        self.graph = graph
        self._ids: np.ndarray | None = None
        self._rows: np.ndarray | None = None

    def rows(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        if self._ids is None or not np.array_equal(ids, self._ids):
            self._ids, self._rows = ids.copy(), self.graph.configs(ids)
        assert self._rows is not None
        return self._rows


@dataclass
class SegmentConfigs:
    """What a segment's `GraphTensors.graph` must answer: its columns of the configs."""

    reader: ConfigReader
    cols: np.ndarray  # positions of the segment's configurable nodes in node_config_ids

    def configs(self, ids: np.ndarray) -> np.ndarray:
        return self.reader.rows(ids)[:, self.cols]


@dataclass
class Segments:
    """A graph cut into segments; `share[s]` is segment s's fraction of the graph's nodes."""

    graph: GraphTensors
    parts: list[GraphTensors]
    share: np.ndarray  # (S,) float32, sums to 1
    bounds: np.ndarray  # (S + 1,)

    def __len__(self) -> int:
        return len(self.parts)

    @property
    def largest(self) -> GraphTensors:
        return max(self.parts, key=lambda p: p.x.shape[0])

    def encode(self, net, ids: np.ndarray, segments: list[int] | None = None) -> Tensor:
        """(1, C, d): the sum of the embeddings of `segments` (default all) for configs `ids`."""
        dev = net.device
        total = None
        for s in range(len(self.parts)) if segments is None else segments:
            b = collate([(self.parts[s], ids)]).to(dev)
            share = None if len(self.parts) == 1 else torch.tensor(self.share[s:s + 1],
                                                                    device=dev)
            h = net.encode_segment(b, share)
            total = h if total is None else total + h
        assert total is not None
        return total


def split_segments(g: GraphTensors, size: int) -> Segments:
    """Cut a layout graph into segments of about `size` nodes (size ≤ 0: one segment, g)."""
    n = int(g.x.shape[0])
    if g.kind != "layout" or size <= 0 or n <= size:
        return Segments(g, [g], np.ones(1, np.float32), np.array([0, n], dtype=np.int64))
    bounds = segment_bounds(n, g.graph.node_splits, size)
    seg_of = np.searchsorted(bounds, np.arange(n), side="right") - 1
    e = g.edge_index.numpy()
    es = seg_of[e[0]]
    inside = es == seg_of[e[1]]
    order = np.argsort(es[inside], kind="stable")
    e, es = e[:, inside][:, order], es[inside][order]
    estart = np.searchsorted(es, np.arange(len(bounds)))
    cn = g.config_nodes.numpy()
    cseg = seg_of[cn]
    reader = ConfigReader(g.graph)
    parts = []
    for s in range(len(bounds) - 1):
        lo, hi = int(bounds[s]), int(bounds[s + 1])
        cols = np.flatnonzero(cseg == s)
        parts.append(GraphTensors(
            name=f"{g.name}#{s}", kind=g.kind, x=g.x[lo:hi], opcode=g.opcode[lo:hi],
            edge_index=torch.from_numpy(np.ascontiguousarray(e[:, estart[s]:estart[s + 1]] - lo)),
            config_nodes=torch.from_numpy(cn[cols] - lo), runtime=g.runtime,
            graph=SegmentConfigs(reader, cols),  # type: ignore[arg-type]
            config_dims=g.config_dims[cols] if g.config_dims is not None else None,
            config_default=g.config_default[cols] if g.config_default is not None else None))
    share = (np.diff(bounds) / n).astype(np.float32)
    return Segments(g, parts, share, bounds)
