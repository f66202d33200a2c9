"""The official tile baselines, layer for layer: GraphSAGE and residual GCN with the
config joined early or late (`sage-early`, `sage-late`, `resgcn-early`, `resgcn-late`),
and the MLP (`mlp`).

Spec: `tpu_graphs/baselines/tiles/models.py` (github google-research-datasets/
tpu_graphs). Their training recipe (ListMLE at temperature 10 plus 0.02·MSE, Adam with
per-tensor clipping, 10 configs, batch 10, 100 epochs, early stopping on validation OPA)
is their default training settings (`models.registry.MODELS`).

Deviation, as in `official_layout.ResModel`: the embedding has `num_ops` = 121 rows
(the whole vocabulary) instead of the data's largest opcode id + 1; scores are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from graphcost import fields
from graphcost.models.base import Batch, GraphTensors, RankingNet, collate, pool_own
from graphcost.models.fastpath import STATE_BYTES, csr_tensor, propagate, state_configs
from graphcost.models.official_layers import (
    OFFICIAL,
    OFFICIAL_RULES,
    DenseStack,
    OpEmbedding,
    ResGCNConv,
    SAGEConv,
    act,
    kernel_l2,
    resgcn_matrix,
    sage_matrix,
)


@dataclass
class TileGNNSettings:
    backbone: str = "sage"  # 'sage' (GraphSAGE) or 'resgcn' (residual GCN)
    join: str = "early"  # config onto every node before the GNN, or onto the pooled vector
    hidden: int = 64  # node state size
    opcode_dim: int = 64  # opcode embedding size (official: 64 for SAGE, 32 for ResGCN)
    layers: int = 3  # GNN layers
    mlp_layers: int = 2  # SAGE: Dense layers of the head before its output; ResGCN:
    # Dense layers of each GNN layer's MLP
    num_ops: int = 121  # opcode vocabulary: ids 0..120 (docs/design.md §3)
    l2: float = 1e-4  # L2 on Dense kernels and on the opcode embedding's output
    RULES: ClassVar[dict[str, fields.Rule]] = {
        **OFFICIAL_RULES, "backbone": fields.one_of("sage", "resgcn"),
        "join": fields.one_of("early", "late"), "layers": fields.AT_LEAST_1}


#: the official tile baselines' training recipe and loss ('ListMLELoss:1,MSE:0.02')
OFFICIAL_TILE = dict(OFFICIAL, epochs=100, patience=20, graphs_per_batch=10,
                     configs_per_graph=10, valid_configs=10, grad_clip=1e-3,
                     fast_bias=0.0, temperature=10.0, last_batch="drop")
TILE_LOSS = f"tf-listmle:{1 / 1.02!r},tf-mse:{0.02 / 1.02!r}"


class _Official(RankingNet):
    """What every official tile model shares: the opcode embedding, the L2 penalty,
    and the config tensor joined onto node features."""

    kinds = ("tile",)

    def __init__(self, num_ops: int, opcode_dim: int, l2: float):
        super().__init__()
        self.opcode = OpEmbedding(num_ops, opcode_dim)
        self.opcode.reset_parameters()
        self.l2 = l2
        self._activity: Tensor | None = None

    def embed(self, b: Batch) -> Tensor:
        emb = self.opcode(b.opcode)
        if self.training:
            self._activity = OpEmbedding.activity(emb, self.l2)
        return emb

    def penalty(self) -> Tensor:
        """Keras' regularisation losses of the last forward pass."""
        reg = kernel_l2(self, self.l2)
        return reg + self._activity if self._activity is not None else reg


