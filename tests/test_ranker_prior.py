"""The ranker learning on top of a heuristic (`RankerSettings.prior`): it starts from the
rule exactly, every scoring path adds the same weighted rule, config-only is fitted to
the train graphs before training, GST training runs with it, and a rule of the wrong
kind is refused."""

from collections.abc import Callable

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from test_gst import gst_settings, layout_split
from test_heuristics import LAYOUTS, layout_graph, tile_graph

from graphcost.cli import main
from graphcost.data.synthetic import write_collection
from graphcost.errors import SettingsError
from graphcost.models import Model, score_graph
from graphcost.train import TrainSettings, fit
from graphcost.xla.options import OPTION_KNOBS

torch.set_num_threads(1)
MIB = 2.0**20
NK = len(OPTION_KNOBS)


def built(kind: str, graphs: list, **settings) -> Model:
    m = Model("ranker", kind, **settings)
    return m.build(m.fit_transform(graphs))


@pytest.mark.parametrize("prior, rule", [
    ("fewest-changes", [0, 1, 1, 2, 1]),  # layouts moved
    ("moved-bytes", [0, 16 / MIB, 16384 / MIB, 16400 / MIB, 16 / MIB]),  # MiB moved
    ("changed-bytes", [0, 16 / MIB, 16384 / MIB, 16400 / MIB, 16 / MIB]),  # every move changes
])
def test_a_ranker_with_a_prior_starts_from_the_rule(prior, rule):
    g = layout_graph(LAYOUTS)
    m = built("layout", [g], prior=prior)
    np.testing.assert_allclose(score_graph(m, g), np.log1p(rule), rtol=1e-6)


def test_each_ranker_learns_on_top_of_its_rule_unless_told_otherwise():
    assert Model("ranker", "layout").settings.prior == "changed-bytes"
    assert Model("ranker", "layout").settings.correction == 1.0
    tile = Model("ranker", "tile").settings
    assert (tile.prior, tile.correction) == ("config-only", 0.3)
    assert Model("ranker", "layout", prior="").settings.prior == ""
    assert Model("ranker", "tile", prior="").settings.prior == ""  # the default 0.3 unused
    r = CliRunner().invoke(main, ["train", "--help"])
    flat = " ".join(r.output.split())
    assert "[layout: 'changed-bytes'] [tile: 'config-only']" in flat, r.output
    assert "always uses 1 [tile: 0.3]" in flat, r.output


RULE = np.log1p([0, 1, 1, 2, 1])  # fewest-changes on LAYOUTS, squashed


def trained_looking() -> tuple[Model, Callable[[], list[np.ndarray]]]:
    """A layout ranker on top of fewest-changes with a random last layer (as if trained),
    and its scores of LAYOUTS on each path: the fast path, the plain path and the scorer
    of configs outside the graph."""
    g = layout_graph(LAYOUTS)
    m = built("layout", [g], prior="fewest-changes")
    torch.manual_seed(0)
    torch.nn.init.normal_(m.net.head[1].lins[-1].weight)
    gt = m.prepare(g)
    ids = np.arange(len(LAYOUTS))

    def paths() -> list[np.ndarray]:
        m.net.eval()
        return [m.net.score_configs(gt, ids).numpy(),
                m.net.score_configs(gt, ids, fast=False).numpy(),
                m.net.config_scorer(gt)(gt.configs(ids)).numpy()]

    return m, paths


def test_every_scoring_path_adds_the_same_weighted_rule():
    """Each path's scores are the network's own plus w · log(1 + moved layouts): setting
    w to 0 removes exactly that."""
    m, paths = trained_looking()
    rule = RULE

    with torch.no_grad():
        m.net.prior.weight.fill_(0.7)
    weighted = paths()
    with torch.no_grad():
        m.net.prior.weight.fill_(0.0)
    plain = paths()
    assert np.ptp(plain[0]) > 1e-3  # the head is not flat: the test can tell paths apart
    for w, p in zip(weighted, plain, strict=True):
        np.testing.assert_allclose(w - p, 0.7 * rule, atol=1e-5)


