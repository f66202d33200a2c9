"""The official baselines, layer for layer: parameter counts equal the official Keras
models', and every layer (and two whole models) matches numpy on hand-sized graphs."""

import numpy as np
import pytest
import torch

from graphcost.data.synthetic import make_layout_graph, make_tile_graph
from graphcost.models import Model
from graphcost.models.base import collate
from graphcost.models.losses import tf_listmle
from graphcost.models.official_layers import ResGCNConv, SAGEConv, sym_propagate
from graphcost.models.registry import MODELS
from graphcost.train.sampling import extremes_and_middle
from graphcost.train.settings import train_defaults

torch.set_num_threads(1)

# Trainable parameters of the official models (github google-research-datasets/
# tpu_graphs at ddd187c, tpu_graphs/baselines/{layout,tiles}/models.py) at their default
# constructor arguments, with the real collections' input sizes: 140 node features, 18
# layout / 24 tile config features, an opcode vocabulary of 121 (largest id 120 + 1, as
# the official loader sizes it) or 128. Obtained by building each Keras model in
# TF 2.15.1 + tensorflow-gnn 1.0.3 on a GraphTensor shaped as the official loaders build
# them, calling it once and summing the sizes of `model.trainable_variables`.
OFFICIAL_PARAMS = {
    121: {"resgcn": 19520, "sage-early": 61889, "sage-late": 60353, "resgcn-early": 49825,
          "resgcn-late": 49825, "mlp": 20705},
    128: {"resgcn": 19744, "sage-early": 62337, "sage-late": 60801, "resgcn-early": 50049,
          "resgcn-late": 50049, "mlp": 20929},
}


@pytest.mark.parametrize("vocab", sorted(OFFICIAL_PARAMS))
@pytest.mark.parametrize("name", sorted(OFFICIAL_PARAMS[121]))
def test_parameter_count_equals_the_official_model(name, vocab):
    spec = MODELS[name]
    settings = spec.settings(**{**spec.defaults, "num_ops": vocab})
    net = spec.net(spec.kinds[0], settings, 140, 18 if name == "resgcn" else 24)
    count = sum(p.numel() for p in net.parameters() if p.requires_grad)
    assert count == OFFICIAL_PARAMS[vocab][name]


# ------------------------------------------------------------------ numpy references

EDGES = np.array([[1, 0], [2, 0], [2, 1], [3, 2], [4, 2], [4, 3], [4, 3]])  # npz rows u, v
N = 5


def adjacency() -> np.ndarray:
    """A[target, source]: one count per edge u → v of the file's edge list."""
    a = np.zeros((N, N))
    for u, v in EDGES:
        a[v, u] += 1
    return a


def lrelu(x):
    return np.where(x > 0, x, 0.2 * x)


def l2n(x):
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-6)


def dense(lin, x):
    w = lin.weight.detach().double().numpy()
    out = x @ w.T
    return out if lin.bias is None else out + lin.bias.detach().double().numpy()


def stack(mlp, x):
    for i, lin in enumerate(mlp.layers):
        x = dense(lin, lrelu(x) if i else x)
    return x


def edge_tensor() -> torch.Tensor:
    return torch.as_tensor(EDGES.T, dtype=torch.long)


def test_sym_propagate_is_the_normalised_symmetric_adjacency_product():
    x = np.random.default_rng(0).normal(size=(2, N, 3))
    m = adjacency() + adjacency().T + np.eye(N)
    d = m.sum(0) ** -0.5
    want = (d[:, None] * m * d[None, :]) @ x
    got = sym_propagate(torch.as_tensor(x), edge_tensor())
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10)


def test_sage_layer_matches_numpy():
    torch.manual_seed(0)
    layer = SAGEConv(3, 4).double()
    x = np.random.default_rng(1).normal(size=(N, 3))
    a = adjacency()
    want = l2n(lrelu(dense(layer.lin, np.concatenate([(a + a.T) @ x, x], 1))))
    got = layer(torch.as_tensor(x), edge_tensor()).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-10)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0)


def test_resgcn_layer_matches_numpy():
    torch.manual_seed(0)
    layer = ResGCNConv(4).double()
    x = np.random.default_rng(2).normal(size=(2, N, 4))
    p = np.linalg.inv(np.diag(adjacency().sum(1) + 1)) @ (adjacency() + np.eye(N))
    y = lrelu(x)
    want = x + stack(layer.mlp, p @ y + p.T @ y + y)
    got = layer(torch.as_tensor(x), edge_tensor()).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-10)


def one_graph_batch(model: Model, graph, ids):
    model.build(model.fit_transform([graph]))
    model.net.double().eval()
    b = collate([(model.prepare(graph), ids)])
    b.x, b.config = b.x.double(), b.config.double()
    return b


