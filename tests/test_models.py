import numpy as np
import pytest
import torch

from graphcost.data.synthetic import make_layout_graph, make_tile_graph
from graphcost.models import Model, model_names, score_graph
from graphcost.models.base import collate

torch.set_num_threads(1)


def graphs(kind: str, count: int = 3, seed: int = 0, **kw):
    rng = np.random.default_rng(seed)
    make = make_tile_graph if kind == "tile" else make_layout_graph
    defaults = {"num_nodes": 20, "num_configs": 30} if kind == "tile" else {
        "num_nodes": 60, "num_configs": 40}
    return [make(rng, name=f"{kind}{i}", **{**defaults, **kw}) for i in range(count)]


def built(name: str, kind: str, gs, **settings) -> Model:
    torch.manual_seed(0)
    if name == "ranker" and kind == "layout":  # a rule underneath starts the head at zero,
        settings.setdefault("prior", "")  # which would hide the network's scores
    m = Model(name, kind, **settings)
    m.build(m.fit_transform(gs))
    m.net.eval()
    return m


ALL = [(name, kind) for kind in ("tile", "layout") for name in model_names(kind)]


@pytest.mark.parametrize("name,kind", ALL)
def test_batch_of_graphs_scores_each_graph_as_alone(name, kind):
    gs = graphs(kind)
    m = built(name, kind, gs)
    tensors = [m.prepare(g) for g in gs]
    ids = [np.arange(7), np.arange(3, 10), np.arange(5)]  # the last one is padded
    with torch.no_grad():
        together = m.net(collate(list(zip(tensors, ids, strict=True))))
        assert together.shape == (3, 7)
        for i, (gt, c) in enumerate(zip(tensors, ids, strict=True)):
            alone = m.net(collate([(gt, c)]))[0]
            torch.testing.assert_close(together[i, :len(c)], alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name,kind", ALL)
def test_save_load_round_trip_gives_identical_predictions(name, kind, tmp_path):
    gs = graphs(kind)
    m = built(name, kind, gs)
    path = m.save(tmp_path / "m.pt")
    again = Model.load(path)
    assert again.name == name and again.kind == kind and again.settings == m.settings
    for g in gs:
        np.testing.assert_array_equal(score_graph(m, g), score_graph(again, g))


@pytest.mark.parametrize("kind", ["layout", "tile"])
def test_ranker_prediction_does_not_depend_on_chunks(kind):
    g = graphs(kind, count=1, num_configs=150)[0]
    m = built("ranker", kind, [g])
    assert m.settings.ref_configs < g.num_configs  # the reference set is a real subset
    full = score_graph(m, g, chunk_size=4096)
    np.testing.assert_allclose(score_graph(m, g, chunk_size=7), full, atol=1e-5, rtol=1e-5)
    perm = np.random.default_rng(1).permutation(g.num_configs)
    np.testing.assert_allclose(score_graph(m, g, perm, chunk_size=13), full[perm], atol=1e-5,
                               rtol=1e-5)
    subset = perm[:9]
    np.testing.assert_allclose(score_graph(m, g, subset, chunk_size=4), full[subset], atol=1e-5,
                               rtol=1e-5)


def test_cross_config_attention_makes_configs_interact_in_training():
    g = graphs("layout", count=1)[0]
    m = built("ranker", "layout", [g])
    gt = m.prepare(g)
    with torch.no_grad():
        a = m.net(collate([(gt, np.array([0, 1, 2, 3]))]))[0, 0]
        b = m.net(collate([(gt, np.array([0, 5, 6, 7]))]))[0, 0]
        m.net.attn = torch.nn.ModuleList()  # without attention config 0 scores the same
        c = m.net(collate([(gt, np.array([0, 1, 2, 3]))]))[0, 0]
        d = m.net(collate([(gt, np.array([0, 5, 6, 7]))]))[0, 0]
    assert not torch.isclose(a, b) and torch.isclose(c, d)


def test_ranker_prunes_layout_graphs():
    g = graphs("layout", count=1, num_nodes=300)[0]
    m = built("ranker", "layout", [g])
    gt = m.prepare(g)
    assert gt.x.shape[0] < g.num_nodes
    assert Model("ranker", "layout", prune_hops=-1).build(m.transform).prepare(g).x.shape[0] == 300


def test_wrong_kind_and_unknown_model_are_refused():
    with pytest.raises(ValueError, match="tile"):
        Model("resgcn", "tile")
    with pytest.raises(ValueError, match="unknown model"):
        Model("nope", "layout")
    m = built("ranker", "layout", graphs("layout", 1))
    with pytest.raises(ValueError, match="cannot score"):
        score_graph(m, graphs("tile", 1)[0])


def test_a_checkpoint_from_before_a_setting_loads_as_it_was_trained():
    """A tile ranker saved before `tile_join` existed was a late-join model: it must load
    as one (the weights fit either join; the scores would silently change)."""
    gs = graphs("tile")
    torch.manual_seed(0)
    late = Model("ranker", "tile", tile_join="late")
    late.build(late.fit_transform(gs))
    state = late.state()
    del state["settings"]["tile_join"]  # as written by an older graphcost
    old = Model.from_state(state)
    assert old.settings.tile_join == "late"
    np.testing.assert_array_equal(score_graph(old, gs[0]), score_graph(late, gs[0]))
    assert Model("ranker", "tile").settings.tile_join == "early"  # new models: the default
