import itertools

import numpy as np
import pytest

from graphcost.eval.metrics import evaluate_graphs, overall_score
from graphcost.stats import (
    bootstrap_ci,
    kendall_tau,
    kendall_tau_ranked,
    opa,
    ratio_of_means_ci,
    slowdown_at_k,
    tile_score,
)


def brute_opa(pred, runtime):
    good = total = 0
    for i, j in itertools.permutations(range(len(pred)), 2):
        if runtime[i] < runtime[j]:
            total += 1
            good += pred[i] < pred[j]
    return good / total


def test_kendall_hand_computed():
    runtime = [1, 2, 3, 4]
    assert kendall_tau([10, 20, 30, 40], runtime) == pytest.approx(1.0)
    assert kendall_tau([4, 3, 2, 1], runtime) == pytest.approx(-1.0)
    # one swapped pair of six: (5 - 1) / 6
    assert kendall_tau([1, 3, 2, 4], runtime) == pytest.approx(4 / 6)


def test_kendall_tau_b_with_ties():
    # pred ties one pair: P=5, Q=0, n0=6, n1=1, n2=0 -> 5/sqrt(5*6)
    assert kendall_tau([1, 1, 2, 3], [1, 2, 3, 4]) == pytest.approx(5 / np.sqrt(30))


def test_kendall_tau_ranked_is_the_mean_over_random_tie_breaks():
    rng = np.random.default_rng(0)
    runtime = rng.permutation(8).astype(float)
    runtime[:2] = runtime[0]  # a tie in runtime stays a tie whatever pred does
    pred = np.array([0, 0, 0, 1, 1, 2, 3, 3], dtype=float)
    breaks = [kendall_tau(pred + 0.5 * rng.random(8), runtime) for _ in range(20000)]
    assert kendall_tau_ranked(pred, runtime) == pytest.approx(np.mean(breaks), abs=0.005)
    assert kendall_tau_ranked(pred, runtime) < kendall_tau(pred, runtime)
    untied = rng.permutation(8).astype(float)
    assert kendall_tau_ranked(untied, runtime) == kendall_tau(untied, runtime)
    assert kendall_tau_ranked([5, 5, 5], [1, 2, 3]) == 0.0
    assert np.isnan(kendall_tau_ranked([1, 2, 3], [7, 7, 7]))


def test_degenerate_graphs():
    assert np.isnan(kendall_tau([1.0], [5.0]))
    assert np.isnan(kendall_tau([1, 2, 3], [7, 7, 7]))  # nothing to rank
    assert kendall_tau([3, 3, 3], [1, 2, 3]) == 0.0  # no information
    assert np.isnan(opa([1.0], [2.0]))
    assert opa([3, 3, 3], [1, 2, 3]) == 0.0
    assert slowdown_at_k([5.0], [2.0], 5) == 0.0


def test_opa_hand_computed_and_against_brute_force():
    assert opa([1, 2, 3], [1, 2, 3]) == 1.0
    assert opa([3, 2, 1], [1, 2, 3]) == 0.0
    assert opa([1, 3, 2], [1, 2, 3]) == pytest.approx(2 / 3)
    rng = np.random.default_rng(0)
    for _ in range(30):
        n = int(rng.integers(2, 25))
        pred = rng.integers(0, 5, n).astype(float)  # many ties on both sides
        runtime = rng.integers(0, 6, n).astype(float)
        if len(set(runtime)) < 2:
            continue
        assert opa(pred, runtime) == pytest.approx(brute_opa(pred, runtime))


def test_slowdown_and_tile_score():
    runtime = np.array([5.0, 4.0, 2.0, 8.0, 3.0, 9.0, 6.0])
    pred = np.array([0, 1, 6, 2, 3, 4, 5])  # best predicted: configs 0, 1, 3, 4, 5, ...
    assert slowdown_at_k(pred, runtime, 1) == pytest.approx(5 / 2 - 1)
    assert slowdown_at_k(pred, runtime, 5) == pytest.approx(3 / 2 - 1)
    assert slowdown_at_k(pred, runtime, 7) == 0.0
    assert slowdown_at_k(pred, runtime, 100) == 0.0  # K past the number of configs
    assert tile_score(pred, runtime) == pytest.approx(2 - 3 / 2)
    # prediction ties are broken by index, so the result is deterministic
    assert slowdown_at_k(np.zeros(7), runtime, 2) == pytest.approx(4 / 2 - 1)


def test_bootstrap_interval_contains_mean_and_shrinks_with_more_graphs():
    rng = np.random.default_rng(1)
    small = rng.normal(0.5, 0.2, 20)
    big = rng.normal(0.5, 0.2, 2000)
    m, lo, hi = bootstrap_ci(small)
    assert lo < m < hi and m == pytest.approx(small.mean())
    _, blo, bhi = bootstrap_ci(big)
    assert (bhi - blo) < (hi - lo) / 4
    assert bootstrap_ci(np.array([0.3, np.nan, 0.5]))[0] == pytest.approx(0.4)
    assert bootstrap_ci(small) == bootstrap_ci(small)  # seeded


def test_evaluate_graphs_summary():
    runtimes = {"a": np.array([1.0, 2, 3]), "b": np.array([3.0, 2, 1]), "c": np.array([4.0])}
    preds = {"a": np.array([1.0, 2, 3]), "b": np.array([1.0, 2, 3]), "c": np.array([0.0])}
    out = evaluate_graphs("layout", preds, runtimes, n_boot=200)
    assert out["graphs"]["a"]["kendall_tau"] == pytest.approx(1.0)
    assert out["graphs"]["b"]["kendall_tau"] == pytest.approx(-1.0)
    tau = out["summary"]["kendall_tau"]
    assert tau["mean"] == pytest.approx(0.0) and tau["n"] == 2  # 'c' has one config
    assert out["summary"]["score"]["mean"] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="no predictions"):
        evaluate_graphs("layout", {"a": preds["a"]}, runtimes)


def test_overall_score_is_plain_mean():
    assert overall_score({"tile:xla": 0.9, "layout:xla:random": 0.5}) == pytest.approx(0.7)


def test_ratio_of_means_resamples_pairs_and_brackets_the_pooled_ratio():
    num, den = [0.1, 0.2, 0.3, 0.0], [0.2, 0.2, 0.4, 0.001]
    point, low, high = ratio_of_means_ci(num, den)
    assert point == pytest.approx(0.6 / 0.801)
    assert low < point < high and high <= 1.5  # the near-zero pair does not blow it up
    assert ratio_of_means_ci([0.5], [1.0]) == (0.5, 0.5, 0.5)
    assert ratio_of_means_ci([1.0, 2.0], [2.0, 4.0])[1:] == pytest.approx((0.5, 0.5))
