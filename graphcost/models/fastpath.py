"""Exact fast scoring of layout configs: the same states as a network's forward pass,
computed with less work.

A layout network whose configs join at their nodes and then pass messages over one
graph is, for scoring, a stack of node-wise functions around linear aggregations
y ↦ A y with one sparse (N, N) matrix A. `LayoutLayers` is that view of a network
(the ranker and ResModel implement it); `LayoutEngine` scores configs through it on
two exact paths, picked per config:

- **batched**: a chunk of configs in one node-major (N, C, d) state, so A is one
  sparse-dense product over (N, C·d) instead of a gather and a scatter per config, and
  the chunk is sized to stay in the core's cache (`STATE_BYTES`);
- **local**: a config differing from a base config at a few configurable nodes only
  changes, after layer l, the states of nodes within l hops of them. Every state of the
  base config is computed once; a local config recomputes only those regions, layer by
  layer, as differences from the base: agg' = agg_base + A (y' − y_base). Pooled sums
  follow the same way; a max pools the region with the largest base values outside it
  (a per-dimension order of the base's final states).

The base of a chunk is, at each configurable node, the value most of its configs have
(`base_config`): the compiler default for configs made by local moves from it, the
reference config for configs mutated from one. Configs whose regions are too large for
the local path to pay go the batched path (`LOCAL_SHARE`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor

from graphcost.models.base import GraphTensors

STATE_BYTES = 1 << 20  # batched path: (N, C, d) state bytes per thread (`state_configs`)
MAX_CHANGED = 32  # local path only for configs changing at most this many nodes
LOCAL_SHARE = 0.5  # ... and whose regions hold under this share of a full pass's rows
ROW_BUDGET = 1 << 16  # local path: rows (config, node) per pass
MASK_BUDGET = 1 << 24  # ... and configs × nodes per pass (a region membership mask)


@dataclass
class Rows:
    """Node states of some configs, one row per (config, node)."""

    config: Tensor  # (R,) index of the row's config in the chunk
    node: Tensor  # (R,) the row's node
    k: Tensor  # (R,) index of the node among the configurable nodes, −1 elsewhere
    cfg: Tensor  # (R, F) the config's entries at the node (zeros where k < 0)

    @property
    def on_config(self) -> Tensor:
        return self.k >= 0


class LayoutLayers(Protocol):
    """A layout network as node-wise steps around the linear aggregation A y."""

    layers: int
    width: int  # the widest per-node state (sizes the batched path's chunks)
    uses_max: bool  # whether `readout` reads the max over nodes

    def adjacency(self, g: GraphTensors) -> sp.csr_matrix:
        """A (N, N): agg_v = Σ_u A[v, u] y_u (self loops included where the layer has them)."""

    def start(self, r: Rows) -> Tensor:
        """(R, d) layer-0 states of the rows (configs joined at their nodes)."""

    def pre(self, layer: int, h: Tensor, r: Rows) -> Tensor:
        """(R, d_y) what layer `layer` aggregates, from the rows' states before it."""

    def post(self, layer: int, agg: Tensor, y: Tensor, h: Tensor, r: Rows) -> Tensor:
        """(R, d) the rows' states after layer `layer`."""

    def readout(self, total: Tensor, on_config: Tensor, top: Tensor | None,
                nodes: int, config_nodes: int) -> Tensor:
        """(C, ·) per-config outputs from the final states' sum over all nodes, sum over
        configurable nodes and max over all nodes (None unless `uses_max`)."""


@dataclass
class _Base:
    """Every state of one config (the base of the local path)."""

    key: bytes  # the config's (K, F) entries as bytes
    h: list[Tensor]  # states after each layer, h[0] the joined inputs: (N, d)
    y: list[Tensor]  # y[l] (N, d_y): what layer l aggregates (y[0] unused)
    agg: list[Tensor]  # agg[l] = A y[l]
    total: Tensor  # (d,) final states summed over nodes
    on_config: Tensor  # (d,) summed over configurable nodes
    order: Tensor | None  # (N, d) nodes by final state, largest first, per dimension


