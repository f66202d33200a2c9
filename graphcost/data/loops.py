"""While loops made visible to a layout model.

A graph holds every computation of the module, but a while loop's body is joined to
the rest only at its root: the loop's initial tuple flows into the body's parameter,
and from there through get-tuple-element to the instructions that do the work, with no
edge saying so. Pruned to two hops around the configurable nodes, the body is cut away;
a parameter whose layout sets the cost of a dot run on every iteration looks like one
read once. docs/results.md, "Source by source", found the learned correction inverting
the rule on exactly these programs (scan-based LSTMs and GRUs, solver loops).

`with_loops` adds what is missing, from the stored graph alone:

- loop edges `[read, element]`: each get-tuple-element of a loop computation's
  parameter is joined to the element of the loop's initial tuple it reads. The tuple
  index is not stored, so an element is matched by its shape (dimensions and element
  type, columns 2–28); a read whose shape several elements share is joined to all of
  them.
- loop depth: how many while loops each node runs inside (body or condition, through
  any computation they call), so the model can tell work done once from work done on
  every iteration. The trip count is not stored either; depth is what the graph says.

Computations are found from `node_splits` (each computation's first node, as
graphcost's converter writes them) and roots from feature column 0. In graphs that mark
fewer splits (the published TpuGraphs) computations run together: fewer loops are
found, and a read is matched among more elements.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from graphcost.formats import Graph
from graphcost.formats.hlo import OPCODE_IDS

WHILE, TUPLE, PARAMETER, GTE = (OPCODE_IDS[o] for o in
                                ("while", "tuple", "parameter", "get-tuple-element"))
SHAPE = slice(2, 29)  # element type one-hot and shape.dimensions: what a read is matched by
MAX_DEPTH = 2  # depths above this share the last feature
LOOP_FEATURES = MAX_DEPTH + 1  # node inputs `depth_features` adds


def computation_of(graph: Graph) -> np.ndarray:
    """(n,) the index of each node's computation, from `node_splits`."""
    splits = np.asarray(graph.node_splits, dtype=np.int64)
    if splits.size == 0:
        return np.zeros(graph.num_nodes, dtype=np.int64)
    return np.maximum(np.searchsorted(splits, np.arange(graph.num_nodes), side="right") - 1, 0)


def _operands(graph: Graph) -> list[list[int]]:
    ops: list[list[int]] = [[] for _ in range(graph.num_nodes)]
    for u, v in np.asarray(graph.edge_index, dtype=np.int64).reshape(-1, 2):
        ops[int(u)].append(int(v))
    return ops


def loop_structure(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """(depth (n,) int64, loop edges (m, 2) int64 [read, element]); see the module
    docstring."""
    comp = computation_of(graph)
    ops = _operands(graph)
    opcode = np.asarray(graph.node_opcode)
    is_root = np.asarray(graph.node_feat[:, 0]) != 0
    num_comps = int(comp.max()) + 1 if comp.size else 0
    comp_depth = np.zeros(num_comps, dtype=np.int64)
    edges: list[tuple[int, int]] = []
    # callers come after their callees (callee-first order): walking nodes backwards,
    # a computation's depth is final before any node inside it is reached
    for u in range(graph.num_nodes - 1, -1, -1):
        called = sorted({comp[v] for v in ops[u] if comp[v] != comp[u] and is_root[v]})
        inner = comp_depth[comp[u]] + (opcode[u] == WHILE)
        for c in called:
            comp_depth[c] = max(comp_depth[c], inner)
        if opcode[u] != WHILE:
            continue
        init = [v for v in ops[u] if comp[v] == comp[u]]
        elements = [e for t in init for e in (ops[t] if opcode[t] == TUPLE else [t])]
        shapes = {e: graph.node_feat[e, SHAPE].tobytes() for e in elements}
        for c in called:
            members = np.flatnonzero(comp == c)
            params = set(members[opcode[members] == PARAMETER].tolist())
            for r in members[opcode[members] == GTE]:
                if not any(p in params for p in ops[r]):
                    continue
                key = graph.node_feat[r, SHAPE].tobytes()
                edges += [(int(r), e) for e in elements if shapes[e] == key]
    depth = comp_depth[comp] if comp.size else np.zeros(0, np.int64)
    loop_edges = (np.unique(np.asarray(edges, dtype=np.int64), axis=0) if edges
                  else np.zeros((0, 2), dtype=np.int64))
    return depth, loop_edges


def with_loops(graph: Graph) -> tuple[Graph, np.ndarray]:
    """The graph with its loop edges added, and each node's loop depth (n,)."""
    depth, extra = loop_structure(graph)
    if extra.size == 0:
        return graph, depth
    edges = np.unique(np.concatenate([np.asarray(graph.edge_index, np.int64).reshape(-1, 2),
                                      extra]), axis=0)
    return replace(graph, edge_index=edges), depth


def depth_features(depth: np.ndarray) -> np.ndarray:
    """(n, LOOP_FEATURES) float32 one-hot of each node's loop depth (capped)."""
    d = np.minimum(np.asarray(depth, dtype=np.int64), MAX_DEPTH)
    return np.eye(LOOP_FEATURES, dtype=np.float32)[d]
