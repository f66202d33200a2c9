import numpy as np

from graphcost.data.prune import PruneCache, k_hop_nodes, prune_graph
from graphcost.data.synthetic import make_layout_graph, make_tile_graph
from graphcost.formats import LayoutGraph


def chain(n: int, config_nodes: list[int]) -> LayoutGraph:
    """0 ← 1 ← 2 ← … (node v consumes v−1), one config with 2 options."""
    feat = np.arange(n * 140, dtype=np.float32).reshape(n, 140)
    edges = np.array([[v, v - 1] for v in range(1, n)], dtype=np.int64)
    nc = len(config_nodes)
    return LayoutGraph(name="chain", node_feat=feat, node_opcode=np.arange(n) % 7,
                       edge_index=edges, node_config_ids=np.array(config_nodes),
                       node_config_feat=np.random.default_rng(0).normal(size=(2, nc, 18)).astype(
                           np.float32),
                       config_runtime=np.array([1.0, 2.0]), node_splits=np.array([0, 4]))


def bfs(edges: np.ndarray, seeds: np.ndarray, n: int, hops: int) -> set[int]:
    nbr = {v: set() for v in range(n)}
    for u, v in edges:
        nbr[int(u)].add(int(v))
        nbr[int(v)].add(int(u))
    seen, frontier = set(map(int, seeds)), set(map(int, seeds))
    for _ in range(hops):
        frontier = {w for v in frontier for w in nbr[v]} - seen
        seen |= frontier
    return seen


def test_chain_keeps_k_hop_neighbours_and_remaps_edges():
    g = chain(8, [3])
    p = prune_graph(g, hops=1)
    np.testing.assert_array_equal(p.node_feat, g.node_feat[[2, 3, 4]])
    assert sorted(map(tuple, p.edge_index.tolist())) == [(1, 0), (2, 1)]
    assert p.node_config_ids.tolist() == [1]
    assert p.node_config_feat is g.node_config_feat  # shared, not copied
    p2 = prune_graph(g, hops=2)
    assert p2.num_nodes == 5 and p2.node_config_ids.tolist() == [2]
    assert p2.node_splits.tolist() == [0, 3]  # the split at node 4 is now node 3


def test_random_graph_matches_bfs_and_edges_map_back():
    rng = np.random.default_rng(3)
    g = make_layout_graph(rng, num_nodes=150, num_configs=4)
    for hops in (0, 1, 2, 3):
        kept = k_hop_nodes(g.edge_index, g.node_config_ids, g.num_nodes, hops)
        assert set(kept.tolist()) == bfs(g.edge_index, g.node_config_ids, g.num_nodes, hops)
        p = prune_graph(g, hops)
        np.testing.assert_array_equal(p.node_feat, g.node_feat[kept])
        np.testing.assert_array_equal(kept[p.node_config_ids], g.node_config_ids)
        original = {tuple(e) for e in g.edge_index.tolist()
                    if e[0] in set(kept.tolist()) and e[1] in set(kept.tolist())}
        assert {tuple(e) for e in kept[p.edge_index].tolist()} == original
        assert (p.edge_index[:, 0] > p.edge_index[:, 1]).all()  # topological order kept


def test_cache_tile_and_negative_hops():
    rng = np.random.default_rng(0)
    g = make_layout_graph(rng, num_nodes=60, num_configs=3)
    cache = PruneCache()
    assert cache(g, 1) is cache(g, 1) and len(cache) == 1
    assert cache(g, 2) is not cache(g, 1)
    assert prune_graph(g, -1) is g
    t = make_tile_graph(rng)
    assert prune_graph(t, 1) is t and cache(t, 1) is t