class TileGNN(_Official):
    r"""GraphSAGE or residual-GCN backbone over op nodes, sum pooling, MLP head.

    early: h⁰_v = [emb(op_v) ‖ cfg ‖ f_v] for each config (a (C, N, ·) tensor over one
    edge list), pooled per config; late: h⁰_v = [emb(op_v) ‖ f_v], encoded once, and
    the pooled vector is joined with each config before the head.

    sage: hˡ⁺¹ = SAGEConv(hˡ) (`official_layers.SAGEConv`), head Dense-σ-Dense-σ-Dense→1;
    resgcn: h = MLP(h⁰), hˡ⁺¹ = ResGCNConv(hˡ), then σ(h) is pooled, head Dense-σ-Dense→1.
    """

    def __init__(self, kind: str, s: TileGNNSettings, node_dim: int, config_dim: int):
        super().__init__(s.num_ops, s.opcode_dim, s.l2)
        if s.backbone not in ("sage", "resgcn") or s.join not in ("early", "late"):
            raise ValueError(f"backbone must be sage/resgcn and join early/late, got "
                             f"{s.backbone}/{s.join}")
        self.s, self.config_dim = s, config_dim
        d = s.opcode_dim + node_dim + (config_dim if s.join == "early" else 0)
        d_head = s.hidden + (config_dim if s.join == "late" else 0)
        if s.backbone == "sage":
            self.prenet = None
            self.convs = nn.ModuleList(SAGEConv(d if i == 0 else s.hidden, s.hidden)
                                       for i in range(s.layers))
            self.postnet = DenseStack(d_head, [s.hidden] * s.mlp_layers + [1])
        else:
            self.prenet = DenseStack(d, [s.hidden, s.hidden])
            self.convs = nn.ModuleList(ResGCNConv(s.hidden, s.mlp_layers)
                                       for _ in range(s.layers))
            self.postnet = DenseStack(d_head, [s.hidden, 1])

    def forward(self, b: Batch) -> Tensor:
        if b.edge_forward is None:
            raise ValueError("the official tile models need edge directions "
                             "(Batch.edge_forward)")
        edges = b.edge_index[:, b.edge_forward]
        h = torch.cat([self.embed(b), b.x], dim=-1)  # (N, ·): official order [emb ‖ f]
        if self.s.join == "early":  # [emb ‖ cfg ‖ f] for every config: (C, N, ·)
            cfg = b.config[b.node_graph].transpose(0, 1)
            d_emb = self.s.opcode_dim
            h = torch.cat([h[:, :d_emb].expand(cfg.shape[0], -1, -1), cfg,
                           h[:, d_emb:].expand(cfg.shape[0], -1, -1)], dim=-1)
        if self.prenet is not None:
            h = self.prenet(h)
        for conv in self.convs:
            h = conv(h, edges)
        if self.prenet is not None:
            h = act(h)
        g = pool_own("sum", h, b.node_graph, b.num_graphs)  # early (C, B, h); late (B, h)
        if self.s.join == "early":
            g = g.transpose(0, 1)
        else:
            g = torch.cat([g.unsqueeze(1).expand(-1, b.config.shape[1], -1), b.config], -1)
        return self.postnet(g).squeeze(-1)


    @torch.no_grad()
    def score_configs(self, g: GraphTensors, ids: np.ndarray, chunk_size: int = 1024,
                      fast: bool = True) -> Tensor:
        if not fast or self.device.type != "cpu":
            return super().score_configs(g, ids, chunk_size)
        return self.config_scorer(g, chunk_size)(g.configs(np.asarray(ids, np.int64)))

    def config_scorer(self, g: GraphTensors, chunk_size: int = 1024,
                      fast: bool = True) -> Callable[[Tensor], Tensor]:
        """The exact fast path: each layer's aggregation one sparse product over a
        node-major state (`fastpath.propagate`). Late join encodes the graph once; early
        join runs configs in cache-sized chunks, its first layer split into the part no
        config changes (computed once) and a per-config part that costs no matmul."""
        if not fast or self.device.type != "cpu":
            return super().config_scorer(g, chunk_size, fast)
        with torch.no_grad():
            b = collate([(g, np.zeros(1, np.int64))])
            edges = b.edge_index[:, b.edge_forward]
            n = b.x.shape[0]
            sage = self.s.backbone == "sage"
            m = csr_tensor((sage_matrix if sage else resgcn_matrix)(edges, n))
            emb = self.opcode(b.opcode)
            if self.s.join == "late":
                pooled = self._layers(torch.cat([emb, b.x], dim=-1), m, 0)  # (hidden,)
                return torch.no_grad()(lambda cfg: self.postnet(torch.cat(
                    [pooled.expand(cfg.shape[0], -1), cfg], dim=-1)).squeeze(-1))
            first = self._first_layer(emb, b.x, m)
        size = state_configs(STATE_BYTES, n, self.s.hidden)

        @torch.no_grad()
        def score(cfg: Tensor) -> Tensor:
            out = [self.postnet(self._layers(first(cfg[i:i + size]), m, 1)).squeeze(-1)
                   for i in range(0, cfg.shape[0], size)]
            return torch.cat(out) if out else torch.zeros(0)

        return score

    def _layers(self, h: Tensor, m: Tensor, start: int) -> Tensor:
        """Node-major states (N, ..., ·) through the network from stage `start` (0: the
        input, 1: the first Dense layer done) to the sum-pooled (..., hidden)."""
        if self.prenet is not None:  # resgcn: prenet, residual layers, σ
            dense = self.prenet.layers
            h = dense[0](h) if start == 0 else h
            for layer in dense[1:]:
                h = layer(act(h))
            for conv in self.convs:
                h = conv.combine(propagate(m, act(h)), h)
            return act(h).sum(0)
        for conv in list(self.convs)[start:]:
            h = conv.combine(propagate(m, h), h)
        return h.sum(0)

    def _first_layer(self, emb: Tensor, x: Tensor,
                     m: Tensor) -> Callable[[Tensor], Tensor]:
        """Configs (C, F) → node-major states (N, C, hidden) after the first Dense layer
        of the early-join input [emb ‖ cfg ‖ f], from W·input = W_node·[emb ‖ f] +
        W_cfg·cfg: the node part is computed here, once."""
        de, dc = emb.shape[1], self.config_dim
        node = torch.cat([emb, x], dim=-1)

        def split(w: Tensor) -> tuple[Tensor, Tensor]:  # columns of [emb ‖ cfg ‖ f]
            return torch.cat([w[:, :de], w[:, de + dc:]], dim=1), w[:, de:de + dc]

        if self.prenet is not None:
            lin = self.prenet.layers[0]
            w_node, w_cfg = split(lin.weight)
            fixed = node @ w_node.t() + lin.bias
            return lambda cfg: fixed[:, None] + (cfg @ w_cfg.t())[None]
        lin, d = self.convs[0].lin, self.convs[0].lin.in_features // 2
        (wn_node, wn_cfg), (wx_node, wx_cfg) = split(lin.weight[:, :d]), split(lin.weight[:, d:])
        fixed = propagate(m, node) @ wn_node.t() + node @ wx_node.t() + lin.bias
        deg = propagate(m, torch.ones(node.shape[0], 1))  # (A + Aᵀ)·1: each node's degree

        def first(cfg: Tensor) -> Tensor:  # nbr of the cfg columns is deg · cfg
            pre = fixed[:, None] + deg[:, :, None] * (cfg @ wn_cfg.t())[None] \
                + (cfg @ wx_cfg.t())[None]
            return nn.functional.normalize(act(pre), dim=-1, eps=1e-6)

        return first


