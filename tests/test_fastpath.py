"""The exact fast scoring paths give the plain forward pass's scores.

Every network is untrained but seeded; graphs are synthetic with a few hundred nodes,
big enough that local configs take the incremental path and random ones mostly the
batched path (the tests check which path ran, so a fallback cannot pass unnoticed).
"""

import numpy as np
import pytest
import torch

from graphcost.bench.score import compare_paths, config_sets
from graphcost.data.synthetic import make_layout_graph, make_tile_graph
from graphcost.models import ConfigScorer, Model
from graphcost.models.fastpath import LayoutEngine, base_config, row_codes
from graphcost.models.official_layout import ResModelLayers
from graphcost.models.ranker_layers import RankerLayers

torch.set_num_threads(1)
TOL = 1e-4


def build(name: str, kind: str, nodes: int, configs: int, seed: int = 0, **settings):
    rng = np.random.default_rng(seed)
    make = make_layout_graph if kind == "layout" else make_tile_graph
    torch.manual_seed(seed)
    if name == "ranker" and kind == "layout":  # a rule underneath starts the head at zero,
        settings.setdefault("prior", "")  # which would hide the network's scores
    m = Model(name, kind, **settings)
    m.build(m.fit_transform([make(rng, name=f"train{i}") for i in range(2)]))
    m.net.eval()
    return m, m.prepare(make(rng, num_nodes=nodes, num_configs=configs, name="g")), rng


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    scale = max(1.0, float(a.abs().max()))
    assert float((a - b).abs().max()) <= TOL * scale


def layers_of(m, gt):
    return (RankerLayers if m.name == "ranker" else ResModelLayers)(m.net, gt)


@pytest.mark.parametrize("name,settings", [("ranker", {}), ("ranker", {"change_features": True}),
                                           ("resgcn", {})])
@pytest.mark.parametrize("kind,path", [("random", "batched"), ("local", "local"),
                                       ("default", "local")])
def test_layout_fast_path_equals_plain(name, settings, kind, path):
    m, gt, rng = build(name, "layout", 400, 48, **settings)
    configs = config_sets(gt, "layout", 48, rng)[kind]
    with torch.no_grad():
        plain = m.net.config_scorer(gt, fast=False)(configs)
        fast = m.net.config_scorer(gt, fast=True)(configs)
        engine = LayoutEngine(layers_of(m, gt), gt)
        engine(configs)
    close(plain, fast)
    if path == "local":  # every config changes 1-3 nodes: all take the local path
        assert engine.used["local"] == len(configs)
    else:  # random configs: most change too much (those that change little may go local)
        assert engine.used["batched"] >= len(configs) // 2


@pytest.mark.parametrize("name", ["ranker", "resgcn"])
def test_mixed_chunk_and_own_configs(name):
    """Local and random configs in one call, and a graph's own configs through the
    one config scorer, as evaluation and prediction call it."""
    m, gt, rng = build(name, "layout", 300, 40, seed=1)
    sets = config_sets(gt, "layout", 40, rng)
    mixed = torch.cat([sets["local"][:30], sets["random"][:10]])
    with torch.no_grad():
        close(m.net.config_scorer(gt, fast=False)(mixed), m.net.config_scorer(gt)(mixed))
        engine = LayoutEngine(layers_of(m, gt), gt)
        engine(mixed)
    assert engine.used["local"] >= 30 and engine.used["batched"] >= 5  # both paths ran
    close(torch.from_numpy(ConfigScorer(m, gt, fast=False).scores()),
          torch.from_numpy(ConfigScorer(m, gt).scores()))


def test_max_pooling_when_the_region_holds_the_largest_state():
    """The ranker's max over nodes: a change next to the node holding a dimension's
    largest base state must take the largest state outside the region instead."""
    m, gt, rng = build("ranker", "layout", 300, 8, seed=2)
    layers = layers_of(m, gt)
    engine = LayoutEngine(layers, gt)
    configs = gt.configs(np.arange(8))
    with torch.no_grad():
        base = engine.base(configs[0])
        top_node = int(base.order[0, 0])  # largest final state of dimension 0
        nc = gt.config_nodes.numel()
        reach = engine._regions(np.eye(nc, dtype=bool))[-1]  # each config node's region
        k = int(np.flatnonzero(reach[:, top_node].toarray()[:, 0])[0])
        local = configs[0].repeat(8, 1, 1)  # every config changes node k only
        local[:, k] = configs[1:, k][torch.arange(8) % 7]
        changed = (local != configs[0]).any(-1).numpy()
        regions = engine._regions(changed)
        assert all(regions[-1][q, top_node] for q in np.flatnonzero(changed.any(1)))
        got = engine.local(local, base, regions)
        want = engine.batched(local)
    close(want, got)


