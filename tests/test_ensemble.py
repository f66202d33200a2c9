"""An ensemble model (`Model.ensemble`, `graphcost ensemble`): one model file whose score
of a config is the mean of its members' scores, on every scoring path, and which keeps
that through saving, loading and fine-tuning."""

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import refused

from graphcost.cli import main
from graphcost.data.synthetic import make_layout_graph, make_tile_graph
from graphcost.errors import UserError
from graphcost.models import Model, score_graph
from graphcost.models.base import collate
from graphcost.models.ensemble import EnsembleNet
from graphcost.models.scorer import ConfigScorer
from graphcost.train import TrainSettings, fit

torch.set_num_threads(1)


def graphs(kind: str) -> list:
    rng = np.random.default_rng(0)
    if kind == "tile":
        return [make_tile_graph(rng, num_nodes=20, num_configs=30, name=f"t{i}")
                for i in range(3)]
    return [make_layout_graph(rng, num_nodes=60, num_configs=40, name=f"l{i}")
            for i in range(3)]


def member(kind: str, gs: list, seed: int, **settings) -> Model:
    """A ranker trained briefly from torch seed `seed` on `gs` (its transform fitted there,
    so members trained on the same graphs share it)."""
    torch.manual_seed(seed)
    m = Model("ranker", kind, hidden=16, opcode_dim=8, layers=1, ref_configs=8, **settings)
    fit(m, gs, settings=TrainSettings(epochs=2, configs_per_graph=8, progress=False,
                                      seed=seed))
    return m


@pytest.mark.parametrize("kind", ["layout", "tile"])
def test_an_ensemble_scores_the_mean_of_its_members_on_every_path(kind, tmp_path):
    gs = graphs(kind)
    members = [member(kind, gs, seed) for seed in (0, 1, 2)]
    ens = Model.ensemble(members)
    assert isinstance(ens.net, EnsembleNet) and ens.members == 3
    assert ens.member_transforms is None  # fitted on the same graphs: one transform
    for g in gs:
        each = [score_graph(m, g) for m in members]
        assert not np.allclose(each[0], each[1])  # the members differ: the mean is news
        np.testing.assert_allclose(score_graph(ens, g), np.mean(each, axis=0), rtol=1e-5,
                                   atol=1e-6)
        # raw configurations, as autotuning scores them
        raw = g.config_feat if kind == "tile" else g.node_config_feat
        by_member = [ConfigScorer(m, g).candidates()(raw) for m in members]
        np.testing.assert_allclose(ConfigScorer(ens, g).candidates()(raw),
                                   np.mean(by_member, axis=0), rtol=1e-5, atol=1e-6)
    again = Model.load(ens.save(tmp_path / "ens.pt"))
    assert again.members == 3 and isinstance(again.net, EnsembleNet)
    for g in gs:
        np.testing.assert_array_equal(score_graph(again, g), score_graph(ens, g))


@pytest.mark.parametrize("kind", ["layout", "tile"])
def test_members_fitted_on_other_graphs_each_read_their_own_transform(kind, tmp_path):
    """Seeds that stopped early on other families fitted their transforms on other
    graphs: the ensemble prepares a graph once, with the union of their transforms, and
    each member scores exactly as it does alone."""
    gs = graphs(kind)
    rng = np.random.default_rng(7)
    wide = [make_tile_graph(rng, num_nodes=20, num_configs=30, name="w") if kind == "tile"
            else make_layout_graph(rng, num_nodes=60, num_configs=40, name="w")]
    wide[0].node_feat[:, :40] *= 3e3  # columns this member takes logs of, the other not
    wide[0].node_feat[:, 1:3] = rng.normal(size=(wide[0].node_feat.shape[0], 2))  # and reads
    if kind == "tile":
        wide[0].config_feat[:] = wide[0].config_feat * 5 + 2
    members = [member(kind, gs, 0), member(kind, gs[:2] + wide, 1)]
    a, b = (m.transform for m in members)
    assert a.to_dict() != b.to_dict() and a.node_dim != b.node_dim
    ens = Model.ensemble(members)
    assert ens.member_transforms is not None
    paths = [str(m.save(tmp_path / f"m{i}.pt")) for i, m in enumerate(members)]
    r = CliRunner().invoke(main, ["ensemble", *paths, "--out", str(tmp_path / "cli.pt")])
    assert r.exit_code == 0 and "each with its own feature transform" in r.output, r.output
    for again in (ens, Model.load(ens.save(tmp_path / "ens.pt"))):
        for g in gs + wide:
            expected = np.mean([score_graph(m, g) for m in members], axis=0)
            np.testing.assert_allclose(score_graph(again, g), expected, rtol=1e-4, atol=1e-5)
            raw = g.config_feat if kind == "tile" else g.node_config_feat
            by_member = np.mean([ConfigScorer(m, g).candidates()(raw) for m in members], 0)
            np.testing.assert_allclose(ConfigScorer(again, g).candidates()(raw), by_member,
                                       rtol=1e-4, atol=1e-5)
            ids = np.arange(8)  # the training path (fine-tuning while autotuning)
            for net in (again.net, *(m.net for m in members)):
                net.eval()  # no dropout
            with torch.no_grad():
                batch = again.net(collate([(again.prepare(g), ids)]))
                alone = [m.net(collate([(m.prepare(g), ids)])) for m in members]
            torch.testing.assert_close(batch, torch.stack(alone).mean(0), rtol=1e-4, atol=1e-5)
    state = ens.state()
    state["member_transforms"] = state["member_transforms"][:1]
    with pytest.raises(UserError, match="1 member transforms for 2 members"):
        Model.from_state(state)