@dataclass
class TileMLPSettings:
    hidden: int = 64  # hidden layer size
    opcode_dim: int = 32  # opcode embedding size
    mlp_layers: int = 2  # hidden Dense layers before the output
    num_ops: int = 121  # opcode vocabulary: ids 0..120 (docs/design.md §3)
    l2: float = 1e-4  # L2 on Dense kernels and on the opcode embedding's output
    RULES: ClassVar[dict[str, fields.Rule]] = OFFICIAL_RULES


class TileMLP(_Official):
    r"""No message passing: s = MLP([Σ_v f_v ‖ Σ_v emb(op_v) ‖ cfg]), sums over the
    graph's nodes, MLP Dense-σ-Dense-σ-Dense→1."""

    def __init__(self, kind: str, s: TileMLPSettings, node_dim: int, config_dim: int):
        super().__init__(s.num_ops, s.opcode_dim, s.l2)
        self.s = s
        self.mlp = DenseStack(node_dim + s.opcode_dim + config_dim,
                              [s.hidden] * s.mlp_layers + [1])

    def forward(self, b: Batch) -> Tensor:
        pooled = torch.cat([pool_own("sum", b.x, b.node_graph, b.num_graphs),
                            pool_own("sum", self.embed(b), b.node_graph, b.num_graphs)], -1)
        pooled = pooled.unsqueeze(1).expand(-1, b.config.shape[1], -1)
        return self.mlp(torch.cat([pooled, b.config], dim=-1)).squeeze(-1)
