"""The default ranker: one readable module, settings in one dataclass.

Pipeline for a layout graph (the tile variant differs only where noted):

1. Data transforms: while loops made visible (`loops`, `graphcost.data.loops`), then
   the configurable nodes' `prune_hops`-hop neighbourhood kept (`.prune`).
2. Node inputs: features ‖ loop depth (`loops`) ‖ opcode embedding → MLP → h⁰ (N, d).
3. Configs joined at their nodes: at each configurable node, h⁰ += MLP([h⁰ ‖ cfg]) for
   every config, giving an (N, C, d) state over the one shared edge_index. The 18
   minor-to-major entries are categorical (−1..5), so cfg is their one-hot code plus
   the log-size of the tensor dimension each entry names (`layout_features`): what
   a layout does physically is put a dimension of some size minor-most.
   Tile: configs are graph-level. By default (`tile_join='early'`) MLP(cfg) is added to
   every node state before the GNN (an (N, C, d) state, as for layouts) and joins again
   after pooling, MLP([pool ‖ MLP(cfg)]); with 'late' the graph is encoded once (N, d)
   and the config joins after pooling only.
4. A residual GNN stack: h ← h + GELU(SAGEConv(LayerNorm(h))), `layers` times, on a
   node-major state (N, C, d), its dropout mask shared by a node's configs (layout)
   (`directed`: one weight for operands' messages, one for users'; it measured worse).
5. Pooling: [mean ‖ max over all nodes ‖ mean over configurable nodes] → d.
6. Cross-configuration attention: each config's embedding attends to the other
   configs of its graph (a pre-norm transformer block, `attn_layers` of them), so the
   model scores a config relative to its alternatives.
7. Head: LayerNorm → MLP → one score; LOWER = FASTER.
8. Optionally a rule underneath (`prior`, issue 31): a heuristic baseline's score,
   squashed and times a learned weight (`heuristics.Prior`), is added to the head's,
   whose last layer starts at zero, so training starts from the rule and learns a
   correction on top of it. At prediction the correction is weighted by `correction`
   (1: as trained; 0: the rule alone), a shrinkage chosen on sources never trained on.

Chunk-order independence at full size: during training the C sampled configs attend
to each other. At prediction a graph's configs may be far too many for one pass, so
every config attends to itself and to FIXED REFERENCE SETS of `ref_configs` configs
of its graph (`reference_sets`: `ref_sets` seeded choices that depend only on the
graph's number of configs; a query never sees itself twice), its score the mean over
the sets. A config's score therefore depends only on the config and the graph, never
on which chunk it was scored in, the chunk size, the order of chunks, or which other
configs were asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv, global_max_pool
from torch_geometric.nn import global_mean_pool as mean_pool

from graphcost import fields
from graphcost.data.loops import LOOP_FEATURES
from graphcost.models.base import (
    NUM_OPCODES,
    Batch,
    GraphTensors,
    RankingNet,
    chunk_limit,
    collate,
    mlp,
    pool_own,
)
from graphcost.models.fastpath import (
    STATE_BYTES,
    LayoutEngine,
    csr_tensor,
    propagate,
    row_codes,
    state_configs,
)
from graphcost.models.heuristics import PRIORS, Prior
from graphcost.models.ranker_layers import (
    CHANGE_FEATURES,
    LAYOUT_FEATURES,
    CrossConfigAttention,
    DirectedSAGEConv,
    RankerLayers,
    layout_features,
    mean_adjacency,
)
from graphcost.models.segments import is_segmented, split_segments


@dataclass
class RankerSettings:
    # node state size. 128 ranks better (leave-family-out, demo settings: +0.016
    # [+0.008, +0.025] τ on layout:cpu:default, +0.007 [−0.005, +0.020] on random) but
    # scores random layout configs 2.7× slower on the fast path (1k nodes, 1 thread:
    # 949 → 357 configs/s), so 64 stays the default (docs/notebook/2026-11.md)
    hidden: int = 64
    opcode_dim: int = 32  # opcode embedding size
    layers: int = 3  # residual SAGE layers
    dropout: float = 0.1  # dropout probability in training
    prune_hops: int = 2  # layout: keep configurable nodes and k-hop neighbours; −1: keep all
    attn_layers: int = 1  # cross-config transformer blocks; 0 disables the attention
    heads: int = 4  # attention heads; hidden must be a multiple
    ref_configs: int = 32  # reference set size at prediction (≈ configs per graph in training)
    ref_sets: int = 1  # reference sets at prediction; a score is the mean over them
    segment_size: int = 0  # layout: segments of ~this many nodes; 0: whole graph (GST: 1000)
    segment_halo: int = -1  # hops of context around a segment; −1: `layers` (exact node states)
    # separate weights for messages from users and from operands (DirectedSAGEConv). Off:
    # leave-family-out, 5 folds × 3 seeds, demo settings, paired over the same graphs,
    # directed minus undirected was τ −0.027 [−0.045, −0.011] on layout:cpu:default,
    # −0.006 [−0.019, +0.008] on layout:cpu:random, tile score +0.002 [−0.008, +0.014]
    # on options:cpu
    directed: bool = False
    # tile: where the config joins. 'early': added to every node state before the GNN,
    # so message passing sees the config (a GNN pass per config, as the official
    # EarlyJoinSAGE); 'late': after the graph is encoded and pooled, once per graph.
    # Leave-family-out on options:cpu, 5 folds × 3 seeds, demo settings: early minus late
    # tile score +0.028 [+0.010, +0.051], early minus EarlyJoinSAGE +0.000 [−0.012, +0.015]
    tile_join: str = "early"
    # a rule to learn a correction on top of (step 8): "fewest-changes", "moved-bytes" or
    # "changed-bytes" (layout), "config-only" (tile); each kind's default in
    # `models.registry`; "": none, the ranker learns from scratch
    prior: str = ""
    # with a prior: the weight of the learned correction when configs are scored (step
    # 8); the training loss always uses 1
    correction: float = 1.0
    change_features: bool = False  # layout: per role, changed order or not (`layout_features`)
    loops: bool = False  # layout: loop edges and depths (`data.loops`); on by default
    # what a checkpoint written before a setting existed was trained with
    BEFORE: ClassVar[dict[str, Any]] = {"tile_join": "late", "loops": False}
    # settings only one kind's network reads (`Model` refuses them for the other kind)
    KINDS: ClassVar[dict[str, str]] = {
        "tile_join": "tile", "change_features": "layout", "prune_hops": "layout",
        "loops": "layout", "segment_size": "layout", "segment_halo": "layout"}
    RULES: ClassVar[dict[str, fields.Rule]] = {
        "hidden": fields.AT_LEAST_1, "opcode_dim": fields.AT_LEAST_1,
        "layers": fields.AT_LEAST_1, "dropout": fields.FRACTION,
        "prune_hops": fields.AT_LEAST_MINUS_1, "attn_layers": fields.NON_NEGATIVE,
        "heads": fields.AT_LEAST_1, "ref_configs": fields.AT_LEAST_1,
        "ref_sets": fields.AT_LEAST_1, "segment_size": fields.NON_NEGATIVE,
        "segment_halo": fields.AT_LEAST_MINUS_1, "tile_join": fields.one_of("early", "late"),
        "prior": fields.one_of("", *PRIORS), "correction": fields.NON_NEGATIVE}


def reference_sets(num_configs: int, size: int, sets: int = 1) -> list[np.ndarray]:
    """The fixed reference sets of a graph, functions of its config count alone: `sets`
    seeded draws of `size` configs (one set of all when there are no more than `size`)."""
    if num_configs <= size:
        return [np.arange(num_configs)]
    return [np.sort(np.random.default_rng(i).choice(num_configs, size, replace=False))
            for i in range(sets)]


class Ranker(RankingNet):
    """The default ranker (see the module docstring); `kind` picks the tile variant."""

    def __init__(self, kind: str, s: RankerSettings, node_dim: int, config_dim: int):
        super().__init__()
        d = s.hidden
        self.kind, self.s = kind, s
        self.opcode = nn.Embedding(NUM_OPCODES, s.opcode_dim)
        loops = LOOP_FEATURES if s.loops else 0  # a layout-only setting
        self.node_in = mlp(node_dim + loops + s.opcode_dim, d, d, s.dropout)
        if kind == "layout":
            extra = CHANGE_FEATURES if s.change_features else 0
            self.join = mlp(d + LAYOUT_FEATURES + extra, d, d, s.dropout)
            self.pool = nn.Linear(3 * d, d)
        else:
            self.config_in = mlp(config_dim, d, d, s.dropout)
            self.join = mlp(2 * d + d, d, d, s.dropout)
        self.convs = nn.ModuleList((DirectedSAGEConv(d) if s.directed else SAGEConv(d, d))
                                   for _ in range(s.layers))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(s.layers))
        self.attn = nn.ModuleList(CrossConfigAttention(d, s.heads, s.dropout)
                                  for _ in range(s.attn_layers))
        self.head = nn.Sequential(nn.LayerNorm(d), mlp(d, d, 1, s.dropout))
        self.drop = nn.Dropout(s.dropout)
        self.prior = Prior(s.prior, kind, node_dim, config_dim) if s.prior else None
        if self.prior is not None:  # start from the rule alone
            nn.init.zeros_(self.head[1].lins[-1].weight)
            nn.init.zeros_(self.head[1].lins[-1].bias)

    def fit_prior(self, graphs: Iterable[GraphTensors]) -> str | None:
        return self.prior.fit(graphs) if self.prior is not None else None

    def _gnn(self, h: Tensor, b: Batch) -> Tensor:
        """The GNN stack (step 4) on a node-major state (N, ..., d): every config's pass
        over the batch's one graph structure at once."""
        if not self.s.directed:
            return self.node_major_gnn(h, csr_tensor(mean_adjacency(b)).to(h.device))
        if b.edge_forward is None:
            raise ValueError("a directed ranker needs edge directions (Batch.edge_forward)")
        for conv, norm in zip(self.convs, self.norms, strict=True):  # PyG: nodes on dim −2
            x = norm(h).movedim(0, -2)
            h = h + self.node_dropout(nn.functional.gelu(
                conv(x, b.edge_index, b.edge_forward).movedim(-2, 0)))
        return h

    def embed(self, b: Batch) -> Tensor:
        """(B, C, d) per-config embeddings; configs do not interact here."""
        return self.embed_configs(b, self.graph_state(b), b.config)

    def graph_state(self, b: Batch) -> Tensor:
        """The part of `embed` no config changes, so autotuning computes it once per
        program: h⁰ (N, d) for layout and early-join tile, the pooled graph (B, 2d) for
        late-join tile."""
        h0 = self.node_state(b)
        if self.kind == "layout" or self.s.tile_join == "early":
            return h0
        h = self._gnn(h0, b)
        return torch.cat([mean_pool(h, b.node_graph, b.num_graphs),
                          global_max_pool(h, b.node_graph, b.num_graphs)], -1)  # (B, 2d)

    def node_state(self, b: Batch) -> Tensor:
        """h⁰ (N, d): each node's features and opcode embedding through `node_in`."""
        return self.node_in(torch.cat([b.x, self.opcode(b.opcode)], dim=-1))

    @torch.no_grad()
    def tile_state(self, g: GraphTensors) -> Tensor:
        """`graph_state` of a late-join tile graph (1, 2d), computed once per graph when
        scoring (`node_major_gnn`)."""
        h = self.node_state(collate([(g, np.zeros(1, np.int64))]))
        h = self.node_major_gnn(h, csr_tensor(mean_adjacency(g)))
        return torch.cat([h.mean(0), h.amax(0)]).unsqueeze(0)

    def node_major_gnn(self, h: Tensor, a: Tensor) -> Tensor:
        """`_gnn` (undirected) on a node-major state (N, ..., d), each layer's mean
        aggregation one sparse product over every trailing axis (`fastpath.propagate`):
        8× faster than PyG's gather and scatter over a (C, N, d) state, backward included
        (16 configs of 3,000 nodes, 1 core)."""
        for i, norm in enumerate(self.norms):
            y = norm(h)
            h = self.sage_step(i, h, y, propagate(a, y))
        return h

    @torch.no_grad()
    def _early_tile_embedder(self, g: GraphTensors) -> Callable[[Tensor], Tensor]:
        """Configs (C, F) → (1, C, d) for the early-join tile ranker: h⁰ once, then every
        config's GNN pass together as one node-major (N, c, d) state, c configs at a time
        (`fastpath.state_configs`: a cache-sized state)."""
        h0 = self.node_state(collate([(g, np.zeros(1, np.int64))]))  # (N, d)
        a = csr_tensor(mean_adjacency(g))
        step = state_configs(STATE_BYTES, h0.shape[0], self.s.hidden)

        def embed(cfg: Tensor) -> Tensor:
            c = self.config_in(cfg)  # (C, d)
            pooled = []
            for i in range(0, len(c), step):
                h = self.node_major_gnn(h0.unsqueeze(1) + c[i:i + step].unsqueeze(0), a)
                pooled.append(torch.cat([h.mean(0), h.amax(0)], -1))  # (c, 2d)
            return self.join(torch.cat([torch.cat(pooled), c], -1)).unsqueeze(0)

        return embed

    def sage_step(self, i: int, h: Tensor, y: Tensor, agg: Tensor) -> Tensor:
        """Layer i of `_gnn` given y = LayerNorm(h) and agg, the mean of y over each
        node's neighbours, however computed: h + GELU(W_l·agg + W_r·y) (undirected),
        dropout in training."""
        conv = self.convs[i]
        return h + self.node_dropout(nn.functional.gelu(conv.lin_l(agg) + conv.lin_r(y)))

    def node_dropout(self, u: Tensor) -> Tensor:
        """Dropout of a node-major update (N, ..., d) in training; for layouts one mask
        per node and feature, shared by all of a node's configs: a Bernoulli draw per
        element of a (N, C, d) state cost 6× the layer's own linear map (3,000 nodes × 16
        configs, 1 core), and the configs a graph's ranking compares see the same noise.
        Level with a mask per element on both layout collections (docs/notebook/2026-11.md); the
        tile ranker, where it is not measured, keeps a mask per element."""
        if not self.training or self.s.dropout == 0:
            return u
        if self.kind == "tile":
            return self.drop(u)
        return u * self.drop(u.new_ones(u.shape[0], *[1] * (u.dim() - 2), u.shape[-1]))

    @property
    def _graph_once(self) -> bool:
        """Late-join tile: the graph is encoded once and no state grows with configs."""
        return self.kind == "tile" and self.s.tile_join == "late"

    @property
    def segment_halo(self) -> int:
        return self.s.segment_halo if self.s.segment_halo >= 0 else self.s.layers

    def embed_configs(self, b: Batch, state: Tensor, config: Tensor,
                      share: Tensor | None = None) -> Tensor:
        """(B, C, d) embeddings of `config` (shaped like `b.config`) on `graph_state(b)`;
        `share` (B, 2) weights segments so that they add up to their graph (see
        `encode_segment`)."""
        if self.kind == "tile":
            cfg = self.config_in(config)  # (B, C, d)
            if self.s.tile_join == "early":  # state is h⁰ (N, d): a GNN pass per config
                at = torch.cat([cfg, cfg.new_zeros(1, *cfg.shape[1:])])  # halo index B: 0
                h = self._gnn(state.unsqueeze(1) + at[b.node_graph], b)  # (N, C, d)
                state = torch.cat([pool_own("mean", h, b.node_graph, b.num_graphs, 0),
                                   pool_own("max", h, b.node_graph, b.num_graphs, 0)],
                                  -1)  # (B, C, 2d)
                return self.join(torch.cat([state, cfg], -1))
            g = state.unsqueeze(1).expand(-1, cfg.shape[1], -1)
            return self.join(torch.cat([g, cfg], -1))
        h0, c = state, config.shape[0]
        at = h0[b.config_nodes].expand(c, -1, -1)  # (C, K, d)
        cfg = layout_features(config, b.config_dims, b.config_own,
                              b.config_bytes if self.s.change_features else None)
        delta = self.join(torch.cat([at, cfg], dim=-1)).transpose(0, 1)  # (K, C, d)
        h = self._gnn(h0.unsqueeze(1).expand(-1, c, -1).index_add(0, b.config_nodes, delta),
                      b)  # (N, C, d)
        parts = [pool_own("mean", h, b.node_graph, b.num_graphs, 0),
                 pool_own("max", h, b.node_graph, b.num_graphs, 0),
                 pool_own("mean", h[b.config_nodes], b.config_graph, b.num_graphs, 0)]
        if share is None:
            return self.pool(torch.cat(parts, -1))  # (B, C, d)
        nodes, configs = (share[:, i].to(h.dtype)[:, None, None] for i in range(2))
        out = self.pool(torch.cat([parts[0] * nodes, parts[1] * nodes, parts[2] * configs], -1))
        return out + (nodes - 1) * self.pool.bias

    def forward(self, b: Batch) -> Tensor:
        """Training scores (B, C): the sampled configs of each graph attend to each other."""
        scores = self.score_embedding(self.embed(b), b.mask)
        return scores if self.prior is None else scores + self.prior(b)

    def _corrected(self, head: Tensor, prior: Tensor | int) -> Tensor:
        """Scores of configs: the rule plus the learned correction, weighted (step 8)."""
        return head if self.prior is None else self.s.correction * head + prior

    def encode_segment(self, b: Batch, share: Tensor | None = None) -> Tensor:
        """Segment hook (models/segments.py): `embed` of each graph's segment in `b` with
        its pooled parts weighted by `share` (B, 2), the segment's node and config-node
        fractions, and the pooling layer's bias by the node fraction: the segments of a
        graph then sum to its embedding (its max part to a weighted mean of maxima)."""
        return self.embed_configs(b, self.graph_state(b), b.config, share)

    def score_embedding(self, h: Tensor, mask: Tensor) -> Tensor:
        """The head (cross-config attention, then MLP): (B, C, d) embeddings → (B, C)."""
        same = torch.eye(h.shape[1], dtype=torch.bool, device=h.device).unsqueeze(0)
        for block in self.attn:
            h = block(h, h, same, mask)
        return self.head(h).squeeze(-1)

    def reference_sets(self, num_configs: int) -> list[np.ndarray]:
        """The graph's fixed reference sets at prediction (none without attention)."""
        if not self.attn:
            return []
        return reference_sets(num_configs, self.s.ref_configs, self.s.ref_sets)

    def _reference_states(self, ref: Tensor) -> list[Tensor]:
        """A reference set's embeddings (1, R, d) → its state entering each block."""
        mask = torch.ones(1, ref.shape[1], dtype=torch.bool, device=ref.device)
        eye = torch.eye(ref.shape[1], dtype=torch.bool, device=ref.device).unsqueeze(0)
        states = [ref]
        for block in self.attn:
            states.append(block(states[-1], states[-1], eye, mask))
        return states

    def _head_against(self, h: Tensor, sets: list[list[Tensor]], same: list[Tensor]) -> Tensor:
        """Scores (Q,) of embeddings h (1, Q, d): the head after attending to each
        reference set (`same` hides a query's own entry), averaged over the sets."""
        if not sets:
            return self.head(h).squeeze(-1)[0].float().cpu()
        total = torch.zeros(h.shape[1], device=h.device)
        for states, hide in zip(sets, same, strict=True):
            x, mask = h, torch.ones(1, states[0].shape[1], dtype=torch.bool, device=h.device)
            for block, r in zip(self.attn, states, strict=False):
                x = block(x, r, hide, mask)
            total += self.head(x).squeeze(-1)[0]
        return (total / len(sets)).float().cpu()

    def head_parameters(self) -> list[nn.Parameter]:
        """What `score_embedding` and the rule's weight learn: GST's final phase
        fine-tunes only these."""
        extra = [self.prior.weight] if self.prior is not None else []
        return [*self.attn.parameters(), *self.head.parameters(), *extra]

    def _fast_embedder(self, g: GraphTensors) -> Callable[[Tensor], Tensor] | None:
        """Configs (shaped like `g.configs(ids)`) → (1, C, d) embeddings on the exact
        fast path: late-join tile graphs encoded once (`tile_state`), layout configs through
        `fastpath.LayoutEngine`, early-join tile configs node-major together. None where
        there is none: the directed variant (two aggregations per layer) and segmented
        (GST) encoding."""
        if self.s.directed or is_segmented(g, self.s.segment_size):
            return None
        if self.kind == "tile" and self.s.tile_join == "early":
            return self._early_tile_embedder(g)
        if self.kind == "tile":
            b, state = collate([(g, np.zeros(1, np.int64))]), self.tile_state(g)
            return lambda cfg: self.embed_configs(b, state, cfg.unsqueeze(0))
        with torch.no_grad():
            engine = LayoutEngine(RankerLayers(self, g), g)
        return lambda cfg: engine(cfg).unsqueeze(0)

    @torch.no_grad()
    def score_configs(self, g: GraphTensors, ids: np.ndarray, chunk_size: int = 1024,
                      fast: bool = True) -> Tensor:
        """Scores of configs `ids` of one graph against the fixed reference set; `fast`
        embeds them on the exact fast path where the graph has one. A chunk of
        reference configs reuses their embeddings (a graph of at most `ref_configs`
        configs, as the bundled ones, is embedded once, not twice)."""
        ids = np.asarray(ids, dtype=np.int64)
        dev = self.device
        segments = split_segments(g, self.s.segment_size, self.segment_halo)  # g unless GST
        embed_fast = self._fast_embedder(g) if fast and dev.type == "cpu" else None
        if embed_fast is None or not self._graph_once:  # no node state per config
            chunk_size = chunk_limit(segments.largest, chunk_size)

        def embed(chunk: np.ndarray, configs: Tensor | None = None) -> Tensor:
            if embed_fast is not None:
                return embed_fast(g.configs(chunk) if configs is None else configs)
            return segments.encode(self, chunk)

        def chunks(a: np.ndarray) -> list[np.ndarray]:
            return [a[i:i + chunk_size] for i in range(0, len(a), chunk_size)]

        sets = self.reference_sets(g.num_configs)
        union = np.unique(np.concatenate(sets)) if sets else np.zeros(0, np.int64)
        emb = torch.cat([embed(c) for c in chunks(union)], dim=1) if sets else None
        states = [self._reference_states(emb[:, np.searchsorted(union, r)]) for r in sets]
        rids = [torch.as_tensor(r, device=dev) for r in sets]
        out = []
        for chunk in chunks(ids):
            own = torch.as_tensor(chunk, device=dev)[:, None]
            same = [(own == rid[None, :]).unsqueeze(0) for rid in rids]
            configs = None if self.prior is None else g.configs(chunk)  # read once for both
            prior = 0 if configs is None else self.prior.scores(g, configs).cpu()
            at = np.searchsorted(union, chunk)
            known = emb is not None and bool((at < union.size).all()) and bool(
                (union[np.minimum(at, union.size - 1)] == chunk).all())
            h = emb[:, at] if known else embed(chunk, configs)  # a reference's own, or anew
            out.append(self._corrected(self._head_against(h, states, same), prior))
        return torch.cat(out) if out else torch.zeros(0)

    def config_scorer(self, g: GraphTensors, chunk_size: int = 1024,
                      fast: bool = True) -> Callable[[Tensor], Tensor]:
        """Score configs that need not be in `g`, as `score_configs` scores g's own.

        The batch tensors, `graph_state` and the reference set's states are computed
        here, once; each call then runs only the config-dependent layers (autotuning
        scores thousands of candidates of one program). Configs are shaped like
        `g.configs(ids)`. A query attends to g's reference set with the first reference
        equal to it hidden, so a score depends on the config's values alone; for g's
        own configs that is `score_configs`' own-id masking (unless g repeats a config).
        """
        if is_segmented(g, self.s.segment_size):
            raise ValueError(f"{g.name}: this ranker encodes the graph in segments (GST), "
                             "which config_scorer does not do; use score_configs")
        dev = self.device
        embed_fast = self._fast_embedder(g) if fast and dev.type == "cpu" else None
        tile_fast = embed_fast is not None and self._graph_once  # no node state per config
        size = chunk_size if tile_fast else chunk_limit(g, chunk_size)
        sets = self.reference_sets(g.num_configs)
        with torch.no_grad():
            b = collate([(g, np.zeros(1, np.int64))]).to(dev)
            state = self.graph_state(b) if embed_fast is None else None

            def embed(cfg: Tensor) -> Tensor:
                if embed_fast is not None:
                    return embed_fast(cfg)
                return self.embed_configs(b, state, cfg.unsqueeze(0) if self.kind == "tile"
                                          else cfg)

            def embed_all(cfg: Tensor) -> Tensor:
                return torch.cat([embed(cfg[i:i + size]) for i in range(0, len(cfg), size)],
                                 dim=1)

            ref_cfgs = [g.configs(r).to(dev) for r in sets]
            states = [self._reference_states(embed_all(c)) for c in ref_cfgs]
        flats = [c.reshape(len(c), -1) for c in ref_cfgs]
        codes = [row_codes(f) for f in flats]

        def first_equal(q: Tensor, flat: Tensor, code: Tensor) -> Tensor:
            """(1, Q, R): each query's first equal reference."""
            qi, ri = (row_codes(q)[:, None] == code[None, :]).nonzero(as_tuple=True)
            hit = (q[qi] == flat[ri]).all(1)  # hashes equal: compare the rows
            eq = torch.zeros(q.shape[0], flat.shape[0], dtype=torch.bool, device=q.device)
            eq[qi[hit], ri[hit]] = True
            return (eq & (eq.cumsum(1) == 1)).unsqueeze(0)

        @torch.no_grad()
        def score(configs: Tensor) -> Tensor:
            out = []
            for i in range(0, configs.shape[0], size):
                chunk = configs[i:i + size].to(dev)
                q = chunk.reshape(chunk.shape[0], -1)
                same = [first_equal(q.to(f.dtype), f, c)
                        for f, c in zip(flats, codes, strict=True)]
                prior = 0 if self.prior is None else self.prior.scores(g, chunk).cpu()
                out.append(self._corrected(self._head_against(embed(chunk), states, same), prior))
            return torch.cat(out) if out else torch.zeros(0)

        return score
