"""The models that ship with graphcost (`models.packaged`): they load, rank what their
card says, and `autotune` uses them when no model is given."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from graphcost.cli import main
from graphcost.errors import UserError
from graphcost.models import Model
from graphcost.models.packaged import FILES, HOME, packaged_model


@pytest.mark.parametrize("space, kind, collection", [("layout", "layout", "layout:cpu:random"),
                                                     ("options", "tile", "options:cpu")])
def test_each_packaged_model_loads_and_is_the_one_its_card_describes(space, kind, collection):
    m = Model.load(packaged_model(space))
    assert (m.name, m.kind, m.collection) == ("ranker", kind, collection)
    card = (HOME / "README.md").read_text()
    # the card states the shrinkage each model ships with, and how many networks it
    # averages, as the model holds them
    members = f", an ensemble of {m.members}" if m.members > 1 else "."
    assert f"`{FILES[space].name}`: correction {m.settings.correction:g}{members}" in card
    assert m.settings.prior and 0 <= m.settings.correction <= 1
    assert m.members == (3 if space == "layout" else 1)


def test_a_missing_packaged_model_is_named(monkeypatch, tmp_path):
    monkeypatch.setitem(FILES, "layout", tmp_path / "layout.pt")
    with pytest.raises(UserError, match="packaged layout model .* is missing"):
        packaged_model("layout")
    with pytest.raises(UserError, match="no packaged model of 'tiles'"):
        packaged_model("tiles")


def test_autotune_tunes_layouts_with_the_packaged_model(tmp_path):
    pytest.importorskip("jax")
    report = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["autotune", "mlp.006", "--layouts", "--no-pin", "--budget",
                                    "2", "--samples", "16", "--runs", "3", "--warmup", "1",
                                    "--out", str(tmp_path / "c.json"), "--report",
                                    str(report)])
    assert res.exit_code == 0, res.output
    assert f"the packaged layout model ({FILES['layout']})" in res.output
    assert json.loads(report.read_text())["kind"] == "layout"


def test_a_model_strategy_without_a_model_ranks_with_the_packaged_one():
    pytest.importorskip("jax")
    from graphcost.autotune.costmodel import model_scores
    from graphcost.autotune.program import load_target, prepare
    from graphcost.autotune.tune import autotune
    from graphcost.xla.timing import Protocol

    name, fn, args = load_target("mlp.000")
    r = autotune(fn, args, strategy="model", budget=2, name=name,
                    protocol=Protocol(warmup=1, runs=3, rounds=2, max_run_s=30),
                    confirm_rounds=2)
    t = prepare(name, fn, args, "options")
    candidates = t.configs.enumerate()
    scores = model_scores(Model.load(FILES["options"]), t, candidates, 0)
    asked = [scores[candidates.index(tuple(s.config))] for s in r.steps
             if s.arm == "model" and s.k >= 1]
    assert len(asked) == 2 and asked == sorted(asked)
    assert asked[0] <= np.sort(scores)[1]


def test_layouts_refuse_an_options_model(tmp_path):
    pytest.importorskip("jax")
    res = CliRunner().invoke(main, ["autotune", "mlp.000", "--layouts", "--model",
                                    str(FILES["options"]), "--no-pin", "--out",
                                    str(tmp_path / "x.json")])
    assert res.exit_code == 2 and "--layouts needs a layout model" in res.output, res.output
    assert not (tmp_path / "x.json").exists()
