"""Graph segments: encode a huge layout graph piece by piece (GST, docs/design.md §6).

A layout graph's nodes are in topological order, so a segment is a contiguous range of
about `size` nodes, cut at a computation boundary (`node_splits`) when one is near. A
segment is itself a `GraphTensors`: the subgraph induced on its nodes and its halo,
their configurable nodes, and a config reader that hands it only their columns (the
graph's configs are read from disk once per id list, not once per segment).

The halo is the nodes outside the segment within `halo` hops, there as context.
Message passing runs over segment and halo alike, pooling over the segment's own nodes
only (the halo's nodes get graph id B in a batch of B, see `models/base.py`). With as
many hops as the network's receptive field (`RankingNet.segment_halo`) every own node
ends in the state it has in the whole graph; the halo is capped at `size` nodes, so a
hub cannot pull the whole graph into every segment (past the cap, that is lost).

Networks that support segments offer `encode_segment(batch, share)`: the (B, C, d)
embedding of a segment weighted by `share` (B, 2), its fraction of the graph's nodes
and of its configurable nodes, so that the graph embedding is the plain SUM of its
segments' embeddings (exact for mean and sum pooling, given the full halo; max pooling
becomes a weighted mean of segment maxima), and `score_embedding(h, mask)`: the head
from a graph embedding to (B, C) scores. Summation is what lets GST replace the
segments it does not back-propagate through by historical embeddings, and what lets
prediction run in memory bounded by one segment.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from graphcost.models.base import GraphTensors, collate

#: nodes per segment when a model trains with GST and its `segment_size` setting is 0
GST_SEGMENT_SIZE = 1000


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
    """A graph cut into segments; `share[s]` is segment s's fraction of the graph's nodes,
    `config_share[s]` its fraction of the configurable nodes."""

    graph: GraphTensors
    parts: list[GraphTensors]
    share: np.ndarray  # (S,) float32, sums to 1
    bounds: np.ndarray  # (S + 1,)
    config_share: np.ndarray  # (S,) float32, sums to 1 (0 without configurable nodes)

    def weight(self, s: int) -> Tensor:
        """(2,) what `encode_segment` weights segment s by: [node share, config share]."""
        return torch.tensor([float(self.share[s]), float(self.config_share[s])])

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
            share = None if len(self.parts) == 1 else self.weight(s)[None].to(dev)
            h = net.encode_segment(b, share)
            total = h if total is None else total + h
        assert total is not None
        return total


def csr_rows(indptr: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Positions of the CSR entries of `nodes`, concatenated (vectorised ranges)."""
    lens = indptr[nodes + 1] - indptr[nodes]
    first = np.cumsum(lens) - lens
    return np.repeat(indptr[nodes] - first, lens) + np.arange(int(lens.sum()))


def halo_nodes(indptr: np.ndarray, nbrs: np.ndarray, lo: int, hi: int, hops: int,
               cap: int) -> np.ndarray:
    """Sorted nodes outside [lo, hi) within `hops` hops of it (CSR adjacency), nearest
    first until `cap` nodes."""
    seen = np.zeros(indptr.size - 1, dtype=bool)
    seen[lo:hi] = True
    frontier, found, count = np.arange(lo, hi), [], 0
    for _ in range(hops):
        if frontier.size == 0 or count >= cap:
            break
        reach = nbrs[csr_rows(indptr, frontier)]
        frontier = np.unique(reach[~seen[reach]])[:cap - count]
        seen[frontier] = True
        found.append(frontier)
        count += frontier.size
    return np.sort(np.concatenate(found)) if found else np.zeros(0, np.int64)


def is_segmented(g: GraphTensors, size: int) -> bool:
    """Whether `split_segments(g, size)` cuts g into more than one segment."""
    return g.kind == "layout" and 0 < size < int(g.x.shape[0])


def split_segments(g: GraphTensors, size: int, halo: int = 0) -> Segments:
    """Cut a layout graph into segments of about `size` nodes, each with the nodes within
    `halo` hops around it as context (size ≤ 0: one segment, g)."""
    n = int(g.x.shape[0])
    one = np.ones(1, np.float32)
    if not is_segmented(g, size):
        return Segments(g, [g], one, np.array([0, n], dtype=np.int64), one)
    bounds = segment_bounds(n, g.graph.node_splits, size)
    src, dst = g.edge_index.numpy()  # both directions
    order = np.argsort(src, kind="stable")
    src, nbrs = src[order], dst[order]
    forward = g.edge_forward.numpy()[order] if g.edge_forward is not None else None
    indptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))])
    cn = g.config_nodes.numpy()
    local = np.full(n, -1, dtype=np.int64)
    reader = ConfigReader(g.graph)
    parts, config_count = [], []
    for s in range(len(bounds) - 1):
        lo, hi = int(bounds[s]), int(bounds[s + 1])
        nodes = np.concatenate([np.arange(lo, hi), halo_nodes(indptr, nbrs, lo, hi, halo,
                                                              size)])
        local[nodes] = np.arange(nodes.size)
        rows = csr_rows(indptr, nodes)
        u, v = src[rows], nbrs[rows]
        keep = local[v] >= 0
        edges = np.stack([local[u[keep]], local[v[keep]]])
        own = np.flatnonzero((cn >= lo) & (cn < hi))
        ctx = np.flatnonzero(((cn < lo) | (cn >= hi)) & (local[cn] >= 0))
        cols = np.concatenate([own, ctx])
        parts.append(GraphTensors(
            name=f"{g.name}#{s}", kind=g.kind, x=g.x[nodes], opcode=g.opcode[nodes],
            edge_index=torch.from_numpy(np.ascontiguousarray(edges)),
            edge_forward=None if forward is None else torch.from_numpy(forward[rows][keep]),
            config_nodes=torch.from_numpy(local[cn[cols]]), runtime=g.runtime,
            graph=SegmentConfigs(reader, cols),  # type: ignore[arg-type]
            config_dims=g.config_dims[cols] if g.config_dims is not None else None,
            config_own=g.config_own[cols] if g.config_own is not None else None,
            config_bytes=g.config_bytes[cols] if g.config_bytes is not None else None,
            layout_config=g.layout_config,
            own_nodes=hi - lo, own_config_nodes=int(own.size)))
        config_count.append(own.size)
        local[nodes] = -1
    share = (np.diff(bounds) / n).astype(np.float32)
    count = np.asarray(config_count, np.float32)
    config_share = count / count.sum() if count.sum() else np.zeros_like(count)
    return Segments(g, parts, share, bounds, config_share)