def test_layout_resmodel_matches_numpy():
    g = make_layout_graph(np.random.default_rng(3), num_nodes=9, num_configs=6, name="g")
    torch.manual_seed(0)
    m = Model("resgcn", "layout", hidden=8, opcode_dim=4)
    ids = np.array([0, 2, 5])
    b = one_graph_batch(m, g, ids)
    net = m.net
    with torch.no_grad():
        got = net(b)[0].numpy()
    x, n = b.x.numpy(), b.x.shape[0]
    a = np.zeros((n, n))
    for u, v in b.edge_index[:, b.edge_forward].t().numpy():
        a[v, u] += 1
    mat = a + a.T + np.eye(n)
    d = mat.sum(0) ** -0.5
    ahat = d[:, None] * mat * d[None, :]
    cfg = np.zeros((len(ids), n, b.config.shape[-1]))
    cfg[:, b.config_nodes.numpy()] = 100 * b.config.numpy()
    emb = net.opcode.weight.detach().double().numpy()[b.opcode.numpy()]
    h = lrelu(stack(net.prenet, np.concatenate([cfg, np.broadcast_to(
        np.concatenate([x, emb], 1), (len(ids), n, x.shape[1] + emb.shape[1]))], -1)))
    for conv in net.convs:
        h = h + lrelu(stack(conv.mlp, ahat @ np.concatenate([cfg, h], -1)))
    pooled = np.concatenate([h.mean(1), l2n(h.sum(1)),
                             l2n(h[:, b.config_nodes.numpy()].sum(1))], -1)
    np.testing.assert_allclose(got, stack(net.postnet, pooled)[:, 0], rtol=1e-8)
    # the min-max transform scales each kept config column onto [0, 1]
    assert b.config.min() >= 0 and b.config.max() <= 1 and b.config.max() == 1


def test_tile_mlp_matches_numpy():
    g = make_tile_graph(np.random.default_rng(4), num_nodes=7, num_configs=5, name="t")
    torch.manual_seed(0)
    m = Model("mlp", "tile", hidden=6)
    ids = np.arange(5)
    b = one_graph_batch(m, g, ids)
    with torch.no_grad():
        got = m.net(b)[0].numpy()
    emb = m.net.opcode.weight.detach().double().numpy()[b.opcode.numpy()]
    pooled = np.concatenate([b.x.numpy().sum(0), emb.sum(0)])
    feats = np.concatenate([np.broadcast_to(pooled, (5, pooled.size)), b.config[0].numpy()], 1)
    np.testing.assert_allclose(got, stack(m.net.mlp, feats)[:, 0], rtol=1e-8)


def test_tf_listmle_is_the_slowest_first_plackett_luce_likelihood():
    scores = torch.tensor([[0.3, -1.2, 2.0, 0.5]], dtype=torch.float64)
    runtime = torch.tensor([[2.0, 1.0, 4.0, 3.0]], dtype=torch.float64)
    for t in (1.0, 10.0):
        s = scores[0].numpy() / t
        order = np.argsort(-runtime[0].numpy())  # slowest first
        u = s[order]
        want = sum(np.log(np.exp(u[i:]).sum()) - u[i] for i in range(4))
        assert tf_listmle(scores, runtime, temperature=t).item() == pytest.approx(want)


def test_extremes_and_middle_keeps_the_fastest_and_slowest_thirds():
    runtime = np.arange(30, 0, -1.0)  # config 29 is the fastest
    kept = extremes_and_middle(np.arange(30), runtime, 9, np.random.default_rng(0))
    assert kept.size == 9
    assert set(kept[:3]) == {29, 28, 27} and set(kept[3:6]) == {0, 1, 2}
    assert all(3 <= k <= 26 for k in kept[6:])


def test_official_recipes_are_each_models_training_defaults():
    layout, tile = train_defaults("resgcn"), train_defaults("sage-early")
    assert (layout.epochs, layout.patience, layout.configs_per_graph,
            layout.graphs_per_batch, layout.grad_clip) == (50, 25, 16, 8, 1e-2)
    assert (tile.epochs, tile.patience, tile.configs_per_graph, tile.graphs_per_batch,
            tile.grad_clip) == (100, 20, 10, 10, 1e-3)
    for s in (layout, tile):
        assert (s.optimizer, s.lr, s.clip, s.select_on, s.min_configs, s.dedup) == (
            "adam", 1e-3, "per_tensor", "opa", -1, False)
    assert train_defaults("ranker").optimizer == "adamw"


def test_resmodel_back_propagates_only_through_its_node_window():
    g = make_layout_graph(np.random.default_rng(5), num_nodes=40, num_configs=6, name="w")
    torch.manual_seed(0)
    m = Model("resgcn", "layout", hidden=8, keep_nodes=15)
    m.build(m.fit_transform([g]))
    b = collate([(m.prepare(g), np.arange(4))])
    b.x.requires_grad_(True)
    m.net.train()
    m.net(b).sum().backward()
    rows = b.x.grad.abs().sum(1) > 0
    window = np.flatnonzero(rows.numpy())
    assert 0 < window.size <= 15 and window.max() - window.min() < 15
    assert window.min() % 15 == 0  # windows are aligned blocks of keep_nodes node ids
    m.net.eval()
    with torch.no_grad():  # prediction is the whole graph's
        whole = m.net(b)
        m.net.s.keep_nodes = 0
        torch.testing.assert_close(m.net(b), whole)


def test_penalty_is_keras_l2_on_kernels_and_embedding_output():
    g = make_tile_graph(np.random.default_rng(6), num_nodes=7, num_configs=5, name="p")
    m = Model("sage-late", "tile")
    m.build(m.fit_transform([g]))
    b = collate([(m.prepare(g), np.arange(5))])
    m.net.train()
    m.net(b)
    kernels = sum(p.square().sum() for n, p in m.net.named_parameters()
                  if n.endswith("weight") and "opcode" not in n)
    emb = m.net.opcode(b.opcode)
    want = 1e-4 * kernels + 1e-4 * emb.square().sum() / b.x.shape[0]
    torch.testing.assert_close(m.net.penalty(), want)
