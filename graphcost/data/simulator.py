"""A hidden cost simulator for layout configurations, to test that models learn.

`synthetic.layout_runtime` plants a cost that is close to one feature the ranker
computes by hand (the size of the minor-most dimension), so a ranker beating a baseline
on it shows little. The simulator here stands apart from every model's features: it
prices a configuration the way a TPU-like memory system would, from graph structure,
opcodes, tensor shapes and layouts, and a model must learn the combination:

- tiling waste: tensors are stored in (8, 128) tiles over their two minor-most
  dimensions, so a layout whose minor dims are small pays for the padding: log2 of the
  padded over the real size, times the tensor's log-size, times an opcode weight
  (convolutions and dots stream their operands more than elementwise ops);
- relayout copies: an edge between a node in its default layout and one that is not
  needs a copy of the producer, paid on every such edge (so fan-out multiplies it, and
  non-configurable neighbours, always in their default layout, take part).

The costs are in log-size units like the planted ones; noise is multiplicative.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from graphcost.data.synthetic import make_layout_graph
from graphcost.formats import LayoutGraph

#: how strongly an opcode's runtime depends on its operands' layout (docs/design.md §3 ids)
LAYOUT_SENSITIVITY = {26: 3.0, 34: 2.5, 98: 0.5, 75: 0.3, 41: 1.5}
TILE = (128, 8)  # minor-most, second minor-most


def _rank(feat: np.ndarray) -> np.ndarray:
    nonzero = feat[:, 21:27] != 0
    return np.where(nonzero.any(1), 6 - np.argmax(nonzero[:, ::-1], axis=1), 1)


def _effective(ncf_minor: np.ndarray, default: np.ndarray) -> np.ndarray:
    """(C, nc, 2) the two minor-most dims each config gives (−1 entries: the default)."""
    return np.where(ncf_minor < 0, default[None], ncf_minor).astype(np.int64)


def simulated_runtime(g: LayoutGraph, rng: np.random.Generator,
                      noise: float = 0.01) -> np.ndarray:
    """The simulator's runtime of every config of `g` (see the module docstring)."""
    feat, ids = g.node_feat, g.node_config_ids
    size = np.log2(np.maximum(feat[:, 28], 1.0))
    rank = _rank(feat)
    dims = np.maximum(feat[ids, 21:27], 1.0)  # (nc, 6)
    default = feat[ids, 134:136].astype(np.int64)  # the graph's two minor-most dims
    default[rank[ids] < 2, 1] = -1
    minor = _effective(np.asarray(g.node_config_feat[:, :, 0:2]), default)  # (C, nc, 2)
    c = minor.shape[0]
    rows = np.arange(len(ids))[None, :]
    m = np.where(minor[..., 0] >= 0, dims[rows, np.maximum(minor[..., 0], 0)], 1.0)
    s = np.where(minor[..., 1] >= 0, dims[rows, np.maximum(minor[..., 1], 0)], 1.0)
    waste = (np.log2(np.ceil(m / TILE[0]) * TILE[0] / m)
             + np.log2(np.ceil(s / TILE[1]) * TILE[1] / s))  # (C, nc)
    weight = np.array([LAYOUT_SENSITIVITY.get(int(o), 1.0) for o in g.node_opcode[ids]])
    cost = 1.0 + 0.05 * float(size.sum()) + (waste * weight * size[ids] / 8).sum(1)

    moved = np.zeros((c, g.num_nodes), bool)  # a node not in its default layout
    moved[:, ids] = (minor != default[None]).any(-1)
    u, v = g.edge_index[:, 0], g.edge_index[:, 1]  # consumer, producer
    touches = np.isin(u, ids) | np.isin(v, ids)
    u, v = u[touches], v[touches]
    cost += (0.4 * size[v][None, :] * (moved[:, u] != moved[:, v])).sum(1)
    return cost * 1e3 * rng.lognormal(0.0, noise, c)


def make_simulated_layout_graph(rng: np.random.Generator, num_nodes: int = 200,
                                num_configs: int = 100, name: str = "sim",
                                noise: float = 0.01) -> LayoutGraph:
    """`make_layout_graph`'s programs and configs, with the simulator's runtimes."""
    g = make_layout_graph(rng, num_nodes=num_nodes, num_configs=num_configs, name=name,
                          noise=0.0)
    return dataclasses.replace(g, config_runtime=simulated_runtime(g, rng, noise))
