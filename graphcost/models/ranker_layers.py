"""What the default ranker is composed of, besides PyG's `SAGEConv`: its layout config
features, a GraphSAGE with a weight per edge direction, the transformer block across a
graph's configs, its mean aggregation as a sparse matrix, and the layout ranker as the
fast path's `LayoutLayers`."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv

from graphcost.models.base import Batch, GraphTensors, collate, mlp
from graphcost.models.fastpath import Rows
from graphcost.models.heuristics import changed_layouts

LAYOUT_VALUES = 7  # a minor-to-major entry is −1 (padding / compiler default) or a dim 0..5
LAYOUT_FEATURES = 18 * LAYOUT_VALUES + 18
CHANGE_FEATURES = 6  # `change_features`: per role, changed or not, and its log size


def layout_features(config: Tensor, dims: Tensor, own: Tensor,
                    nbytes: Tensor | None = None) -> Tensor:
    """Per-node layout config features for the ranker.

    config (C, K, 18) raw entries (output, input, kernel: 6 each), dims (K, 3, 6) log2
    shape dims of each role's tensor and own (K, 3, 6) its layout in the graph →
    (C, K, LAYOUT_FEATURES): the one-hot of each entry and log2(size) of the dimension
    it names in its own role's tensor (the input's entries name the node's first
    operand's dimensions, the kernel's its second's), where an entry of −1 (compiler
    default) names the dimension of the graph's own layout at that position (0 past
    the rank). With `nbytes` (K, 3), the bytes of each role's tensor, CHANGE_FEATURES
    more follow: per role, whether the config sets it to another order than the
    graph's own (a copy, `heuristics.changed_layouts`) and then log2(1 + KiB) of it.
    """
    v = config.round().long().clamp(-1, 5)
    onehot = nn.functional.one_hot(v + 1, LAYOUT_VALUES).flatten(-2).to(dims.dtype)
    v = v.unflatten(-1, (3, 6))  # (C, K, 3, 6)
    eff = torch.where(v >= 0, v, own.unsqueeze(0))
    size = torch.gather(dims.unsqueeze(0).expand(v.shape[0], -1, -1, -1), 3, eff.clamp(min=0))
    parts = [onehot, (size * (eff >= 0)).flatten(-2)]
    if nbytes is not None:
        changed = changed_layouts(config, own).to(dims.dtype)  # (C, K, 3)
        parts += [changed, changed * torch.log2(1 + nbytes / 1024).to(dims.dtype)]
    return torch.cat(parts, dim=-1)


class DirectedSAGEConv(nn.Module):
    r"""GraphSAGE with a weight per edge direction:

    .. math:: h'_v = W_0 h_v + W_1\,\mathrm{mean}_{u \in \mathrm{users}(v)} h_u
              + W_2\,\mathrm{mean}_{u \in \mathrm{operands}(v)} h_u + b

    A producer hears its consumers through W_1 and a consumer its operands through
    W_2, so a message says which way along the dataflow it came (one undirected
    SAGEConv mixes the two). `forward` marks the edges in the file's direction (a
    consumer → its operand, docs/design.md §1) in an `edge_index` holding both directions.
    """

    def __init__(self, d: int):
        super().__init__()
        self.users = SAGEConv(d, d)  # with the root weight W_0
        self.operands = SAGEConv(d, d, root_weight=False, bias=False)

    def reset_parameters(self) -> None:
        self.users.reset_parameters()
        self.operands.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, forward: Tensor) -> Tensor:
        return (self.users(x, edge_index[:, forward])
                + self.operands(x, edge_index[:, ~forward]))


class CrossConfigAttention(nn.Module):
    """Pre-norm transformer block across the configs of one graph.

    Queries h (B, Q, d) attend to themselves and to reference configs ref (B, R, d);
    `same` (B|1, Q, R) hides a reference that is the query itself, `ref_mask` (B, R)
    hides padding. In training ref is h and `same` the identity: plain self-attention.

    Written out rather than with `scaled_dot_product_attention`: every query has a key of
    its own (itself) besides the shared references, which SDPA can only express as a
    (Q, R + 1) key set per query; on a 1024-config prediction chunk with 32 references
    that measured 18× slower (20 ms against 1.1 ms per block, 1 core), same outputs.
    """

    def __init__(self, d: int, heads: int, dropout: float = 0.0):
        super().__init__()
        if d % heads:
            raise ValueError(f"hidden size {d} is not divisible by {heads} heads")
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.kv, self.o = nn.Linear(d, d), nn.Linear(d, 2 * d), nn.Linear(d, d)
        self.ff = mlp(d, 2 * d, d, dropout)
        self.drop = nn.Dropout(dropout)

    def _split(self, t: Tensor) -> Tensor:  # (B, L, d) → (B, H, L, d/H)
        return t.unflatten(-1, (self.heads, -1)).transpose(1, 2)

    def forward(self, h: Tensor, ref: Tensor, same: Tensor, ref_mask: Tensor) -> Tensor:
        a, r = self.norm1(h), self.norm1(ref)
        q = self._split(self.q(a))
        k_self, v_self = map(self._split, self.kv(a).chunk(2, dim=-1))
        k_ref, v_ref = map(self._split, self.kv(r).chunk(2, dim=-1))
        scale = q.shape[-1] ** -0.5
        logit_self = (q * k_self).sum(-1, keepdim=True) * scale  # (B, H, Q, 1)
        logit_ref = (q @ k_ref.transpose(-1, -2)) * scale  # (B, H, Q, R)
        hide = same | ~ref_mask[:, None, :]
        logit_ref = logit_ref.masked_fill(hide.unsqueeze(1), float("-inf"))
        w = torch.softmax(torch.cat([logit_self, logit_ref], dim=-1), dim=-1)
        out = w[..., :1] * v_self + w[..., 1:] @ v_ref
        h = h + self.drop(self.o(out.transpose(1, 2).flatten(2)))
        return h + self.drop(self.ff(self.norm2(h)))


def mean_adjacency(g: GraphTensors | Batch) -> sp.csr_matrix:
    """A[v, u] = (edges u → v) / in-degree(v): SAGEConv's mean over `g.edge_index`."""
    src, dst = g.edge_index.cpu().numpy()
    indeg = np.bincount(dst, minlength=g.x.shape[0])
    return sp.csr_matrix((1.0 / indeg[dst], (dst, src)), shape=(g.x.shape[0],) * 2)


