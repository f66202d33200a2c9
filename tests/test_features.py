import numpy as np
import pytest

from graphcost.data.features import FeatureTransform, repad_layout, tensor_rank
from graphcost.data.synthetic import make_tile_graph


def _feat(shapes):
    f = np.zeros((len(shapes), 140), np.float32)
    for i, dims in enumerate(shapes):
        f[i, 21:21 + len(dims)] = dims
        f[i, 134:134 + len(dims)] = np.arange(len(dims))[::-1]
    return f


def test_rank_and_minus_one_repadding():
    f = _feat([(4, 8, 2), (), (16,)])
    assert tensor_rank(f).tolist() == [3, 0, 1]
    r = repad_layout(f)
    assert r[0, 134:140].tolist() == [2, 1, 0, -1, -1, -1]
    assert r[1, 134:140].tolist() == [-1] * 6  # scalar: no layout at all
    assert r[2, 134:140].tolist() == [0, -1, -1, -1, -1, -1]  # 0 here is a real dim index
    assert f[1, 134] == 0  # the input is not modified


def test_transform_drops_constants_logs_wide_columns_and_standardises():
    graphs = [make_tile_graph(np.random.default_rng(s), num_nodes=40, num_configs=20)
              for s in range(5)]
    ft = FeatureTransform.fit(graphs)
    stacked = np.vstack([repad_layout(g.node_feat) for g in graphs])
    constant = np.flatnonzero(stacked.max(0) == stacked.min(0))
    assert 1 in constant  # element_size_in_bits is always 0
    assert not set(constant) & set(ft.node_columns.keep.tolist())
    assert ft.node_dim == 140 - constant.size
    # the shape product (column 28) spans ~1e1..1e9: it is log-transformed
    pos = ft.node_columns.keep.tolist().index(28)
    assert ft.node_columns.log[pos]
    x = np.vstack([ft.node(g.node_feat) for g in graphs])
    np.testing.assert_allclose(x.mean(0), 0, atol=1e-4)
    np.testing.assert_allclose(x.std(0), 1, atol=1e-3)
    assert ft.tile_config(graphs[0].config_feat).shape == (20, ft.tile_config_dim)


def test_stats_come_from_the_graphs_given_and_survive_serialisation():
    train = [make_tile_graph(np.random.default_rng(s)) for s in range(3)]
    other = make_tile_graph(np.random.default_rng(99))
    ft = FeatureTransform.fit(train)
    ft2 = FeatureTransform.from_dict(ft.to_dict())
    np.testing.assert_array_equal(ft.node(other.node_feat), ft2.node(other.node_feat))
    np.testing.assert_array_equal(ft.tile_config(other.config_feat),
                                  ft2.tile_config(other.config_feat))
    assert not np.allclose(ft.node(other.node_feat).mean(0), 0, atol=1e-3)


def test_layout_transform_has_no_tile_config_stats(layout_graph):
    ft = FeatureTransform.fit([layout_graph])
    assert ft.tile_config_dim == 0
    with pytest.raises(ValueError, match="layout"):
        ft.tile_config(np.zeros((1, 24)))