def test_fine_tuning_an_ensemble_of_other_transforms_resumes_from_its_checkpoint(tmp_path):
    """A run resumed from `last.pt` rebuilds every member with its own transform."""
    gs = graphs("layout")
    ens = Model.ensemble([member("layout", gs, 0), member("layout", gs[:1], 1)])
    assert ens.member_transforms is not None
    kw = {"graphs_per_batch": 1, "configs_per_graph": 8, "warmup_steps": 0,
          "progress": False, "warm_start": True}
    fit(ens, gs, None, TrainSettings(epochs=1, **kw), out_dir=tmp_path)
    again = Model.load(ens.save(tmp_path / "after-1.pt"))
    fit(again, gs, None, TrainSettings(epochs=2, **kw), out_dir=tmp_path, resume=True)
    assert again.member_transforms is not None
    assert [t.to_dict() for t in again.member_transforms] == \
        [t.to_dict() for t in ens.member_transforms]


def test_fine_tuning_an_ensemble_trains_every_member():
    gs = graphs("tile")
    ens = Model.ensemble([member("tile", gs, seed) for seed in (0, 1)])
    before = [[p.detach().clone() for p in net.parameters()] for net in ens.net.members]
    fit(ens, gs[:1], None, TrainSettings(epochs=2, steps_per_epoch=1, graphs_per_batch=1,
                                         configs_per_graph=30, warmup_steps=0,
                                         progress=False, warm_start=True))
    for net, old in zip(ens.net.members, before, strict=True):
        assert any(not torch.equal(p, q) for p, q in zip(net.parameters(), old, strict=True))


def test_members_that_are_not_one_model_trained_apart_are_refused():
    gs = graphs("tile")
    a, b = member("tile", gs, 0), member("tile", gs, 1)
    wider = member("tile", gs, 2, dropout=0.2)
    with pytest.raises(UserError, match="b.pt differs from a.pt in its settings"):
        Model.ensemble([a, wider], ["a.pt", "b.pt"])
    with pytest.raises(UserError, match="already an ensemble of 2"):
        Model.ensemble([Model.ensemble([a, b]), a])
    with pytest.raises(UserError, match="at least two models"):
        Model.ensemble([a])


def test_the_ensemble_command_writes_one_model_or_nothing(tmp_path):
    gs = graphs("tile")
    paths = [str(member("tile", gs, seed).save(tmp_path / f"m{seed}.pt")) for seed in (0, 1)]
    out = tmp_path / "ens.pt"
    r = CliRunner().invoke(main, ["ensemble", *paths, "--out", str(out)])
    assert r.exit_code == 0 and "the mean of 2 networks" in r.output, r.output
    ens, first = Model.load(out), Model.load(paths[0])
    assert ens.members == 2
    expected = np.mean([score_graph(Model.load(p), gs[0]) for p in paths], axis=0)
    np.testing.assert_allclose(score_graph(ens, gs[0]), expected, rtol=1e-5, atol=1e-6)
    assert not np.allclose(score_graph(ens, gs[0]), score_graph(first, gs[0]))
    other = str(member("tile", gs, 2, dropout=0.2).save(tmp_path / "other.pt"))
    bad = tmp_path / "bad.pt"
    r = CliRunner().invoke(main, ["ensemble", paths[0], other, "--out", str(bad)])
    refused(r, f"{other} differs from {paths[0]} in its settings", "other seeds")
    assert not bad.exists()


def test_an_ensemble_trained_from_scratch_fits_every_members_rule():
    """A ranker on top of config-only fits the rule before training; an ensemble's
    members each fit theirs, as a single model does, on the same graphs."""
    gs = graphs("tile")
    kw = {"hidden": 16, "opcode_dim": 8, "layers": 1, "ref_configs": 8,
          "prior": "config-only"}
    single = Model("ranker", "tile", **kw)
    single.build(single.fit_transform(gs))
    single.net.fit_prior(single.prepare(g) for g in gs)
    fitted = single.net.prior.rule.state_dict()
    assert fitted["linear_weight"].abs().sum() > 0
    ens = Model("ranker", "tile", **kw)
    ens.members = 2
    fit(ens, gs, settings=TrainSettings(epochs=1, configs_per_graph=8, progress=False))
    for net in ens.net.members:
        for key, value in net.prior.rule.state_dict().items():
            torch.testing.assert_close(value, fitted[key], equal_nan=True)
