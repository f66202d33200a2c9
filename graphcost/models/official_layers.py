"""The layers of the official TpuGraphs baselines (TF-GNN code), written in PyTorch.

The official code (github google-research-datasets/tpu_graphs,
`tpu_graphs/baselines/{layout,tiles}/models.py`) is the spec; docs/design.md §6 summarises it.
Keras defaults that change results are kept: Dense kernels are Glorot-uniform with zero
biases, the opcode embedding is uniform in ±0.05, `leaky_relu` has slope 0.2, and L2
regularisation is a loss term (`penalty`), not decoupled weight decay.

Edges are the graph's `feed` edges in the file's direction, `edge_index[0] → edge_index[1]`
(column 0 → column 1 of the npz `edge_index`), written A[target, source] as the official
`AdjacencyMultiplier` does. Node states may carry a leading config axis, (C, N, d):
every propagation works along dim −2.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch_geometric.utils import scatter

from graphcost import fields

#: the official baselines' training recipe (tpu_graphs/baselines/*/train_args.py and
#: train_lib.py), the training settings they default to: Adam at a constant 1e-3 with
#: per-tensor gradient clipping, no weight decay (L2 is in the model), TF-Ranking's
#: ListMLE, no config dedup, graphs with fewer configs than a step samples dropped,
#: early stopping on validation OPA over freshly sampled configs each epoch. Each kind
#: adds its own: `official_layout.OFFICIAL_LAYOUT`, `official_tile.OFFICIAL_TILE`.
OFFICIAL = dict(optimizer="adam", lr=1e-3, clip="per_tensor", weight_decay=0.0, dedup=False,
                min_configs=-1, select_on="opa", valid_resample=True)
#: value rules of the settings every official model has
OFFICIAL_RULES: dict[str, fields.Rule] = {
    "hidden": fields.AT_LEAST_1, "opcode_dim": fields.AT_LEAST_1,
    "mlp_layers": fields.AT_LEAST_1, "num_ops": fields.AT_LEAST_1, "l2": fields.NON_NEGATIVE}

SLOPE = 0.2  # tf.nn.leaky_relu's default negative slope


def act(x: Tensor) -> Tensor:
    """The official hidden activation: leaky ReLU with slope 0.2."""
    return F.leaky_relu(x, SLOPE)


def dense(d_in: int, d_out: int, bias: bool = True) -> nn.Linear:
    """A Keras-initialised Dense layer: Glorot-uniform kernel, zero bias."""
    layer = nn.Linear(d_in, d_out, bias=bias)
    nn.init.xavier_uniform_(layer.weight)
    if bias:
        nn.init.zeros_(layer.bias)
    return layer


class DenseStack(nn.Module):
    r"""The official `_mlp(dims)`: Dense layers with the activation between them and
    none after the last, :math:`W_k\,σ(\dots σ(W_1 x + b_1)\dots) + b_k`."""

    def __init__(self, d_in: int, dims: list[int], bias: bool = True):
        super().__init__()
        sizes = [d_in, *dims]
        self.layers = nn.ModuleList(dense(sizes[i], d, bias) for i, d in enumerate(dims))

    def reset_parameters(self) -> None:
        for layer in self.layers:
            nn.init.xavier_uniform_(layer.weight)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)

    def forward(self, x: Tensor) -> Tensor:
        for i, layer in enumerate(self.layers):
            x = layer(act(x) if i else x)
        return x


class OpEmbedding(nn.Embedding):
    """The opcode embedding, Keras-initialised (uniform ±0.05). Its L2 activity
    regulariser is `activity(out)`: l2 · Σ out² / rows, Keras' per-example mean."""

    def reset_parameters(self) -> None:
        nn.init.uniform_(self.weight, -0.05, 0.05)

    def forward(self, opcode: Tensor) -> Tensor:
        """Ids past the vocabulary read as 0, unknown (docs/design.md §3)."""
        return super().forward(torch.where(opcode < self.num_embeddings, opcode, 0))

    @staticmethod
    def activity(out: Tensor, l2: float) -> Tensor:
        return l2 * out.square().sum() / max(1, out.shape[0])


def kernel_l2(module: nn.Module, l2: float) -> Tensor:
    """Keras' `kernel_regularizer=l2(l2)` summed over every Dense kernel in `module`."""
    kernels = [m.weight for m in module.modules() if isinstance(m, nn.Linear)]
    return l2 * sum(w.square().sum() for w in kernels)


def _gather_sum(x: Tensor, src: Tensor, dst: Tensor, n: int) -> Tensor:
    """(A x)[i] = Σ_{edges j → i} x[j], along dim −2."""
    return scatter(x.index_select(-2, src), dst, dim=-2, dim_size=n, reduce="sum")


def _scale(x: Tensor, w: Tensor) -> Tensor:
    """Multiply node rows (dim −2) by per-node weights w (N,)."""
    return x * w.unsqueeze(-1)


def sym_propagate(x: Tensor, edge_index: Tensor) -> Tensor:
    r"""Â x with Â = D^{-1/2}(A + Aᵀ + I)D^{-1/2}, D its degree matrix (the layout
    ResModel's 'sym' adjacency): edge direction dropped, self loops added, and
    duplicate edges counted as often as they occur."""
    n = x.shape[-2]
    src, dst = edge_index
    w = _sym_degree(edge_index, n).to(x.dtype).rsqrt()
    y = _scale(x, w)
    return _scale(y + _gather_sum(y, src, dst, n) + _gather_sum(y, dst, src, n), w)


