"""Autotuning: the scorer cache, the search, and one real program tuned end to end.

The end-to-end model is a tiny ranker trained on two zoo MLPs measured here (6 layout
configs each, 3 timed runs): real measurements in the program's own config encoding,
far too few to make the model good. The tests check that the report is consistent
with its measurements, not that the model finds speed-ups.
"""

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from graphcost.autotune.choice import MIN_GAIN, clearly_faster, confirmed_faster
from graphcost.autotune.search import search
from graphcost.autotune.space import OptionSearchSpace
from graphcost.data.synthetic import make_layout_graph, make_tile_graph
from graphcost.models import ConfigScorer, Model
from graphcost.xla.options import OPTION_KNOBS

torch.set_num_threads(1)

# ------------------------------------------------------------------ scorer cache


@pytest.mark.parametrize("name,kind", [("ranker", "layout"), ("ranker", "tile"),
                                       ("resgcn", "layout"), ("sage-late", "tile")])
def test_scorer_matches_predict_with_and_without_cache(name, kind):
    rng = np.random.default_rng(0)
    g = (make_layout_graph(rng, num_nodes=60, num_configs=40, name="l") if kind == "layout"
         else make_tile_graph(rng, num_nodes=20, num_configs=30, name="t"))
    torch.manual_seed(0)
    ranker = {"ref_configs": 8, **({"prior": ""} if kind == "layout" else {})}  # a network's
    m = Model(name, kind, **(ranker if name == "ranker" else {}))  # scores, not a rule's
    m.build(m.fit_transform([g]))
    m.net.train()  # the scorer must not depend on the mode the net was left in
    ids = np.array([5, 0, 17, 3, 29, 11])
    raw = g.configs(ids) if kind == "layout" else g.config_feat[ids]
    want = ConfigScorer(m, g).scores(ids)
    cached = ConfigScorer(m, g, chunk_size=4).candidates()
    np.testing.assert_allclose(cached(raw), want, rtol=1e-5, atol=1e-6)
    uncached = ConfigScorer(m, g).candidates(cache=False)
    np.testing.assert_allclose(uncached(raw), want, rtol=1e-5, atol=1e-6)
    # a config's score does not depend on the others scored with it
    np.testing.assert_allclose(cached(raw[2:3]), want[2:3], rtol=1e-5, atol=1e-6)
    assert m.net.training
    assert cached(raw[:0]).shape == (0,)


# ------------------------------------------------------------------ search


def _linear_score(space: OptionSearchSpace, seed: int):
    w = np.random.default_rng(seed).standard_normal(24)

    def score(feats: np.ndarray) -> np.ndarray:
        return feats @ w

    score.w = w
    return score


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_search_is_never_worse_than_the_best_sampled(seed):
    space = OptionSearchSpace()
    rng = np.random.default_rng(seed)
    score = _linear_score(space, seed)
    initial = space.sample(64, rng)
    res = search(space, score, initial, rng, evaluations=600, population=8, round_size=64)
    assert res.sampled == len(initial) and not res.exhaustive
    assert len(res.configs) <= 600
    assert len({space.key(c) for c in res.configs}) == len(res.configs)  # each scored once
    assert res.best_score <= res.best_sampled_score
    np.testing.assert_allclose(res.scores, score(space.encode(res.configs)))
    assert res.configs[0] == space.default()
    # on a separable objective one-knob moves reach the optimum of all 24576 configs
    # (for seed 1 the default is already optimal, so there is nothing to improve)
    assert res.best_score == pytest.approx(min(space.encode(space.enumerate()) @ score.w))
    assert seed == 1 or res.best_score < res.best_sampled_score


def test_search_small_space_is_exhaustive():
    space = OptionSearchSpace(OPTION_KNOBS[:4])  # 2 * 2 * 2 * 4 = 32 configs
    w = np.random.default_rng(3).standard_normal(24)
    res = search(space, lambda f: f @ w, space.sample(8, np.random.default_rng(0)),
                 np.random.default_rng(0), evaluations=100)
    assert res.exhaustive and len(res.configs) == space.size() == 32
    assert res.best_score == pytest.approx(min(space.encode(space.enumerate()) @ w))


# ------------------------------------------------------------------ end to end


def test_autotune_tunes_layouts_in_the_models_order_and_confirms(tiny_model, tmp_path):
    import jax

    import graphcost
    from graphcost.autotune import apply, load_config, save_config
    from graphcost.autotune.costmodel import model_scores
    from graphcost.autotune.program import prepare
    from graphcost.xla.programs import make_program
    from graphcost.xla.timing import Protocol, outputs_agree

    name, fn, args = make_program("mlp", 5)
    budget = 3
    r = graphcost.autotune(fn, args, model=tiny_model, name=name, budget=budget, samples=32,
                           compare=["random"],
                           protocol=Protocol(warmup=1, runs=3, rounds=2, max_run_s=30),
                           confirm_rounds=3, seed=0)
    assert r.kind == "layout" and r.arms == ["model", "random"] and r.candidates == 32
    # the model arm asks in the model's order over the sampled plans (the default told first)
    t = prepare(name, fn, args, "layout")
    plans = t.configs.sample(32, np.random.default_rng(0))
    scores = model_scores(tiny_model, t, plans, 0)
    index = {json.dumps(t.configs.to_json(p)): i for i, p in enumerate(plans)}
    model = [s for s in r.steps if s.arm == "model"]
    assert model[0].config == [] and model[0].ratio == 1.0  # the default, free
    asked = [scores[index[json.dumps(s.config)]] for s in model[1:]]
    assert 1 <= len(asked) <= budget and asked == sorted(asked)
    assert all(json.dumps(s.config) in index for s in r.steps)  # every step a candidate
    # the figures come from the confirmation rounds alone; the choice is the default
    # unless confirmed faster there
    assert len(r.confirmed["default"]) == 3
    for arm in r.arms:
        kept = confirmed_faster(*r.found[arm])
        assert r.speedup[arm] == (r.found[arm] if kept else [1.0, 1.0, 1.0])
    assert r.kept_default == (r.chosen == [])
    json.dumps(r.to_dict())
    assert "model ÷ random" in graphcost.autotune.format_result(r)

    # the chosen config round-trips through JSON and applies; so does the model's first pick
    path = save_config(r.config, tmp_path / "config.json")
    assert load_config(path) == r.config
    first = t.config_json(plans[int(np.argsort(scores, kind="stable")[0])])
    want = jax.tree.leaves(jax.jit(fn)(*args))
    for config in (load_config(path), first):
        run = apply(fn, args, config)
        assert outputs_agree(jax.tree.leaves(run(*args)), want)


