"""What every network shares: one graph as tensors, a batch of graphs with sampled
configs, and the network base class.

Batching never copies a graph's structure per config. Node tensors of the B graphs are
concatenated once (PyG style, with a `node_graph` vector); where a network needs one
node state per config it keeps a config axis: leading, (C, N, d), for PyG layers (which
aggregate along dim −2) to run all C configs over the one shared `edge_index`, or after
the nodes, (N, C, d), for one sparse product per layer (the default ranker).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from torch_geometric.nn import MLP
from torch_geometric.utils import scatter

from graphcost.data.features import repad_layout, tensor_bytes
from graphcost.formats import Graph, TileGraph

# ids 0..120 are used (docs/design.md §3); anything larger maps to 0, with a warning
NUM_OPCODES = 128
log = logging.getLogger("graphcost")
NODE_BUDGET = 1 << 19  # node states (× hidden size) one prediction pass may hold per tensor


@dataclass
class GraphTensors:
    """One graph ready for a network: transformed node features, undirected edges, and
    a reader for any subset of its configs (layout configs stay on disk until read)."""

    name: str
    kind: str
    x: Tensor  # (n, node_dim) float32
    opcode: Tensor  # (n,) int64
    edge_index: Tensor  # (2, 2m) int64, both directions, PyG source → target
    config_nodes: Tensor  # (nc,) configurable nodes (layout); empty for tile
    runtime: np.ndarray  # (c,) what metrics rank: normalized runtime (tile), runtime (layout)
    graph: Graph
    tile_configs: Tensor | None = None  # (c, config_dim) transformed tile configs
    # (nc, 3, 6) log2 shape dims of each configurable node's output, input and kernel
    # tensor (`role_nodes`), and (nc, 3, 6) their layouts in the graph (−1 padded)
    config_dims: Tensor | None = None
    config_own: Tensor | None = None
    config_bytes: Tensor | None = None  # (nc, 3) bytes of those tensors
    layout_config: Callable[[np.ndarray], np.ndarray] | None = None  # layout config transform
    # (2m,) bool: True for an edge in the file's direction (npz column 0 → column 1)
    edge_forward: Tensor | None = None
    # a segment (models/segments.py): nodes [0, own_nodes) and config nodes
    # [0, own_config_nodes) are its own; the rest are its halo, context not pooled
    own_nodes: int | None = None
    own_config_nodes: int | None = None

    @property
    def num_configs(self) -> int:
        return int(self.runtime.shape[0])

    def configs(self, ids: np.ndarray) -> Tensor:
        """Tile: (len(ids), config_dim); layout: (len(ids), nc, 18) read from disk."""
        if self.tile_configs is not None:
            return self.tile_configs[torch.as_tensor(ids, dtype=torch.long)]
        configs = self.graph.configs(ids)
        if self.layout_config is not None:
            configs = self.layout_config(configs)
        return torch.from_numpy(configs)


def role_nodes(graph: Graph) -> np.ndarray:
    """(nc, 3) the node whose tensor each layout role of a configurable node lays out:
    output (the node itself), input and kernel (its first and second operands, in the
    order of its edges; the node itself when it has fewer). Each role's 6 config
    entries name dimensions of that tensor, so their sizes come from its shape."""
    cfg = np.asarray(graph.node_config_ids, dtype=np.int64)
    out = np.repeat(cfg[:, None], 3, axis=1)
    edges = np.asarray(graph.edge_index, dtype=np.int64).reshape(-1, 2)
    row = np.full(graph.node_feat.shape[0], -1, dtype=np.int64)
    row[cfg] = np.arange(cfg.size)
    mine = np.flatnonzero(row[edges[:, 0]] >= 0)  # u consumes v: edges out of config nodes
    who = row[edges[mine, 0]]
    order = np.argsort(who, kind="stable")  # operand order kept within each node
    who, operand = who[order], edges[mine[order], 1]
    rank = np.arange(who.size) - np.searchsorted(who, who)
    first_two = rank < 2
    out[who[first_two], rank[first_two] + 1] = operand[first_two]
    return out


def graph_tensors(graph: Graph, transform) -> GraphTensors:
    """Apply a fitted FeatureTransform and make edges undirected (both directions)."""
    e = torch.as_tensor(graph.edge_index, dtype=torch.long).reshape(-1, 2).t()
    edge_index = torch.cat([e, e.flip(0)], dim=1)
    forward = torch.arange(edge_index.shape[1]) < e.shape[1]
    opcode = torch.as_tensor(graph.node_opcode, dtype=torch.long)
    unknown = (opcode < 0) | (opcode >= NUM_OPCODES)
    if unknown.any():  # counted, not silent (docs/design.md §3); they share the embedding of id 0
        ids = sorted(set(opcode[unknown].tolist()))
        log.warning("graph %s: %d nodes have opcode ids outside 0..%d (%s); they are read "
                    "as id 0, unknown", graph.name, int(unknown.sum()), NUM_OPCODES - 1,
                    ", ".join(map(str, ids[:5])) + (", …" if len(ids) > 5 else ""))
        opcode = torch.where(unknown, 0, opcode)
    tile = isinstance(graph, TileGraph)
    roles = np.zeros((0, 3), np.int64) if tile else role_nodes(graph)
    at = repad_layout(graph.node_feat)[roles]  # (nc, 3, 140)
    return GraphTensors(
        name=graph.name, kind=graph.kind,
        x=torch.from_numpy(transform.node(graph.node_feat)), opcode=opcode,
        edge_index=edge_index, edge_forward=forward,
        config_nodes=(torch.zeros(0, dtype=torch.long) if tile
                      else torch.as_tensor(graph.node_config_ids, dtype=torch.long)),
        runtime=np.asarray(graph.target, dtype=np.float64),
        graph=graph,
        tile_configs=torch.from_numpy(transform.tile_config(graph.config_feat)) if tile else None,
        config_dims=torch.from_numpy(np.log2(np.maximum(at[..., 21:27], 1.0)).astype(np.float32)),
        config_own=torch.from_numpy(at[..., 134:140].astype(np.int64)),
        config_bytes=torch.from_numpy(tensor_bytes(at).astype(np.float32)),
        layout_config=None if tile or transform.layout_config_columns is None
        else transform.layout_config,
    )


@dataclass
class Batch:
    """B graphs with C configs each (padded configs have mask False).

    config: tile (B, C, config_dim); layout (C, K, 18) for the K configurable nodes of
    all graphs together, `config_nodes` (K,) giving their index into the N batch nodes.
    """

    x: Tensor  # (N, node_dim)
    opcode: Tensor  # (N,)
    edge_index: Tensor  # (2, E)
    node_graph: Tensor  # (N,) graph of each node; B for a segment's halo (pool skips it)
    num_graphs: int
    config: Tensor
    config_nodes: Tensor  # (K,)
    config_graph: Tensor  # (K,) graph of each configurable node; B in a halo
    config_dims: Tensor  # (K, 3, 6) log2 shape dims of each role's tensor (layout)
    config_own: Tensor  # (K, 3, 6) the graph's own layouts of them (−1 padded)
    config_bytes: Tensor  # (K, 3) bytes of each role's tensor
    mask: Tensor  # (B, C) bool
    runtime: Tensor | None = None  # (B, C) float32, for losses
    edge_forward: Tensor | None = None  # (E,) bool, edges in the file's direction

    def to(self, device: torch.device | str) -> Batch:
        moved = {k: (v.to(device, non_blocking=True) if isinstance(v, Tensor) else v)
                 for k, v in self.__dict__.items()}
        return Batch(**moved)


def _graph_ids(n: int, own: int | None, b: int, num_graphs: int) -> Tensor:
    """Graph b for a graph's own nodes, `num_graphs` (no graph) for a segment's halo."""
    ids = torch.full((n,), b, dtype=torch.long)
    if own is not None:
        ids[own:] = num_graphs
    return ids


def pool_own(reduce: str, h: Tensor, index: Tensor, num_graphs: int, dim: int = -2) -> Tensor:
    """PyG pooling along the node axis `dim` (−2: (..., N, d); 0: node-major (N, ..., d))
    that skips halo nodes (index `num_graphs`, see collate)."""
    out = scatter(h, index, dim=dim, dim_size=num_graphs + 1, reduce=reduce)
    return out.narrow(dim, 0, num_graphs)


def collate(items: list[tuple[GraphTensors, np.ndarray]], with_runtime: bool = False) -> Batch:
    """Batch graphs with their chosen config ids; shorter id lists are padded and masked.

    Kept over PyG's Batch.from_data_list (a Data subclass with __inc__/__cat_dim__, same
    tensors) because it measured faster: PyG took 3.8-7.0x as long on 4x32-config layout
    batches of 100-1000 nodes, 1.8-2.0x at 5000 nodes, 1.7x for 1 graph x 1024 configs,
    5.4-5.5x on 8x32 tile batches (medians of two runs, 1 core; /tmp script not kept).
    """
    c = max(len(ids) for _, ids in items)
    directed = all(g.edge_forward is not None for g, _ in items)
    (xs, ops, edges, node_graph, cfgs, cfg_nodes, cfg_graph, dims, owns, sizes, masks,
     runtimes) = ([] for _ in range(12))
    offset = 0
    for b, (g, ids) in enumerate(items):
        ids = np.asarray(ids, dtype=np.int64)
        padded = np.concatenate([ids, np.full(c - ids.size, ids[0], np.int64)])
        n = g.x.shape[0]
        xs.append(g.x)
        ops.append(g.opcode)
        edges.append(g.edge_index + offset)
        node_graph.append(_graph_ids(n, g.own_nodes, b, len(items)))
        cfgs.append(g.configs(padded))
        cfg_nodes.append(g.config_nodes + offset)
        cfg_graph.append(_graph_ids(g.config_nodes.numel(), g.own_config_nodes, b, len(items)))
        dims.append(g.config_dims)
        owns.append(g.config_own)
        sizes.append(g.config_bytes)
        masks.append(torch.arange(c) < ids.size)
        if with_runtime:
            runtimes.append(torch.as_tensor(g.runtime[padded], dtype=torch.float32))
        offset += n
    tile = items[0][0].kind == "tile"
    return Batch(
        x=torch.cat(xs), opcode=torch.cat(ops), edge_index=torch.cat(edges, dim=1),
        node_graph=torch.cat(node_graph), num_graphs=len(items),
        config=torch.stack(cfgs) if tile else torch.cat(cfgs, dim=1),
        config_nodes=torch.cat(cfg_nodes), config_graph=torch.cat(cfg_graph),
        config_dims=torch.cat(dims), config_own=torch.cat(owns),
        config_bytes=torch.cat(sizes),
        mask=torch.stack(masks), runtime=torch.stack(runtimes) if with_runtime else None,
        edge_forward=torch.cat([g.edge_forward for g, _ in items]) if directed else None,
    )


def mlp(d_in: int, d_hidden: int, d_out: int, dropout: float = 0.0) -> MLP:
    """Two linear layers with GELU and dropout between: the small MLP every model uses
    (PyG's `MLP`, no norm, the last layer plain)."""
    return MLP([d_in, d_hidden, d_out], act="gelu", dropout=dropout, norm=None)


class RankingNet(nn.Module):
    """Base of every network: `forward(batch) → (B, C)` scores, LOWER = FASTER.

    `score_configs` scores any number of configs of one graph in bounded-memory chunks.
    Networks whose configs do not interact score each config independently, so chunking
    cannot change a score; the cross-config ranker overrides it (see ranker.py).
    """

    kinds: tuple[str, ...] = ("tile", "layout")
    closed_form = False  # True: fitted by `fit_closed_form`, never by an optimiser

    @property
    def device(self) -> torch.device:
        return next(self.parameters(), torch.zeros(0)).device  # a rule has no parameters

    def fit_prior(self, graphs: Iterable[GraphTensors]) -> str | None:
        """Fit what the network starts from before training (a rule underneath, see the
        ranker's `prior`); what was fitted, or None (here: nothing, `graphs` unread)."""
        return None

    def penalty(self) -> Tensor | None:
        """A regularisation term training adds to the loss (None: none)."""
        return None

    @torch.no_grad()
    def score_configs(self, g: GraphTensors, ids: np.ndarray, chunk_size: int = 1024,
                      fast: bool = True) -> Tensor:
        """Scores of g's configs `ids` (networks with an exact fast path take it when
        `fast`; this plain path has none)."""
        size = chunk_limit(g, chunk_size)
        out = [self(collate([(g, ids[i:i + size])]).to(self.device))[0].float().cpu()
               for i in range(0, len(ids), size)]
        return torch.cat(out) if out else torch.zeros(0)

    def config_scorer(self, g: GraphTensors, chunk_size: int = 1024,
                      fast: bool = True) -> Callable[[Tensor], Tensor]:
        """A function scoring configs (shaped like `g.configs(ids)`) that need not be in
        g, each as `score_configs` would score it in g. Networks override it to do the
        graph-side work once, here, rather than on every call."""

        def score(configs: Tensor) -> Tensor:
            n = configs.shape[0]
            if g.kind == "tile":
                one = dataclasses.replace(g, tile_configs=configs, runtime=np.zeros(n))
            else:
                raw = dataclasses.replace(g.graph, node_config_feat=configs.numpy(),
                                          config_runtime=np.zeros(n))
                one = dataclasses.replace(g, graph=raw, runtime=np.zeros(n),
                                          layout_config=None)
            return self.score_configs(one, np.arange(n), chunk_size, fast)

        return score


def chunk_limit(g: GraphTensors, chunk_size: int) -> int:
    """Configs per prediction pass: at most `chunk_size`, and few enough that a (C, N, d)
    node state stays within NODE_BUDGET node rows, so memory is bounded on huge graphs."""
    return max(1, min(chunk_size, NODE_BUDGET // max(1, g.x.shape[0])))