def _sym_degree(edge_index: Tensor, n: int) -> Tensor:
    """D of A + Aᵀ + I: each node's edges, both ways, plus one."""
    src, dst = edge_index
    return 1.0 + torch.bincount(src, minlength=n) + torch.bincount(dst, minlength=n)


def sym_matrix(edge_index: Tensor, n: int) -> sp.csr_matrix:
    """Â = D^{-1/2}(A + Aᵀ + I)D^{-1/2} (N, N): what `sym_propagate` applies."""
    w = 1.0 / np.sqrt(_sym_degree(edge_index, n).double().numpy())
    src, dst = edge_index.numpy()
    loops = np.arange(n)
    rows, cols = np.concatenate([dst, src, loops]), np.concatenate([src, dst, loops])
    return sp.csr_matrix((w[rows] * w[cols], (rows, cols)), shape=(n, n))


def right_norm(edge_index: Tensor, n: int, dtype: torch.dtype) -> Tensor:
    """1 / rowsum(A + I): one over each node's in-degree (edges into it) plus one."""
    return 1.0 / (1.0 + torch.bincount(edge_index[1], minlength=n)).to(dtype)


class SAGEConv(nn.Module):
    r"""The tile GraphSAGE layer (official `_SAGE`):

    .. math:: y_i = σ(W[((A + Aᵀ)x)_i ‖ x_i] + b),\quad x'_i = y_i / \lVert y_i\rVert_2

    a sum over neighbours in both directions (no normalisation) beside the node's own
    state, one Dense layer, leaky ReLU, then L2 normalisation of each node state.
    """

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        self.lin = dense(2 * d_in, d_out)

    def reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.lin.weight)
        nn.init.zeros_(self.lin.bias)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        n = x.shape[-2]
        src, dst = edge_index
        return self.combine(_gather_sum(x, src, dst, n) + _gather_sum(x, dst, src, n), x)

    def combine(self, nbr: Tensor, x: Tensor) -> Tensor:
        """The layer given nbr = (A + Aᵀ)x (`sage_matrix`), computed however is fastest."""
        return F.normalize(act(self.lin(torch.cat([nbr, x], dim=-1))), dim=-1, eps=1e-6)


def sage_matrix(edge_index: Tensor, n: int) -> sp.csr_matrix:
    """A + Aᵀ (N, N), each edge counted as often as it occurs: `SAGEConv`'s sum."""
    src, dst = edge_index.numpy()
    rows, cols = np.concatenate([dst, src]), np.concatenate([src, dst])
    return sp.csr_matrix((np.ones(rows.size, np.float32), (rows, cols)), shape=(n, n))


class ResGCNConv(nn.Module):
    r"""The tile residual GCN layer (official `_ResGCN`, undirected), with
    :math:`P = D^{-1}(A + I)`, D the in-degree plus one:

    .. math:: x' = x + \mathrm{MLP}(P\,σ(x) + Pᵀσ(x) + σ(x))
    """

    def __init__(self, hidden: int, mlp_layers: int = 2):
        super().__init__()
        self.mlp = DenseStack(hidden, [hidden] * mlp_layers)

    def reset_parameters(self) -> None:
        self.mlp.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        n = x.shape[-2]
        src, dst = edge_index
        r = right_norm(edge_index, n, x.dtype)
        y = act(x)
        p_y = _scale(y + _gather_sum(y, src, dst, n), r)  # P y
        ry = _scale(y, r)
        pt_y = ry + _gather_sum(ry, dst, src, n)  # Pᵀ y = (A + I)ᵀ D⁻¹ y
        return self.combine(p_y + pt_y + y, x)

    def combine(self, agg: Tensor, x: Tensor) -> Tensor:
        """The layer given agg = (P + Pᵀ + I)σ(x) (`resgcn_matrix`)."""
        return x + self.mlp(agg)


def resgcn_matrix(edge_index: Tensor, n: int) -> sp.csr_matrix:
    """P + Pᵀ + I (N, N) with P = D⁻¹(A + I): what `ResGCNConv` applies to σ(x)."""
    src, dst = edge_index.numpy()
    a = sp.csr_matrix((np.ones(src.size, np.float32), (dst, src)), shape=(n, n))
    eye = sp.identity(n, np.float32, "csr")
    p = sp.diags(right_norm(edge_index, n, torch.float32).numpy()) @ (a + eye)
    return (p + p.T + eye).tocsr()


class SymGCNConv(nn.Module):
    r"""The layout ResModel layer: the config features c are re-joined at every layer,

    .. math:: x' = x + σ(\mathrm{MLP}(Â\,[c ‖ x])),\quad Â = D^{-1/2}(A + Aᵀ + I)D^{-1/2}

    with c the 100-scaled config features of configurable nodes (zeros elsewhere).
    """

    def __init__(self, config_dim: int, hidden: int, mlp_layers: int = 2):
        super().__init__()
        self.mlp = DenseStack(config_dim + hidden, [hidden] * mlp_layers)

    def reset_parameters(self) -> None:
        self.mlp.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor, config: Tensor) -> Tensor:
        return x + act(self.mlp(sym_propagate(torch.cat([config, x], dim=-1), edge_index)))
