"""Learning while measuring: the cost model's update, save/load, the batch loop, and the
pool benchmark's exact expectation of random search.

The cost model is the tiny ranker of `conftest.tiny_model`, fine-tuned on runtimes of a
zoo MLP measured here (the model never saw that program), so what `update` learns from
is real timing, not a target computed by hand.
"""

import itertools
import json
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from graphcost.autotune.costmodel import (
    CostModel,
    batch_sizes,
    finetune_settings,
    learn_while_measuring,
)
from graphcost.autotune.search import best_of
from graphcost.errors import UserError
from graphcost.stats import expected_best_of_random

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def measured_pool():
    """mlp.003 (outside tiny_model's training programs), 10 sampled configs measured."""
    pytest.importorskip("jax", reason="measuring needs JAX, the extra graphcost[xla]")
    from graphcost.autotune.measure import measure
    from graphcost.autotune.program import prepare
    from graphcost.xla.programs import make_program
    from graphcost.xla.timing import Protocol

    name, fn, args = make_program("mlp", 3)
    t = prepare(name, fn, args, "layout")
    pool = t.configs.sample(10, np.random.default_rng(1))
    runtime = np.array([r.runtime_ns if r.ok else np.nan
                        for r in measure(t, pool, Protocol(warmup=1, runs=3, max_run_s=30))])
    assert np.isfinite(runtime).sum() >= 8
    return t, pool, runtime


def _clear_pairs_agreement(scores: np.ndarray, runtime: np.ndarray) -> float:
    """Share of the pairs whose runtimes differ by more than the timing noise (15 %) that
    `scores` order as measured."""
    i, j = np.triu_indices(len(runtime), 1)
    clear = np.abs(np.log(runtime[i] / runtime[j])) > np.log(1.15)
    assert clear.sum() >= 5
    return float((np.sign(scores[i] - scores[j]) == np.sign(runtime[i] - runtime[j]))[clear].mean())


# mlp.003's measured_pool timed on one idle core (Protocol(warmup=2, runs=15), taskset -c
# 1, 2026-11-25), the fifth replaced by NaN as a failed config. Recorded, so that what
# `update` is asked to fit is the same on every machine and every run.
RECORDED_NS = np.array([365744., 422880., 503299., 499884., np.nan, 457702., 380878.,
                        417662., 404713., 436450.])


@pytest.fixture(scope="module")
def seeded_model():
    """A tiny layout ranker trained from a fixed seed on fixed synthetic graphs: the same
    weights on every run, unlike `tiny_model`, which learns from runtimes timed now."""
    from graphcost.data.synthetic import make_layout_graph
    from graphcost.models import Model
    from graphcost.train import TrainSettings, fit

    rng = np.random.default_rng(0)
    graphs = [make_layout_graph(rng, num_nodes=40, num_configs=12, name=f"s{i}")
              for i in range(2)]
    torch.manual_seed(0)
    m = Model("ranker", "layout", hidden=16, opcode_dim=8, layers=1, ref_configs=8)
    fit(m, graphs, settings=TrainSettings(epochs=2, configs_per_graph=6, progress=False))
    return m


def test_update_fits_the_measurements_and_leaves_the_callers_model_alone(
        seeded_model, measured_pool):
    t, pool, _ = measured_pool
    runtime = RECORDED_NS
    before_state = {k: v.clone() for k, v in seeded_model.net.state_dict().items()}
    ok = np.isfinite(runtime)
    # Fine-tuned on the runtimes and, in a second model, on their reverse: the untuned
    # model cannot agree with both orders, so agreeing with each after `update` shows
    # that it learns what it is given. Every input is fixed (seeded model, recorded
    # runtimes, one thread), so the outcome is the same on every run.
    for target in (runtime, 1e12 / runtime):
        cm = CostModel(seeded_model, t, pool, finetune_settings(steps=200, lr=3e-3))
        before = cm.predict(pool)
        # one measurement alone cannot rank anything: recorded, no training
        assert not cm.update(pool[:1], target[:1]) and cm.updates == 0
        assert np.array_equal(cm.predict(pool), before)
        assert cm.update(pool[1:], target[1:]) and cm.updates == 1
        assert len(cm.runtime_ns) == ok.sum()  # the failed one (NaN) left out
        assert _clear_pairs_agreement(cm.predict(pool)[ok], target[ok]) >= 0.8
    for k, v in seeded_model.net.state_dict().items():  # fine-tuned a private copy
        assert torch.equal(v, before_state[k]), k
    assert np.array_equal(CostModel(seeded_model, t, pool).predict(pool), before)


def test_save_and_load_keep_the_model_and_the_measurements(tiny_model, measured_pool,
                                                           tmp_path):
    t, pool, runtime = measured_pool
    cm = CostModel(tiny_model, t, pool)
    cm.update(pool[:6], runtime[:6])
    path = cm.save(tmp_path / "cm.pt")
    back = CostModel.load(path, t)
    assert np.array_equal(back.predict(pool), cm.predict(pool))
    assert np.array_equal(back.runtime_ns, cm.runtime_ns)
    assert np.array_equal(back.measured, cm.measured) and back.updates == cm.updates
    back.update(pool[6:], runtime[6:])  # learning goes on from where it stopped
    assert len(back.runtime_ns) == np.isfinite(runtime).sum()

    other = type(t)(**{**vars(t), "name": "another"})
    with pytest.raises(UserError, match="a cost model of 'mlp.003'"):
        CostModel.load(path, other)
    tiny_model.save(tmp_path / "model.pt")
    with pytest.raises(UserError, match="not a graphcost cost model"):
        CostModel.load(tmp_path / "model.pt", t)
    state = torch.load(path, weights_only=False)
    del state["runtime_ns"]
    torch.save(state, tmp_path / "cut.pt")
    with pytest.raises(UserError, match=r"cut\.pt: not a complete graphcost cost model: it "
                                        r"has no 'runtime_ns'"):
        CostModel.load(tmp_path / "cut.pt", t)


