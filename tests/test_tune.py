"""Tuning by searching while measuring (`autotune.tune`, issue 44): the budget counts
distinct executables, arms share timings but not budgets, the choice is the default
unless confirmed faster, the CLI runs it without a model, and layouts take the same
path with the strategies that need no knobs."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from click.testing import CliRunner

from graphcost.autotune.choice import confirmed_faster
from graphcost.autotune.measure import Measurer
from graphcost.autotune.program import load_target
from graphcost.autotune.strategy import CoordinateSearch, RandomSearch, make_strategy
from graphcost.autotune.tune import AutotuneResult, autotune, format_result, run_arms
from graphcost.cli import main
from graphcost.stats import ratio_interval
from graphcost.xla.options import OPTION_KNOBS
from graphcost.xla.timing import Protocol

NK = len(OPTION_KNOBS)

QUICK = Protocol(warmup=1, runs=3, rounds=2, max_run_s=30)
CHOICES = [3, 2, 4]
SPACE = list(itertools.product(*(range(n) for n in CHOICES)))


class TableMeasurer:
    """A measurer over a known table: knob 1 changes nothing (configs differing only
    there are one executable), knob 2 at 3 is twice as fast. Counts what it times."""

    default_key = (0, 0)

    def __init__(self):
        from graphcost.autotune.space import OptionSearchSpace

        self.timed_keys: list[tuple[int, int]] = []
        space = OptionSearchSpace()
        space.default = lambda: (0, 0, 0)  # this table's three knobs
        self.t = type("T", (), {"configs": space})()

    def measure(self, config):
        key = (config[0], config[2])
        if key != self.default_key and key not in self.timed_keys:
            self.timed_keys.append(key)
        return key, 0.5 if config[2] == 3 else 1.0 + 0.1 * config[0], "ok", ""


def test_budget_counts_distinct_executables_and_arms_share_timings():
    m = TableMeasurer()
    arms = {"coordinate": CoordinateSearch(SPACE, CHOICES, seed=0),
            "random": RandomSearch(SPACE, seed=0)}
    steps = run_arms(arms, m, budget=5, log=lambda _: None)
    for arm in arms:
        mine = [s for s in steps if s.arm == arm]
        assert [s.k for s in mine] == list(range(6))  # the default, then 1..5
        keys = [(s.config[0], s.config[2]) for s in mine]
        assert len(set(keys)) == 6, (arm, keys)  # each step a new executable
        assert [s.best for s in mine] == list(np.minimum.accumulate([s.ratio for s in mine]))
    # every executable was timed once, however many arms or configs reached it
    assert len(m.timed_keys) == len(set(m.timed_keys)) <= 10


def test_an_arm_stops_when_only_executables_it_has_seen_are_left():
    m = TableMeasurer()  # 12 executables: 11 beyond the default
    steps = run_arms({"random": RandomSearch(SPACE, seed=3)}, m, budget=50,
                     log=lambda _: None)
    assert [s.k for s in steps] == list(range(12))


@pytest.mark.parametrize("speedup, low, high, chosen", [
    (1.30, 1.10, 1.50, True), (1.30, 0.99, 1.70, False), (1.01, 1.005, 1.015, False),
    (0.90, 0.85, 0.95, False)])
def test_a_config_is_chosen_only_when_confirmed_faster(speedup, low, high, chosen):
    assert confirmed_faster(speedup, low, high) is chosen


def test_unknown_strategies_are_refused():
    from graphcost.errors import UserError

    with pytest.raises(UserError, match="unknown strategy 'annealing'.*coordinate"):
        make_strategy("annealing", SPACE, CHOICES)
    name, fn, args = load_target("mlp.000")
    with pytest.raises(UserError, match="unknown strategy 'annealing'"):
        autotune(fn, args, compare=["annealing"], budget=2)
    with pytest.raises(UserError, match="'prior-trees' needs a move prior"):
        make_strategy("prior-trees", SPACE, CHOICES)


@pytest.fixture(scope="module")
def tuned() -> AutotuneResult:
    name, fn, args = load_target("mlp.000")
    return autotune(fn, args, budget=3, compare=["random"], name=name, protocol=QUICK,
                       confirm_rounds=3)


def test_online_tuning_reports_what_it_measured_and_confirmed(tuned):
    r = tuned
    assert r.arms == ["coordinate", "random"] and r.budget == 3
    for arm in r.arms:
        ks = [s.k for s in r.steps if s.arm == arm]
        assert ks == list(range(len(ks))) and 2 <= len(ks) <= 4
        assert len(r.curve(arm)) == 3 and all(c >= 1 for c in r.curve(arm))
    # the figures come from the confirmation rounds alone
    for arm in r.arms:
        assert r.found[arm] == pytest.approx(list(ratio_interval(r.confirmed["default"],
                                                                 r.confirmed[arm])))
        kept = confirmed_faster(*r.found[arm])
        assert r.speedup[arm] == (r.found[arm] if kept else [1.0, 1.0, 1.0])
    assert (r.chosen == r.bests["coordinate"]) == confirmed_faster(*r.found["coordinate"]) \
        or r.bests["coordinate"] == [0] * len(r.chosen)
    assert len(r.confirmed["default"]) == 3
    text = format_result(r)
    assert "coordinate ÷ random" in text and "timed again" in text
    json.dumps(r.to_dict())  # the report is plain JSON


def test_the_chosen_config_applies_and_matches_jit(tuned, tmp_path):
    import graphcost.autotune as at

    name, fn, args = load_target("mlp.000")
    path = at.save_config(tuned.config, tmp_path / "c.json")
    run = at.apply(fn, args, path)
    assert at.chosen.agrees_with_jit(fn, args, run)


def test_measurer_times_a_new_executable_beside_the_default_and_reuses_it():
    from graphcost.autotune.program import prepare

    name, fn, args = load_target("mlp.000")
    t = prepare(name, fn, args, "options")
    m = Measurer(t, QUICK, None)
    fast_math = tuple(1 if k.name == "fast_math" else 0 for k in t.configs.knobs)
    key, ratio, status, _ = m.measure(fast_math)
    assert status == "ok" and 0.2 < ratio < 5 and key != m.default_key
    again = m.measure(fast_math)
    assert again[:2] == (key, ratio) and len(m.timed) == 2  # not timed twice
    assert list(m.compiled) == [fast_math]  # nor compiled twice
    assert m.measure(t.configs.default())[:2] == (m.default_key, 1.0)


def test_cli_autotune_searches_options_without_a_model(tmp_path):
    cfg, report = tmp_path / "cfg.json", tmp_path / "r.json"
    res = CliRunner().invoke(main, ["autotune", "mlp.001", "--budget", "2", "--compare",
                                    "random", "--no-pin", "--runs", "3", "--warmup", "1",
                                    "--confirm-rounds", "2", "--out", str(cfg),
                                    "--report", str(report)])
    assert res.exit_code == 0, res.output
    assert "best so far" in res.output and "coordinate ÷ random" in res.output
    r = json.loads(report.read_text())
    assert json.loads(cfg.read_text()) == r["config"] and r["budget"] == 2
    bad = CliRunner().invoke(main, ["autotune", "mlp.001", "--strategy", "annealing",
                                    "--no-pin", "--out", str(tmp_path / "x.json")])
    assert bad.exit_code == 2 and "annealing" in bad.output and not (tmp_path / "x.json").exists()


@pytest.fixture(scope="module")
def options_model():
    """A tiny ranker of compiler options (synthetic tile graphs, named options:cpu)."""
    import torch

    from graphcost.data.synthetic import make_tile_graph
    from graphcost.models import Model
    from graphcost.train import TrainSettings, fit

    rng = np.random.default_rng(0)
    graphs = [make_tile_graph(rng, num_nodes=15, num_configs=12, name=f"g{i}") for i in range(3)]
    torch.manual_seed(0)
    m = Model("ranker", "tile", hidden=8, opcode_dim=4, layers=1, ref_configs=4)
    fit(m, graphs, settings=TrainSettings(epochs=1, configs_per_graph=6, progress=False))
    m.collection = "options:cpu"
    return m


def test_a_model_strategy_measures_in_the_models_order(options_model):
    from graphcost.autotune.costmodel import model_scores
    from graphcost.autotune.program import prepare

    name, fn, args = load_target("mlp.000")
    r = autotune(fn, args, strategy="model", model=options_model, budget=3,
                    name=name, protocol=QUICK, confirm_rounds=2)
    t = prepare(name, fn, args, "options")
    candidates = t.configs.enumerate()
    scores = model_scores(options_model, t, candidates, 0)
    asked = [scores[candidates.index(tuple(s.config))] for s in r.steps
             if s.arm == "model" and s.k >= 1]
    assert len(asked) == 3 and asked == sorted(asked)
    assert asked[0] <= np.sort(scores)[1]  # the best, or the next if the best is the default


def test_a_model_of_the_other_space_and_knobwise_layout_searches_are_refused(
        tiny_model, options_model):
    from graphcost.errors import UserError

    name, fn, args = load_target("mlp.000")
    with pytest.raises(UserError, match="layout model cannot rank compiler options"):
        autotune(fn, args, model=tiny_model, space="options", budget=1)
    with pytest.raises(UserError, match="unknown space 'layouts'; expected one of"):
        autotune(fn, args, space="layouts", budget=1)
    with pytest.raises(UserError, match="options model cannot rank layouts.*layout:cpu:random"):
        autotune(fn, args, model=options_model, space="layout", budget=1)
    with pytest.raises(UserError, match="'coordinate', 'tpe' moves knob by knob: layouts "
                                        "are searched by model or random"):
        autotune(fn, args, model=tiny_model, compare=["coordinate", "tpe"], budget=1)


# ------------------------------------------------------------------ bench online


def _row(name, coord, rand):
    return {"program": name, "speedup": {"coordinate": [coord, 0, 0], "random": [rand, 0, 0]},
            "found": {"coordinate": [coord, 0, 0], "random": [rand, 0, 0]}}


def test_bench_online_summary_is_over_programs_with_stored_headroom():
    from graphcost.bench.online import summarize_online

    rows = [_row("a", 1.2, 1.1), _row("b", 1.5, 1.0), _row("c", 1.0, 1.0)]
    s = summarize_online(rows, ["coordinate", "random"], {"a": 1.3, "b": 1.12, "c": 1.01}, 1.10)
    assert s["names"] == ["a", "b"] and s["programs"] == 3
    assert s["speedup"]["coordinate"][0] == pytest.approx((1.2 * 1.5) ** 0.5)
    assert s["speedup_over"]["random"][0] == pytest.approx((1.2 / 1.1 * 1.5) ** 0.5)
    every = summarize_online(rows, ["coordinate", "random"], None, 1.10)
    assert every["headroom_programs"] == 3


def test_stored_headroom_reads_each_programs_best_over_its_default(tmp_path):
    from graphcost.bench.online import stored_headroom
    from graphcost.data.synthetic import make_tile_graph
    from graphcost.formats.npz import write_graph
    from graphcost.xla.options import OptionConfig

    g = make_tile_graph(np.random.default_rng(0), num_nodes=10, num_configs=3, name="p.000")
    g.config_feat = np.stack([OptionConfig(c).features() for c in
                              [(0,) * NK, (1,) + (0,) * (NK - 1), (0, 1) + (0,) * (NK - 2)]])
    g.config_runtime = np.array([300, 200, 400])
    write_graph(tmp_path / "npz" / "options" / "cpu" / "test" / "p.000.npz", g)
    assert stored_headroom(tmp_path / "npz" / "options" / "cpu") == {"p.000": 1.5}


def test_bench_online_resumes_from_its_rows(tmp_path, monkeypatch):
    import graphcost.autotune.tune as tune

    args = ["bench", "online", "--programs", "mlp.000", "--budget", "1", "--out",
            str(tmp_path), "--strategies", "coordinate,random", "--runs", "3", "--warmup", "1",
            "--confirm-rounds", "2", "--json", str(tmp_path / "b.json")]
    res = CliRunner().invoke(main, [*args, "--plot", str(tmp_path / "curves.png")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    first = json.loads((tmp_path / "b.json").read_text())
    assert [r["program"] for r in first["rows"]] == ["mlp.000"]
    assert set(first["rows"][0]["speedup"]) == {"coordinate", "random"}

    def no_measuring(*_a, **_k):
        raise AssertionError("a row that was kept is measured again")

    monkeypatch.setattr(tune, "autotune", no_measuring)
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0 and "reused" in res.output, res.output
    assert json.loads((tmp_path / "b.json").read_text())["rows"] == first["rows"]


def test_prior_search_online_first_measures_the_bundled_priors_best_move():
    from graphcost.autotune.table import bundled_prior

    prior = bundled_prior()
    knob, value = max(prior, key=prior.get)
    name, fn, args = load_target("mlp.000")
    r = autotune(fn, args, budget=1, strategy="prior-trees", name=name, protocol=QUICK,
                    confirm_rounds=2)
    expected = [value if k == knob else 0 for k in range(len(r.chosen))]
    assert r.arms == ["prior-trees"] and r.steps[1].config == expected


def test_bench_online_tunes_layouts_in_the_models_order(tmp_path, tiny_model):
    model = tiny_model.save(tmp_path / "layout.pt")
    res = CliRunner().invoke(main, ["bench", "online", "--programs", "mlp.000", "--layouts",
                                    "--model", str(model), "--budget", "2", "--out",
                                    str(tmp_path), "--runs", "3", "--warmup", "1",
                                    "--confirm-rounds", "2", "--json", str(tmp_path / "b.json")])
    assert res.exit_code == 0, res.output
    row = json.loads((tmp_path / "b.json").read_text())["rows"][0]
    assert set(row["speedup"]) == {"model", "random"}  # the layout strategies by default
    assert row["spec"]["space"] == "layout" and row["spec"]["model"] == str(model)
    assert all(isinstance(c, list) for c in row["bests"].values())  # layouts, as JSON