class RankerLayers:
    """The layout ranker as `fastpath.LayoutLayers`: h⁰ + join at configurable nodes,
    then h ← h + GELU(W_l·mean_{u→v} y_u + W_r·y_v) with y = LayerNorm(h)."""

    uses_max = True

    def __init__(self, net: nn.Module, g: GraphTensors):  # net: a layout `Ranker`
        self.net, self.g = net, g
        self.layers, self.width = net.s.layers, net.s.hidden
        b = collate([(g, np.zeros(1, np.int64))])
        self.h0 = net.graph_state(b)  # (N, d): computed once per graph

    def adjacency(self, g: GraphTensors) -> sp.csr_matrix:
        return mean_adjacency(g)

    def start(self, r: Rows) -> Tensor:
        h = self.h0[r.node]
        on = r.on_config
        k = r.k[on]
        cfg = layout_features(r.cfg[on].unsqueeze(0), self.g.config_dims[k],
                              self.g.config_own[k], self.g.config_bytes[k]
                              if self.net.s.change_features else None)[0]
        h[on] += self.net.join(torch.cat([h[on], cfg], dim=-1))
        return h

    def pre(self, layer: int, h: Tensor, r: Rows) -> Tensor:
        return self.net.norms[layer - 1](h)

    def post(self, layer: int, agg: Tensor, y: Tensor, h: Tensor, r: Rows) -> Tensor:
        return self.net.sage_step(layer - 1, h, y, agg)

    def readout(self, total: Tensor, on_config: Tensor, top: Tensor | None, nodes: int,
                config_nodes: int) -> Tensor:
        return self.net.pool(torch.cat([total / nodes, top, on_config / config_nodes], -1))