@pytest.mark.parametrize("name,settings", [
    ("ranker", {}), ("ranker", {"tile_join": "late"}), ("sage-early", {}), ("sage-late", {}),
    ("resgcn-early", {}), ("resgcn-late", {}), ("mlp", {})])
def test_tile_fast_path_equals_plain(name, settings):
    m, gt, _ = build(name, "tile", 300, 40, **settings)
    if name == "ranker":  # the ranker's fast path ran, not a fallback to the plain one
        assert m.net._fast_embedder(gt) is not None
    configs = gt.configs(np.arange(40))
    with torch.no_grad():
        close(m.net.config_scorer(gt, fast=False)(configs), m.net.config_scorer(gt)(configs))
    close(torch.from_numpy(ConfigScorer(m, gt, fast=False).scores()),
          torch.from_numpy(ConfigScorer(m, gt).scores()))


@pytest.mark.parametrize("kind", ["layout", "tile"])
def test_ranker_score_does_not_depend_on_the_chunk(kind):
    """Cross-config attention must not let the other configs of a call change a score."""
    m, gt, rng = build("ranker", kind, 300, 40, seed=3)
    configs = gt.configs(np.arange(40))
    perm = torch.from_numpy(rng.permutation(40))
    with torch.no_grad():
        whole = m.net.config_scorer(gt)(configs)
        parts = torch.cat([m.net.config_scorer(gt, chunk_size=7)(configs[perm][i:i + 9])
                           for i in range(0, 40, 9)])
    close(whole[perm], parts)


def test_base_is_the_commonest_row_and_codes_are_exact():
    configs = torch.tensor([[[1.0, 2.0], [0.0, -1.0]],
                            [[1.0, 2.0], [3.0, 3.0]],
                            [[5.0, 2.0], [3.0, 3.0]]])
    assert torch.equal(base_config(configs), torch.tensor([[1.0, 2.0], [3.0, 3.0]]))
    codes = row_codes(torch.tensor([[0.0, 1.5], [-0.0, 1.5], [1.5, 0.0]]))
    assert codes[0] == codes[1] and codes[0] != codes[2]


def test_bench_compare_paths_reports_both():
    m, gt, rng = build("ranker", "layout", 200, 16)
    cell = compare_paths(m.net, gt, config_sets(gt, "layout", 16, rng)["local"], repeats=2)
    assert cell["plain_configs_per_s"] > 0 and cell["fast_configs_per_s"] > 0
    assert cell["ratio"] == pytest.approx(cell["fast_configs_per_s"]
                                          / cell["plain_configs_per_s"])
    assert cell["max_rel_diff"] <= TOL


def test_local_path_when_a_region_holds_every_node():
    """On a tiny graph one changed node's region is the whole graph: the max must then
    come from the region alone (no node is left outside)."""
    m, gt, _ = build("ranker", "layout", 12, 6, seed=4)
    engine = LayoutEngine(layers_of(m, gt), gt)
    configs = gt.configs(np.arange(6))
    local = configs[0].repeat(5, 1, 1)
    local[:, 0] = configs[1:, 0]
    with torch.no_grad():
        regions = engine._regions((local != configs[0]).any(-1).numpy())
        covered = np.diff(regions[-1].indptr)
        got = engine.local(local, engine.base(configs[0]), regions)
        want = engine.batched(local)
    assert covered.max() == engine.n  # the case this test is for
    close(want, got)


def test_a_graph_within_one_reference_set_is_embedded_once(monkeypatch):
    """score_configs reuses the reference set's embeddings for the same configs."""
    import graphcost.models.ranker as ranker

    embedded = []

    class Counting(LayoutEngine):
        def __call__(self, configs):
            embedded.append(configs.shape[0])
            return super().__call__(configs)

    m, gt, _ = build("ranker", "layout", 200, 20)  # 20 configs ≤ ref_configs (32)
    with torch.no_grad():
        fresh = m.net.config_scorer(gt)(gt.configs(np.arange(20)))  # queries embedded anew
        monkeypatch.setattr(ranker, "LayoutEngine", Counting)
        reused = m.net.score_configs(gt, np.arange(20))
    assert sum(embedded) == 20  # the reference set's 20, not 20 more for the queries
    close(reused, fresh)
