"""Networks equivalent to the official TpuGraphs baselines (DESIGN §6).

Tile: GraphSAGE over [opcode embedding ‖ node features] with the graph-level config
joined early (concatenated onto every node before message passing) or late (onto the
pooled graph vector), and an MLP with no message passing. Layout: a residual GCN
whose configurable nodes carry their config features, pooled by mean and sum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn
from torch_geometric.nn import GCNConv, SAGEConv, global_max_pool
from torch_geometric.nn import global_mean_pool as mean_pool

from graphcost.models.base import (
    NUM_OPCODES,
    Batch,
    GraphTensors,
    RankingNet,
    chunk_limit,
    mlp,
    pool_own,
)
from graphcost.models.segments import split_segments


@dataclass
class SageSettings:
    hidden: int = 64  # node state size
    opcode_dim: int = 32  # opcode embedding size
    layers: int = 3  # message-passing layers
    join: str = "early"  # 'early': config onto every node; 'late': onto the pooled vector
    dropout: float = 0.0  # dropout probability in training


class SageTile(RankingNet):
    """GraphSAGE tile baseline.

    early: h⁰_v = [x_v ‖ emb(op_v) ‖ cfg] for each config, so the C configs run through
    the convolutions as a (C, N, ·) tensor over one edge_index; late: the graph is
    encoded once and each config is concatenated after pooling.
    """

    kinds = ("tile",)

    def __init__(self, kind: str, s: SageSettings, node_dim: int, config_dim: int):
        super().__init__()
        if s.join not in ("early", "late"):
            raise ValueError(f"join must be 'early' or 'late', got '{s.join}'")
        self.s = s
        self.opcode = nn.Embedding(NUM_OPCODES, s.opcode_dim)
        d_in = node_dim + s.opcode_dim + (config_dim if s.join == "early" else 0)
        self.convs = nn.ModuleList(SAGEConv(d_in if i == 0 else s.hidden, s.hidden)
                                   for i in range(s.layers))
        self.head = mlp(2 * s.hidden + (config_dim if s.join == "late" else 0), s.hidden, 1,
                        s.dropout)

    def forward(self, b: Batch) -> Tensor:
        h = torch.cat([b.x, self.opcode(b.opcode)], dim=-1).unsqueeze(0)  # (1, N, F)
        if self.s.join == "early":
            cfg = b.config[b.node_graph].transpose(0, 1)  # (C, N, config_dim)
            h = torch.cat([h.expand(cfg.shape[0], -1, -1), cfg], dim=-1)
        for conv in self.convs:
            h = torch.relu(conv(h, b.edge_index))
        g = torch.cat([mean_pool(h, b.node_graph, b.num_graphs),
                       global_max_pool(h, b.node_graph, b.num_graphs)], -1).transpose(0, 1)
        if self.s.join == "late":  # g: (B, 1, 2h)
            g = torch.cat([g.expand(-1, b.config.shape[1], -1), b.config], dim=-1)
        return self.head(g).squeeze(-1)


@dataclass
class MLPSettings:
    hidden: int = 64  # node state size
    opcode_dim: int = 32  # opcode embedding size
    dropout: float = 0.0  # dropout probability in training


class MLPTile(RankingNet):
    """MLP tile baseline: per-node MLP, mean+max pooling, then [graph ‖ config] → MLP."""

    kinds = ("tile",)

    def __init__(self, kind: str, s: MLPSettings, node_dim: int, config_dim: int):
        super().__init__()
        self.opcode = nn.Embedding(NUM_OPCODES, s.opcode_dim)
        self.node = mlp(node_dim + s.opcode_dim, s.hidden, s.hidden, s.dropout)
        self.head = mlp(2 * s.hidden + config_dim, s.hidden, 1, s.dropout)

    def forward(self, b: Batch) -> Tensor:
        h = self.node(torch.cat([b.x, self.opcode(b.opcode)], dim=-1))
        g = torch.cat([mean_pool(h, b.node_graph, b.num_graphs),
                       global_max_pool(h, b.node_graph, b.num_graphs)], -1)  # (B, 2h)
        g = g.unsqueeze(1).expand(-1, b.config.shape[1], -1)
        return self.head(torch.cat([g, b.config], dim=-1)).squeeze(-1)


@dataclass
class ResGCNSettings:
    hidden: int = 64  # node state size
    opcode_dim: int = 32  # opcode embedding size
    layers: int = 3  # message-passing layers
    dropout: float = 0.0  # dropout probability in training
    segment_size: int = 0  # encode in segments of ~this many nodes (GST); 0: whole graph
    segment_halo: int = -1  # hops of context around a segment; −1: layers + 1 (exact states)


class ResGCNLayout(RankingNet):
    """Residual GCN layout baseline.

    h⁰ = W[x ‖ emb(op) ‖ cfg], with cfg the node's 18 layout features at configurable
    nodes and zeros elsewhere (computed as W_x[x ‖ emb] + W_c·cfg, added only at
    configurable nodes); hˡ⁺¹ = hˡ + relu(GCN(hˡ)); score = MLP([mean ‖ sum] pooling).
    """

    kinds = ("layout",)

    def __init__(self, kind: str, s: ResGCNSettings, node_dim: int, config_dim: int):
        super().__init__()
        self.s = s
        self.opcode = nn.Embedding(NUM_OPCODES, s.opcode_dim)
        self.node_in = nn.Linear(node_dim + s.opcode_dim, s.hidden)
        self.config_in = nn.Linear(18, s.hidden, bias=False)
        self.convs = nn.ModuleList(GCNConv(s.hidden, s.hidden) for _ in range(s.layers))
        self.head = mlp(2 * s.hidden, s.hidden, 1, s.dropout)

    def forward(self, b: Batch) -> Tensor:
        return self.score_embedding(self.encode_segment(b), b.mask)

    @property
    def segment_halo(self) -> int:
        """GCN normalises by both ends' degrees: one hop more than the layers."""
        return self.s.segment_halo if self.s.segment_halo >= 0 else self.s.layers + 1

    def encode_segment(self, b: Batch, share: Tensor | None = None) -> Tensor:
        """(B, C, 2h) [share·mean ‖ sum] pooling of each graph (or segment, models/segments.py,
        `share` (B, 2) its node and config-node fractions): both parts add up over a graph's
        segments to the whole graph's pooling."""
        h0 = self.node_in(torch.cat([b.x, self.opcode(b.opcode)], dim=-1))  # (N, h)
        c = b.config.shape[0]
        h = h0.expand(c, -1, -1).index_add(1, b.config_nodes, self.config_in(b.config))
        for conv in self.convs:
            h = h + torch.relu(conv(h, b.edge_index))
        mean = pool_own("mean", h, b.node_graph, b.num_graphs)  # (C, B, h)
        if share is not None:
            mean = mean * share[:, 0].to(mean.dtype)[None, :, None]
        return torch.cat([mean, pool_own("sum", h, b.node_graph, b.num_graphs)], -1).transpose(0, 1)

    def score_embedding(self, h: Tensor, mask: Tensor) -> Tensor:
        """(B, C, 2h) → (B, C) scores; configs do not interact."""
        return self.head(h).squeeze(-1)

    def head_parameters(self) -> list[nn.Parameter]:
        return list(self.head.parameters())

    @torch.no_grad()
    def score_configs(self, g: GraphTensors, ids: np.ndarray, chunk_size: int = 1024) -> Tensor:
        """Scores in bounded-memory chunks, summing segment embeddings when GST-trained."""
        segments = split_segments(g, self.s.segment_size, self.segment_halo)
        size = chunk_limit(segments.largest, chunk_size)
        mask = torch.ones(1, 1, dtype=torch.bool, device=self.device)
        out = [self.score_embedding(segments.encode(self, ids[i:i + size]), mask)[0].float().cpu()
               for i in range(0, len(ids), size)]
        return torch.cat(out) if out else torch.zeros(0)
