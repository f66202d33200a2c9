"""What the ranker sees of a layout: each role's entries sized by that role's tensor, and
messages that know which way along the dataflow they travel."""

import numpy as np
import torch

from graphcost.formats import LayoutGraph
from graphcost.models.base import role_nodes
from graphcost.models.ranker_layers import LAYOUT_VALUES, DirectedSAGEConv, layout_features


def graph_with_operands() -> LayoutGraph:
    """Node 3 (a dot) consumes nodes 1 and 2, in that order; node 4 consumes node 0 only.
    Shapes: node 1 is 8×2, node 2 is 2×32, node 3 is 8×32, node 0 is 4."""
    feat = np.zeros((5, 140), np.float32)
    for n, shape in {0: [4], 1: [8, 2], 2: [2, 32], 3: [8, 32], 4: [4]}.items():
        feat[n, 21:21 + len(shape)] = shape
        feat[n, 134:134 + len(shape)] = list(range(len(shape)))[::-1]
    return LayoutGraph(name="g", node_feat=feat, node_opcode=np.zeros(5, np.int64),
                       edge_index=np.array([[3, 1], [4, 0], [3, 2]]),
                       node_config_ids=np.array([3, 4]),
                       node_config_feat=np.full((1, 2, 18), -1, np.float32),
                       config_runtime=np.ones(1), node_splits=np.zeros(0, np.int64))


def test_roles_are_the_node_and_its_first_two_operands():
    assert role_nodes(graph_with_operands()).tolist() == [[3, 1, 2], [4, 0, 4]]


def test_input_and_kernel_entries_are_sized_by_the_operands_shapes():
    g = graph_with_operands()
    roles = role_nodes(g)
    dims = torch.as_tensor(np.log2(np.maximum(g.node_feat[roles][..., 21:27], 1)))
    own = torch.full((2, 3, 6), -1, dtype=torch.long)
    config = torch.full((1, 2, 18), -1.0)
    config[0, 0, 0] = 1  # output: dimension 1 of the 8×32 result (32) minor-most
    config[0, 0, 6] = 1  # input: dimension 1 of the 8×2 operand (2)
    config[0, 0, 12] = 1  # kernel: dimension 1 of the 2×32 operand (32)
    sizes = layout_features(config, dims, own)[0, 0, 18 * LAYOUT_VALUES:]
    assert sizes[0] == 5 and sizes[6] == 1 and sizes[12] == 5
    assert sizes[[1, 7, 13]].tolist() == [0, 0, 0]  # −1 with no own layout: nothing


def test_change_features_flag_a_new_order_and_size_it():
    """Output set to the order the 8×32 result already has (minor-to-major 1, 0): no
    change; input set to 0, 1 against the 8×2 operand's 1, 0: a change of its 64 bytes."""
    g = graph_with_operands()
    at = g.node_feat[role_nodes(g)]
    dims = torch.as_tensor(np.log2(np.maximum(at[..., 21:27], 1)))
    own = torch.as_tensor(np.where(at[..., 21:27] > 0, at[..., 134:140], -1)).long()
    nbytes = torch.full((2, 3), 64.0)
    config = torch.full((1, 2, 18), -1.0)
    config[0, 0, 0:2] = torch.tensor([1, 0])
    config[0, 0, 6:8] = torch.tensor([0, 1])
    plain = layout_features(config, dims, own)
    full = layout_features(config, dims, own, nbytes)
    assert torch.equal(full[..., :plain.shape[-1]], plain)  # the same features first
    changed, size = full[0, :, plain.shape[-1]:].split(3, dim=-1)
    assert changed.tolist() == [[0, 1, 0], [0, 0, 0]]
    np.testing.assert_allclose(size, [[0, np.log2(1 + 64 / 1024), 0], [0, 0, 0]], rtol=1e-6)