def test_cli_autotune_layouts_and_apply(tiny_model, tmp_path):
    from graphcost.cli import main

    model_path = tiny_model.save(tmp_path / "model.pt")
    cfg = tmp_path / "cfg.json"
    small = ["--no-pin", "--budget", "2", "--samples", "16", "--runs", "3", "--warmup", "1",
             "--confirm-rounds", "2"]
    res = CliRunner().invoke(main, ["autotune", "mlp.006", "--model", str(model_path),
                                    "--out", str(cfg), "--report", str(tmp_path / "r.json"),
                                    *small])
    assert res.exit_code == 0, res.output
    assert "model search of layout" in res.output and "apply(fn, args" in res.output
    assert "best so far" in res.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["arms"] == ["model"] and report["kind"] == "layout"
    assert json.loads(cfg.read_text()) == report["config"]
    res = CliRunner().invoke(main, ["apply", str(cfg), "mlp.006"])
    assert res.exit_code == 0, res.output
    assert "outputs match" in res.output
    bad = CliRunner().invoke(main, ["autotune", "nosuchfamily.000", "--model", str(model_path),
                                    "--no-pin"])
    assert bad.exit_code != 0 and "zoo program" in bad.output


def test_speedup_interval_is_a_t_interval_over_rounds_of_log_ratios():
    from scipy import stats

    from graphcost.stats import ratio_interval

    slow, fast = [110.0, 120.0, 100.0, 130.0], [100.0, 100.0, 100.0, 100.0]
    d = np.log(np.array(slow) / 100.0)
    half = stats.t.ppf(0.975, 3) * d.std(ddof=1) / 2.0
    got = ratio_interval(slow, fast)
    assert got == pytest.approx((np.exp(d.mean()), np.exp(d.mean() - half),
                                 np.exp(d.mean() + half)))
    assert ratio_interval([5.0, 5.0], [5.0, 5.0]) == (1.0, 1.0, 1.0)


def test_apply_hands_the_arguments_straight_to_the_executable(monkeypatch):
    """A call of `apply`'s program moves no argument: before, it put every argument with
    jax.device_put on each call and cost 2-5x a jit call (the figure is `graphcost bench
    apply`'s); `place` is the one that moves them, once."""
    import jax

    from graphcost.autotune import apply
    from graphcost.bench.apply import moved_parameter_config
    from graphcost.xla.programs import make_program

    name, fn, args = make_program("mlp", 5)
    config = moved_parameter_config(name, fn, args)
    assert config is not None
    run = apply(fn, args, config)
    puts = []
    real_put = jax.device_put
    monkeypatch.setattr(jax, "device_put", lambda *a, **k: puts.append(a) or real_put(*a, **k))
    jax.block_until_ready(run(*args))
    assert puts == []
    placed = jax.tree.leaves(run.place(*args))
    assert len(puts) == len(jax.tree.leaves(args))
    assert [x.format for x in placed] == list(run.compiled.input_formats[0])


def test_bench_apply_prints_a_row_per_config_and_the_geometric_mean(tmp_path):
    from graphcost.cli import main

    out = tmp_path / "apply.json"
    res = CliRunner().invoke(main, ["bench", "apply", "--programs", "mlp.005", "--calls", "3",
                                    "--rounds", "1", "--json", str(out)])
    assert res.exit_code == 0, res.output
    result = json.loads(out.read_text())
    assert [r["config"] for r in result["rows"]] == ["default", "argument layouts moved"]
    for r in result["rows"]:
        assert r["ratio"] == pytest.approx(r["apply_us"] / r["tuned_jit_us"])
        assert r["program"] in res.output and r["config"] in res.output
    assert "geometric mean over rows" in res.output


@pytest.mark.parametrize("default, config, clear", [
    ([100, 101], [80, 81], True),  # 25% faster, rounds within 1%
    ([100, 101], [99, 99.5], False),  # 1% faster: under MIN_GAIN
    ([100, 150], [80, 81], False),  # 25% faster, but the default's rounds differ by 50%
    ([100, 101], [80, 110], False),  # 25% faster in one round, slower in the other
    ([100, 101], [110, 111], False),  # slower
    ([100], [100 / (1 + MIN_GAIN) - 0.01], True),  # one round each: MIN_GAIN alone
    ([100, 101], [], False),  # nothing measured
])
def test_clearly_faster_needs_a_gain_beyond_min_gain_and_the_rounds_noise(default, config,
                                                                          clear):
    assert clearly_faster(default, config) is clear