def test_warm_start_fine_tunes_the_fitted_network(tiny_model, measured_pool):
    from graphcost.models import Model
    from graphcost.train import TrainSettings, fit

    t, pool, runtime = measured_pool
    ok = np.isfinite(runtime)
    kept = [c for c, o in zip(pool, ok, strict=True) if o]
    graph = t.graph_of(t.configs.encode(kept), runtime[ok])
    m = Model.from_state(tiny_model.state())
    net = m.net
    settings = TrainSettings(epochs=1, lr=1e-12, warmup_steps=0, progress=False,
                             warm_start=True)
    fit(m, [graph], settings=settings)
    assert m.net is net and m.transform.to_dict() == tiny_model.transform.to_dict()
    for k, v in tiny_model.net.state_dict().items():
        assert torch.allclose(m.net.state_dict()[k], v, atol=1e-6), k
    fit(m, [graph], settings=TrainSettings(epochs=1, progress=False))
    assert m.net is not net  # without warm_start: a new transform and network
    with pytest.raises(ValueError, match="warm_start needs a fitted model"):
        fit(Model("ranker", "layout"), [graph], settings=settings)


@pytest.mark.parametrize("k,batches", [(5, 1), (5, 2), (5, 3), (4, 2), (2, 5)])
def test_batch_sizes_spend_exactly_k_smallest_first(k, batches):
    sizes = batch_sizes(k, batches)
    assert sum(sizes) == k and len(sizes) == min(k, batches)
    assert sizes == sorted(sizes) and max(sizes) - min(sizes) <= 1


def test_batch_sizes_refuse_nothing_to_measure():
    with pytest.raises(UserError, match="at least 1"):
        batch_sizes(0, 2)


def test_learning_loop_measures_k_distinct_new_configs_and_proposes_afresh(
        tiny_model, measured_pool):
    t, pool, runtime = measured_pool
    cm = CostModel(tiny_model, t, pool)
    key = t.configs.key
    index = {key(c): i for i, c in enumerate(pool)}
    proposals = []

    def propose():
        proposals.append(cm.updates)  # which model state proposed this batch
        return [pool[i] for i in np.argsort(cm.predict(pool), kind="stable")]

    def measure(configs):
        return runtime[[index[key(c)] for c in configs]]

    cm.update([pool[0]], runtime[[0]])
    out = learn_while_measuring(cm, propose, measure, 5, 2, measured=[pool[0]])
    assert [b for b, _, _ in out] == [0, 0, 1, 1, 1]
    ids = [index[key(c)] for _, c, _ in out]
    assert len(set(ids)) == 5 and 0 not in ids
    assert [r for _, _, r in out] == [runtime[i] for i in ids]
    assert proposals == [0, 1]  # the second batch came from the updated model
    order = [i for i in np.argsort(CostModel(tiny_model, t, pool).predict(pool),
                                   kind="stable") if i != 0]
    assert ids[:2] == order[:2]  # the first batch: the untouched model's best two


@pytest.mark.parametrize("k", [1, 2, 3, 6])
def test_expected_best_of_random_is_the_mean_over_every_draw(k):
    rng = np.random.default_rng(k)
    rt = rng.uniform(1, 2, 6)
    for default in (math.inf, 1.3):
        draws = [min(default, *rt[list(c)]) for c in itertools.combinations(range(6), k)]
        assert expected_best_of_random(rt, k, default) == pytest.approx(np.mean(draws))


def test_best_of_falls_back_to_the_default_and_skips_failures():
    rt = np.array([2.0, np.nan, 3.0, 1.5])
    assert best_of([1, 2], rt) == 0
    assert best_of([1, 2, 3], rt) == 3
    assert best_of([1, 2], rt, with_default=False) == 2


def test_cli_bench_pool_report_is_consistent(tiny_model, tmp_path):
    from graphcost.cli import main

    model_path = tiny_model.save(tmp_path / "model.pt")
    out = tmp_path / "pool.json"
    res = CliRunner().invoke(main, ["bench", "pool", "--model", str(model_path), "--programs",
                                    "mlp.004", "--pool", "8", "--k", "3", "--runs", "3",
                                    "--warmup", "1", "--confirm-rounds", "2", "--no-pin",
                                    "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "confirmed, speed as a share of the pool best's" in res.output
    row = json.loads(out.read_text())["rows"][0]
    speed, picks = row["speed_vs_default"], row["picks"]
    for s in ("model", "learn", "random"):
        assert len(picks[s]) == 3 and len(set(picks[s])) == 3 and 0 not in picks[s]
        assert 1.0 <= speed[s] <= speed["pool"]  # the default is the floor, the pool the top
    assert 1 - 1e-9 <= speed["random_expected"] <= speed["pool"] * (1 + 1e-9)  # float sums
    for s, (share, lo, hi) in row["confirmed_share_of_best"].items():
        assert lo <= share <= hi, s
        if s in picks and row["chosen"][s] == row["chosen"]["pool"]:
            assert share == 1.0  # the pool's best, confirmed against itself
    bad = CliRunner().invoke(main, ["bench", "pool", "--model", str(model_path), "--programs",
                                    "mlp.004", "--k", "0", "--no-pin"])
    assert bad.exit_code == 2 and "--k >= 1" in bad.output
