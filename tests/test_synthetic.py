"""The synthetic data must carry learnable signal: the hidden cost ranks configs well,
a random guess does not."""

import numpy as np

from graphcost.data.synthetic import layout_runtime, make_layout_graph, make_tile_graph
from graphcost.stats import kendall_tau


def test_layout_signal_is_planted():
    rng = np.random.default_rng(3)
    oracle, random = [], []
    for _ in range(10):
        g = make_layout_graph(rng, num_nodes=120, num_configs=60)
        clean = layout_runtime(g.node_feat, g.edge_index, g.node_config_ids,
                               g.node_config_feat, np.random.default_rng(0), noise=0.0)
        oracle.append(kendall_tau(clean, g.config_runtime))
        random.append(kendall_tau(rng.random(g.num_configs), g.config_runtime))
        assert g.config_runtime.max() / g.config_runtime.min() > 1.2
    assert np.mean(oracle) > 0.7
    assert abs(np.mean(random)) < 0.15


def test_tile_default_is_config_zero_and_sizes_vary():
    g = make_tile_graph(np.random.default_rng(4), num_nodes=25, num_configs=40)
    assert g.target[0] == 1.0
    assert g.num_nodes == 25 and g.num_configs == 40
    assert np.all(g.edge_index[:, 1] < g.edge_index[:, 0])  # topological order
    assert g.target.max() / g.target.min() > 2


def test_simulator_prices_padding_and_relayout_copies():
    """The simulator's two terms, on a hand-checked case: a rank-2 dot of 256×2 in its
    default layout (dim 1 = 2 minor-most) pads 2→128 and 256→256; swapping the layout
    pads 256→256 and 2→8, and each edge to a default-layout neighbour then pays a copy."""
    import dataclasses

    from graphcost.data.simulator import simulated_runtime

    g = make_layout_graph(np.random.default_rng(0), num_nodes=12, num_configs=2)
    feat = np.zeros_like(g.node_feat)
    feat[:, 21], feat[:, 28], feat[:, 134] = 1, 1, 0  # rank-1 scalars elsewhere
    feat[5, 21:23], feat[5, 28], feat[5, 134:136] = (256, 2), 512, (1, 0)
    ncf = np.full((2, 1, 18), -1, np.float32)
    ncf[1, 0, 0:2] = (0, 1)  # dim 0 (256) minor-most
    opcode = np.full(12, 2)
    opcode[5] = 34  # dot: layout sensitivity 2.5
    edges = np.array([[6, 5], [7, 5], [5, 4]])
    g = dataclasses.replace(g, node_feat=feat, node_opcode=opcode, edge_index=edges,
                            node_config_ids=np.array([5]), node_config_feat=ncf,
                            config_runtime=np.ones(2))
    rt = simulated_runtime(g, np.random.default_rng(0), noise=0.0) / 1e3
    base = 1.0 + 0.05 * 9  # log2(512)
    size = 9.0
    default = base + 2.5 * size / 8 * (np.log2(128 / 2) + 0)  # pads 2 → 128
    swapped = base + 2.5 * size / 8 * (0 + np.log2(8 / 2))  # pads 2 → 8 (second minor)
    swapped += 0.4 * size * 2 + 0.4 * 0.0  # consumers 6, 7 copy node 5; node 4 is size 0
    np.testing.assert_allclose(rt, [default, swapped])


def test_simulated_runtimes_have_signal_and_vary():
    from graphcost.data.simulator import make_simulated_layout_graph, simulated_runtime

    rng = np.random.default_rng(3)
    for _ in range(5):
        g = make_simulated_layout_graph(rng, num_nodes=120, num_configs=60)
        clean = simulated_runtime(g, np.random.default_rng(0), noise=0.0)
        assert kendall_tau(clean, g.config_runtime) > 0.8
        assert g.config_runtime.max() / g.config_runtime.min() > 1.2