def test_directed_sage_gives_each_direction_its_own_weight():
    torch.manual_seed(0)
    conv = DirectedSAGEConv(3)
    x = torch.randn(4, 3)
    e = torch.tensor([[0, 0, 1], [1, 2, 3]])  # file direction: consumer → operand
    both = torch.cat([e, e.flip(0)], 1)
    forward = torch.arange(6) < 3
    got = conv(x, both, forward)
    users = {1: [0], 2: [0], 3: [1]}  # who consumes each node
    operands = {0: [1, 2], 1: [3]}
    want = conv.users.lin_r(x)
    for v in range(4):
        if v in users:
            want[v] += conv.users.lin_l(x[users[v]].mean(0))
        else:
            want[v] += conv.users.lin_l.bias
        if v in operands:
            want[v] += conv.operands.lin_l(x[operands[v]].mean(0))
    torch.testing.assert_close(got, want)
    flipped = conv(x, both, ~forward)  # the same edges read the other way round
    assert not torch.allclose(flipped, got)


def _tile_ranker(join: str, graphs):
    from graphcost.models import Model

    torch.manual_seed(0)
    m = Model("ranker", "tile", tile_join=join, hidden=16, opcode_dim=8, heads=2)
    m.build(m.fit_transform(graphs))
    m.net.eval()
    return m


def test_early_tile_join_lets_message_passing_see_the_config():
    from graphcost.data.synthetic import make_tile_graph
    from graphcost.models.base import collate

    rng = np.random.default_rng(0)
    gs = [make_tile_graph(rng, num_nodes=20, num_configs=12, name=f"t{i}") for i in range(3)]
    seen = {}
    for join in ("late", "early"):
        m = _tile_ranker(join, gs)
        out: list = []
        # the last layer's input, after the layers before it passed messages
        hook = m.net.norms[-1].register_forward_hook(lambda _m, i, _o, out=out: out.append(i[0]))
        tensors = [m.prepare(g) for g in gs]
        ids = [np.arange(5), np.arange(2, 7), np.arange(4)]  # the last one padded
        with torch.no_grad():
            together = m.net(collate(list(zip(tensors, ids, strict=True))))
            for i, (gt, c) in enumerate(zip(tensors, ids, strict=True)):  # batched = alone
                alone = m.net(collate([(gt, c)]))[0]
                torch.testing.assert_close(together[i, :len(c)], alone, atol=1e-5, rtol=1e-5)
        hook.remove()
        seen[join] = out[0]
        # the plain config scorer agrees with the graph's own scores
        g = tensors[0]
        own = m.net.score_configs(g, np.arange(g.num_configs))
        torch.testing.assert_close(m.net.config_scorer(g)(g.configs(np.arange(12))), own,
                                   atol=1e-5, rtol=1e-5)
    assert seen["late"].dim() == 2  # (N, d): one GNN pass for every config
    node_states = seen["early"]  # (N, C, d): a GNN state per config, node-major
    assert node_states.dim() == 3 and node_states.shape[1] == 5
    assert not torch.allclose(node_states[:, 0], node_states[:, 1])


def test_layout_gnn_dropout_draws_one_mask_per_node_shared_by_its_configs():
    from graphcost.data.synthetic import make_layout_graph, make_tile_graph
    from graphcost.models import Model

    rng = np.random.default_rng(0)
    layout = Model("ranker", "layout", hidden=16, opcode_dim=8, heads=2)
    layout.build(layout.fit_transform([make_layout_graph(rng, name="l")]))
    layout.net.train()
    torch.manual_seed(0)
    u = torch.rand(50, 6, 16) + 1  # (N, C, d), no zeros of its own
    out = layout.net.node_dropout(u)
    dropped = out == 0
    assert dropped.any() and not dropped.all()
    assert (dropped == dropped[:, :1]).all()  # the same entries dropped in every config
    kept = ~dropped
    torch.testing.assert_close(out[kept], u[kept] / 0.9)  # scaled by 1 / (1 − p)
    layout.net.eval()
    assert torch.equal(layout.net.node_dropout(u), u)
    tile = _tile_ranker("early", [make_tile_graph(rng, num_nodes=20, num_configs=4)])
    tile.net.train()  # tile keeps a mask per element
    dropped = tile.net.node_dropout(u) == 0
    assert not (dropped == dropped[:, :1]).all()