def csr_tensor(a: sp.spmatrix) -> Tensor:
    """A scipy sparse matrix as a float32 torch CSR tensor (duplicates summed), for
    node-major products `a @ x.reshape(N, -1)`: one pass over the edges for every config
    and feature at once."""
    a = sp.csr_matrix(a, dtype=np.float32)
    a.sum_duplicates()
    with warnings.catch_warnings():  # "sparse CSR support is in beta": one product is
        warnings.simplefilter("ignore")  # used, and the exactness tests check it
        return torch.sparse_csr_tensor(
            torch.from_numpy(a.indptr).long(), torch.from_numpy(a.indices).long(),
            torch.from_numpy(a.data), a.shape, check_invariants=False)


def state_configs(state_bytes: int, nodes: int, width: int) -> int:
    """Configs per batched chunk: a node-major state of `state_bytes` per thread (each
    thread's share of an op then stays in its core's cache; measured best at 1 MiB on
    one thread and 2 MiB on two, on a 788-node graph)."""
    return max(1, state_bytes * torch.get_num_threads() // (4 * nodes * width))


def propagate(a: Tensor, x: Tensor) -> Tensor:
    """a (N, N) CSR times node-major x (N, ...): every trailing axis in one product, in
    a's precision (autocast left out of the sparse product)."""
    with torch.autocast(x.device.type, enabled=False):
        return (a @ x.reshape(x.shape[0], -1).to(a.dtype)).reshape(x.shape).to(x.dtype)


def row_codes(rows: Tensor) -> Tensor:
    """(...) int64 hashes of rows (..., F) of floats: equal rows, equal codes (exact
    integer arithmetic on their bits, wrapping); unequal rows rarely collide."""
    bits = (rows.float() + 0.0).contiguous().view(torch.int32).long()  # −0.0 reads as 0.0
    mult = torch.from_numpy(np.random.default_rng(0).integers(1, 2**62, rows.shape[-1]) | 1)
    return (bits * mult).sum(-1)


def base_config(configs: Tensor) -> Tensor:
    """(K, F): at each configurable node, the entry row most of `configs` (C, K, F) have
    (a rare hash collision only picks a less common base, never a wrong score)."""
    _, at = torch.mode(row_codes(configs), dim=0)  # a config holding each node's commonest row
    return configs[at, torch.arange(configs.shape[1])]


class LayoutEngine:
    """Scores of layout configs of one graph through `net` (a `LayoutLayers`), exact."""

    def __init__(self, net: LayoutLayers, g: GraphTensors, state_bytes: int = STATE_BYTES):
        self.net = net
        self.n = int(g.x.shape[0])
        self.config_nodes = g.config_nodes
        self.kidx = torch.full((self.n,), -1, dtype=torch.long)
        self.kidx[g.config_nodes] = torch.arange(g.config_nodes.numel())
        a = net.adjacency(g).tocsr()
        a.sum_duplicates()
        self.a = csr_tensor(a)
        self.at = a.T.tocsr()  # column u of A: who hears node u, with weights
        self.at.sort_indices()
        reach = (a != 0).astype(np.float32) + sp.identity(self.n, np.float32, "csr")
        self.reach_t = reach.T.tocsr()  # S_l = S_{l-1} · reachᵀ: one more hop
        self.state_bytes = state_bytes
        self._base: _Base | None = None
        self.used = {"batched": 0, "local": 0}  # configs scored by each path

    # -- the batched path --------------------------------------------------------------

    def _rows_all(self, configs: Tensor) -> Rows:
        """Rows of every node for C configs, node-major: row v·C + c."""
        c, n = configs.shape[0], self.n
        node = torch.arange(n).repeat_interleave(c)
        cfg = configs.new_zeros(n, c, configs.shape[-1])
        cfg[self.config_nodes] = configs.transpose(0, 1)
        return Rows(config=torch.arange(c).repeat(n), node=node, k=self.kidx[node],
                    cfg=cfg.reshape(n * c, -1))

    def _full(self, configs: Tensor, keep: bool = False) -> tuple[Tensor, ...]:
        """Final sums / max of C configs on every node; with `keep`, also every layer's
        states, aggregation inputs and outputs (one config: a base)."""
        c, n, net = configs.shape[0], self.n, self.net
        r = self._rows_all(configs)
        h = net.start(r)
        hs, ys, aggs = [h], [h[:0]], [h[:0]]
        for layer in range(1, net.layers + 1):
            y = net.pre(layer, h, r)
            agg = propagate(self.a, y.reshape(n, -1)).reshape(n * c, -1)
            h = net.post(layer, agg, y, h, r)
            if keep:
                hs.append(h)
                ys.append(y)
                aggs.append(agg)
        final = h.reshape(n, c, -1)
        total = final.sum(0)
        on_config = final[self.config_nodes].sum(0)
        top = final.amax(0) if net.uses_max else None
        return (total, on_config, top, hs, ys, aggs) if keep else (total, on_config, top)

    def batched(self, configs: Tensor) -> Tensor:
        """Outputs of configs (C, K, F) in chunks of one cache-sized state each."""
        size = state_configs(self.state_bytes, self.n, self.net.width)
        out = []
        for i in range(0, configs.shape[0], size):
            total, on_config, top = self._full(configs[i:i + size])
            out.append(self._readout(total, on_config, top))
        self.used["batched"] += configs.shape[0]
        return torch.cat(out)

    def _readout(self, total: Tensor, on_config: Tensor, top: Tensor | None) -> Tensor:
        return self.net.readout(total, on_config, top, self.n, int(self.config_nodes.numel()))

    # -- the local path ----------------------------------------------------------------

    def base(self, config: Tensor) -> _Base:
        """Every state of `config` (K, F), kept for the next call with the same base."""
        key = config.numpy().tobytes()
        if self._base is None or self._base.key != key:
            total, on_config, _, hs, ys, aggs = self._full(config.unsqueeze(0), keep=True)
            order = hs[-1].argsort(dim=0, descending=True) if self.net.uses_max else None
            self._base = _Base(key, hs, ys, aggs, total[0], on_config[0], order)
        return self._base

    def _regions(self, changed: np.ndarray) -> list[sp.csr_matrix]:
        """S_l (Q, N) for l = 0..layers: nodes within l hops of each config's changed
        configurable nodes (`changed` (Q, K) bool), rows sorted."""
        q, kk = np.nonzero(changed)
        s = sp.csr_matrix((np.ones(q.size, np.float32), (q, self.config_nodes.numpy()[kk])),
                          shape=(changed.shape[0], self.n))
        out = [s]
        for _ in range(self.net.layers):
            s = (out[-1] @ self.reach_t).tocsr()
            s.data[:] = 1
            out.append(s)
        for s in out:
            s.sort_indices()
        return out

    def _rows(self, s: sp.csr_matrix, configs: Tensor) -> Rows:
        q = torch.from_numpy(np.repeat(np.arange(s.shape[0]), np.diff(s.indptr)))
        node = torch.from_numpy(s.indices.astype(np.int64))
        k = self.kidx[node]
        cfg = configs.new_zeros(node.numel(), configs.shape[-1])
        on = k >= 0
        cfg[on] = configs[q[on], k[on]]
        return Rows(config=q, node=node, k=k, cfg=cfg)

    def local(self, configs: Tensor, base: _Base, regions: list[sp.csr_matrix]) -> Tensor:
        """Outputs of configs (Q, K, F) recomputed inside their regions only."""
        net, n = self.net, self.n
        rows = [self._rows(s, configs) for s in regions]
        keys = [(r.config * n + r.node).numpy() for r in rows]
        h = net.start(rows[0])
        for layer in range(1, net.layers + 1):
            prev, cur = rows[layer - 1], rows[layer]
            h_cur = base.h[layer - 1][cur.node]  # states entering the layer ...
            at = np.searchsorted(keys[layer], keys[layer - 1])  # prev ⊆ cur
            h_cur[torch.from_numpy(at)] = h  # ... recomputed where the region was
            y = net.pre(layer, h_cur, cur)
            dy = y[torch.from_numpy(at)] - base.y[layer][prev.node]
            agg = base.agg[layer][cur.node]
            src, dst, w = self._spread(prev, keys[layer])
            agg.index_add_(0, dst, dy[src] * w.unsqueeze(1))
            h = net.post(layer, agg, y, h_cur, cur)
        last = rows[-1]
        q = configs.shape[0]
        diff = h - base.h[-1][last.node]
        total = base.total.expand(q, -1).clone().index_add_(0, last.config, diff)
        on = last.on_config
        on_config = base.on_config.expand(q, -1).clone().index_add_(
            0, last.config[on], diff[on])
        top = self._max_outside(last, base, q, h) if net.uses_max else None
        self.used["local"] += q
        return self._readout(total, on_config, top)

    def _spread(self, prev: Rows, cur_keys: np.ndarray) -> tuple[Tensor, Tensor, Tensor]:
        """Edges carrying a change: prev row → each cur row of the same config whose
        node hears prev's node, with the weight A[v, u]."""
        u = prev.node.numpy()
        lo, hi = self.at.indptr[u], self.at.indptr[u + 1]
        count = hi - lo
        src = np.repeat(np.arange(u.size), count)
        pos = np.repeat(lo - np.cumsum(count) + count, count) + np.arange(count.sum())
        v = self.at.indices[pos]
        dst = np.searchsorted(cur_keys, prev.config.numpy()[src] * self.n + v)
        return (torch.from_numpy(src), torch.from_numpy(dst),
                torch.from_numpy(self.at.data[pos].astype(np.float32)))

    def _max_outside(self, last: Rows, base: _Base, q: int, h: Tensor) -> Tensor:
        """Per config, the max over nodes of its final states: the region's rows against
        the largest base state of a node outside the region, found among the first few
        of the base's per-dimension order (all of it where those are inside)."""
        inside = torch.full((q, h.shape[1]), float("-inf")).scatter_reduce_(
            0, last.config.unsqueeze(1).expand_as(h), h, "amax")
        member = torch.zeros(q, self.n, dtype=torch.bool)
        member[last.config, last.node] = True
        sizes = np.bincount(last.config.numpy(), minlength=q)
        d = h.shape[1]
        order = base.order  # (N, d)
        first = torch.zeros(q, d, dtype=torch.long)
        unresolved = torch.ones(q, d, dtype=torch.bool)
        for t in (8, min(self.n, int(sizes.max()) + 1)):
            qq, jj = unresolved.nonzero(as_tuple=True)
            cand = order[:t, jj].t()  # (P, t) candidate nodes of each unresolved pair
            free = ~member[qq.unsqueeze(1), cand]
            found = free.any(1)
            first[qq[found], jj[found]] = free[found].int().argmax(1)
            unresolved[qq[found], jj[found]] = False
            if not unresolved.any():
                break
        node = order.gather(0, first)  # (Q, d) the largest node outside each region
        outside = base.h[-1].gather(0, node).masked_fill(unresolved, float("-inf"))
        return torch.maximum(inside, outside)  # unresolved: the region holds every node

    # -- both --------------------------------------------------------------------------

    @torch.inference_mode()
    def __call__(self, configs: Tensor) -> Tensor:
        """Outputs of configs (C, K, F), each by the cheaper exact path."""
        configs = configs.float()
        c = configs.shape[0]
        if c == 0 or self.config_nodes.numel() == 0:
            return self.batched(configs)
        base = base_config(configs)
        changed = (configs != base).any(-1).numpy()  # (C, K)
        small = np.flatnonzero(changed.sum(1) <= MAX_CHANGED)
        local_ids = np.zeros(0, np.int64)
        regions = None
        if small.size:
            regions = self._regions(changed[small])
            work = sum(np.diff(s.indptr) for s in regions[1:])
            fits = work < LOCAL_SHARE * self.net.layers * self.n
            local_ids, regions = small[fits], [s[fits] for s in regions]
        out: Tensor | None = None
        rest = np.setdiff1d(np.arange(c), local_ids)
        if local_ids.size:
            b = self.base(base)
            parts = []
            per = max(1, min(ROW_BUDGET // max(1, regions[-1].nnz // local_ids.size),
                             MASK_BUDGET // self.n))
            for i in range(0, local_ids.size, per):
                parts.append(self.local(configs[local_ids[i:i + per]], b,
                                        [s[i:i + per] for s in regions]))
            done = torch.cat(parts)
            out = done.new_empty((c, *done.shape[1:]))
            out[torch.from_numpy(local_ids)] = done
        if rest.size:
            done = self.batched(configs[torch.from_numpy(rest)])
            if out is None:
                return done
            out[torch.from_numpy(rest)] = done
        return out
