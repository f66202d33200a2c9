"""The synthetic data must carry learnable signal: the hidden cost ranks configs well,
a random guess does not."""

import numpy as np

from graphcost.data.synthetic import layout_runtime, make_layout_graph, make_tile_graph
from graphcost.eval.metrics import kendall_tau


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