def test_config_only_prior_is_fitted_before_training_and_saved(tmp_path):
    """The rule underneath a tile ranker is config-only fitted on the train graphs (its
    scores equal those of config-only trained alone), and loads back with the model."""
    rng = np.random.default_rng(0)

    def graph(i: int):
        a, b = rng.integers(0, 2, 12), rng.integers(0, 4, 12)
        opts = [(int(x), 0, 0, int(y)) + (0,) * (NK - 4) for x, y in zip(a, b, strict=True)]
        log_t = 3.0 * i + 0.7 * a + np.array([0.0, 0.5, -0.2, 0.3])[b]
        return tile_graph(opts, np.exp(log_t) * 1e6, name=f"g{i}")

    train = [graph(i) for i in range(4)]
    m = Model("ranker", "tile", prior="config-only", hidden=8, opcode_dim=4, attn_layers=0)
    fit(m, train, None, TrainSettings(epochs=1, progress=False, seed=0))
    alone = Model("config-only", "tile")
    fit(alone, train, None, TrainSettings(epochs=1, progress=False, seed=0))
    new = graph(9)
    gt = m.prepare(new)
    ids = np.arange(gt.num_configs)
    prior = m.net.prior.rule.config_scores(gt.configs(ids), gt).detach().numpy()
    np.testing.assert_allclose(prior, score_graph(alone, new), atol=1e-5)
    assert np.ptp(prior) > 0.5  # fitted: an unfitted rule ties every config
    loaded = Model.load(m.save(tmp_path / "model.pt"))
    np.testing.assert_allclose(score_graph(loaded, new), score_graph(m, new), atol=1e-6)


def test_gst_training_runs_with_a_prior():
    train = layout_split(0, 2, "t", nodes=120)
    m = Model("ranker", "layout", prior="fewest-changes", hidden=16, opcode_dim=8,
              segment_size=40)
    result = fit(m, train, None, gst_settings(epochs=1, head_finetune_epochs=0))
    assert all(np.isfinite(h["train_loss"]) for h in result["history"])
    assert m.net.prior.weight.item() != 1.0  # the rule's weight was trained


@pytest.mark.parametrize("kind, prior", [("tile", "moved-bytes"), ("layout", "config-only")])
def test_a_prior_of_the_other_kind_is_refused(kind, prior):
    one = (1,) + (0,) * (NK - 1)
    g = layout_graph(LAYOUTS) if kind == "layout" else tile_graph([(0,) * NK, one])
    with pytest.raises(SettingsError, match=f"prior='{prior}': a {kind} ranker can learn on"):
        built(kind, [g], prior=prior)


def test_cli_refuses_an_unknown_prior(tmp_path):
    data = write_collection(tmp_path / "l", "layout", splits={"train": 2, "valid": 1},
                            num_nodes=20, num_configs=8)
    r = CliRunner().invoke(main, ["train", str(data), "--set", "prior=fastest",
                                  "--out", str(tmp_path / "run")])
    assert r.exit_code == 2 and "prior" in r.output and "moved-bytes" in r.output, r.output
    assert "Traceback" not in r.output


def test_correction_weighs_the_learned_part_on_every_scoring_path():
    """`correction` c scores c · (network) + w · rule on every path: 0 leaves the rule
    alone, 1 is the ranker as trained; without a rule underneath it is refused."""
    m, scores = trained_looking()
    rule = RULE

    def paths(c: float) -> list[np.ndarray]:
        m.net.s.correction = c
        return scores()

    with torch.no_grad():
        m.net.prior.weight.fill_(0.7)
    full, quarter, none = paths(1.0), paths(0.25), paths(0.0)
    assert np.ptp(full[0] - 0.7 * rule) > 1e-3  # the network's part is not flat
    for f, q, n in zip(full, quarter, none, strict=True):
        np.testing.assert_allclose(n, 0.7 * rule, atol=1e-6)
        np.testing.assert_allclose(q, 0.7 * rule + 0.25 * (f - 0.7 * rule), atol=1e-5)
    with pytest.raises(SettingsError, match="needs a 'prior'"):
        Model("ranker", "tile", prior="", correction=0.5)
    assert Model("ranker", "tile", prior="config-only", correction=0.5).settings.correction \
        == 0.5
