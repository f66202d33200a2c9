"""The official layout baseline, ResModel (`--model resgcn`), layer for layer.

Spec: `tpu_graphs/baselines/layout/models.py` (github google-research-datasets/
tpu_graphs). Its training recipe (ListMLE, Adam with per-tensor clipping, 16 configs,
batch 8, 50 epochs, early stopping on validation OPA) is this model's default training
settings (`models.registry.MODELS`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor, nn
from torch.nn import functional as F

from graphcost import fields
from graphcost.models.base import Batch, GraphTensors, RankingNet, collate, pool_own
from graphcost.models.fastpath import LayoutEngine, Rows
from graphcost.models.official_layers import (
    OFFICIAL,
    OFFICIAL_RULES,
    DenseStack,
    OpEmbedding,
    SymGCNConv,
    act,
    kernel_l2,
    sym_matrix,
)


@dataclass
class ResModelSettings:
    hidden: int = 32  # node state size
    opcode_dim: int = 32  # opcode embedding size
    layers: int = 2  # GNN layers (each an MLP of `mlp_layers` Dense layers)
    mlp_layers: int = 2  # Dense layers in the prenet and in each GNN layer
    num_ops: int = 121  # opcode vocabulary: ids 0..120 (docs/design.md §3)
    config_scale: float = 100.0  # config features are multiplied by this before joining
    keep_nodes: int = 5000  # training back-propagates through a window of this many nodes
    l2: float = 1e-4  # L2 on Dense kernels and on the opcode embedding's output
    RULES: ClassVar[dict[str, fields.Rule]] = {
        **OFFICIAL_RULES, "layers": fields.AT_LEAST_1, "config_scale": fields.POSITIVE,
        "keep_nodes": fields.NON_NEGATIVE}


#: ResModel's training recipe (the official layout baseline's)
OFFICIAL_LAYOUT = dict(OFFICIAL, epochs=50, patience=25, graphs_per_batch=8,
                       configs_per_graph=16, valid_configs=16, grad_clip=1e-2,
                       fast_bias=1.0, temperature=1.0, last_batch="keep")


class ResModel(RankingNet):
    r"""Residual GCN over op nodes with the layout config re-joined at every layer.

    For each config, with c_v = 100·(the node's 18 layout config features, min-max
    normalised) at configurable nodes and 0 elsewhere:

    .. math::
        x⁰ = σ(\mathrm{MLP}([c ‖ f ‖ \mathrm{emb}(op)])),\quad
        x^{l+1} = x^l + σ(\mathrm{MLP}(Â[c ‖ x^l])),\quad
        s = \mathrm{Dense}(σ(\mathrm{Dense}([\mathrm{mean}(x) ‖ \hat{Σ}(x) ‖ \hat{Σ}_{cfg}(x)])))

    Â = D^{-1/2}(A + Aᵀ + I)D^{-1/2}; \hat{Σ} is an L2-normalised sum over the graph's
    ops, \hat{Σ}_{cfg} over its configurable nodes; the head has no biases.

    Training (`self.training`) on a graph of more than `keep_nodes` nodes is the
    official "backpropdropout": a random window of `keep_nodes` consecutive node ids
    gets states from a pass over the window's own edges (with gradients); every other
    node keeps its full-graph state (without); configurable-node pooling sums only the
    window's. Smaller graphs train on the whole graph.

    Deviation: the official loader sizes the embedding to the largest opcode id in the
    data + 1; here it is `num_ops` = 121, the whole vocabulary, so a model transfers
    between collections. Rows of unseen opcodes get no gradient (the regulariser acts
    on the embedding's output, not its weights), so scores are unchanged.
    """

    kinds = ("layout",)

    def __init__(self, kind: str, s: ResModelSettings, node_dim: int, config_dim: int):
        super().__init__()
        self.s = s
        self.opcode = OpEmbedding(s.num_ops, s.opcode_dim)
        self.opcode.reset_parameters()
        d_cfg = config_dim
        self.prenet = DenseStack(d_cfg + node_dim + s.opcode_dim, [s.hidden] * s.mlp_layers)
        self.convs = nn.ModuleList(SymGCNConv(d_cfg, s.hidden, s.mlp_layers)
                                   for _ in range(s.layers))
        self.postnet = DenseStack(3 * s.hidden, [s.hidden, 1], bias=False)
        self._activity: Tensor | None = None

    def penalty(self) -> Tensor:
        """Keras' regularisation losses of the last forward pass."""
        reg = kernel_l2(self, self.s.l2)
        return reg + self._activity if self._activity is not None else reg

    def _nodes(self, b: Batch, config: Tensor, edge_index: Tensor) -> Tensor:
        """(C, N, hidden) node states of every config."""
        emb = self.opcode(b.opcode)
        if self.training:
            self._activity = OpEmbedding.activity(emb, self.s.l2)
        node = torch.cat([b.x, emb], dim=-1)
        c = config.shape[0]
        x = act(self.prenet(torch.cat([config, node.expand(c, -1, -1)], dim=-1)))
        for conv in self.convs:
            x = conv(x, edge_index, config)
        return x

    def forward(self, b: Batch) -> Tensor:
        if b.edge_forward is None:
            raise ValueError("ResModel needs the graph's edge directions (Batch.edge_forward)")
        edges = b.edge_index[:, b.edge_forward]
        n, c = b.x.shape[0], b.config.shape[0]
        config = b.x.new_zeros(c, n, b.config.shape[-1]).index_add(
            1, b.config_nodes, self.s.config_scale * b.config.to(b.x.dtype))
        window = self._window(b) if self.training else None
        if window is None:
            x = self._nodes(b, config, edges)
            cfg_nodes, cfg_graph = b.config_nodes, b.config_graph
        else:
            with torch.no_grad():
                full = self._nodes(b, config, edges)
            inside = window[edges].all(0)
            cfg_in = window[b.config_nodes]
            x = self._nodes(b, config * window[None, :, None], edges[:, inside])
            x = torch.where(window[None, :, None], x, full)
            cfg_nodes, cfg_graph = b.config_nodes[cfg_in], b.config_graph[cfg_in]
        g = b.num_graphs
        pooled = torch.cat([
            pool_own("mean", x, b.node_graph, g),
            F.normalize(pool_own("sum", x, b.node_graph, g), dim=-1, eps=1e-6),
            F.normalize(pool_own("sum", x.index_select(1, cfg_nodes), cfg_graph, g), dim=-1,
                        eps=1e-6),
        ], dim=-1)  # (C, B, 3·hidden)
        return self.postnet(pooled).squeeze(-1).transpose(0, 1)

    def engine(self, g: GraphTensors) -> LayoutEngine:
        """The exact fast path for g's configs (`fastpath`)."""
        with torch.no_grad():
            return LayoutEngine(ResModelLayers(self, g), g)

    @torch.no_grad()
    def score_configs(self, g: GraphTensors, ids: np.ndarray, chunk_size: int = 1024,
                      fast: bool = True) -> Tensor:
        """Scores of configs `ids` of g; `fast` takes the exact fast path (on CPU)."""
        if not fast or self.device.type != "cpu":
            return super().score_configs(g, ids, chunk_size)
        engine = self.engine(g)
        ids = np.asarray(ids, dtype=np.int64)
        out = [engine(g.configs(ids[i:i + chunk_size]))
               for i in range(0, len(ids), chunk_size)]
        return torch.cat(out) if out else torch.zeros(0)

    def config_scorer(self, g: GraphTensors, chunk_size: int = 1024,
                      fast: bool = True) -> Callable[[Tensor], Tensor]:
        """Scores of configs shaped like `g.configs(ids)`; the engine (graph states, the
        last base config's states) lives as long as the returned function."""
        if not fast or self.device.type != "cpu":
            return super().config_scorer(g, chunk_size, fast)
        return self.engine(g)

    def _window(self, b: Batch) -> Tensor | None:
        """Nodes of each graph's random back-propagation window; None when every graph
        fits in one (then the window pass is the full pass)."""
        k = self.s.keep_nodes
        sizes = torch.bincount(b.node_graph, minlength=b.num_graphs)[:b.num_graphs]
        if k <= 0 or int(sizes.max()) <= k:
            return None
        starts = torch.cumsum(sizes, 0) - sizes
        segments = (sizes + k - 1) // k
        pick = (torch.rand(b.num_graphs, device=segments.device) * segments).long().clamp(
            max=segments - 1)
        local = torch.arange(b.x.shape[0], device=b.x.device) - starts[b.node_graph]
        lo = (pick * k)[b.node_graph]
        return (local >= lo) & (local < lo + k)


class ResModelLayers:
    """ResModel as `fastpath.LayoutLayers`: x⁰ = σ(prenet([c ‖ f ‖ emb])), then
    x ← x + σ(MLP(Â y)) with y = [c ‖ x], c the 100-scaled config (0 off config nodes)."""

    uses_max = False

    def __init__(self, net: ResModel, g: GraphTensors):
        self.net = net
        self.layers, self.width = net.s.layers, net.s.hidden
        b = collate([(g, np.zeros(1, np.int64))])
        self.node = torch.cat([b.x, net.opcode(b.opcode)], dim=-1)  # (N, ·): once per graph

    def adjacency(self, g: GraphTensors) -> sp.csr_matrix:
        return sym_matrix(g.edge_index[:, g.edge_forward], g.x.shape[0])

    def _config(self, r: Rows) -> Tensor:
        return self.net.s.config_scale * r.cfg

    def start(self, r: Rows) -> Tensor:
        return act(self.net.prenet(torch.cat([self._config(r), self.node[r.node]], dim=-1)))

    def pre(self, layer: int, h: Tensor, r: Rows) -> Tensor:
        return torch.cat([self._config(r), h], dim=-1)

    def post(self, layer: int, agg: Tensor, y: Tensor, h: Tensor, r: Rows) -> Tensor:
        return h + act(self.net.convs[layer - 1].mlp(agg))

    def readout(self, total: Tensor, on_config: Tensor, top: Tensor | None, nodes: int,
                config_nodes: int) -> Tensor:
        pooled = torch.cat([total / nodes, F.normalize(total, dim=-1, eps=1e-6),
                            F.normalize(on_config, dim=-1, eps=1e-6)], dim=-1)
        return self.net.postnet(pooled).squeeze(-1)
