"""`graphcost bench families`: each strategy's choice from a program's stored pool and its
speed-up over the default, checked against brute force (every draw of random search
enumerated), the summary's buckets and shares recomputed independently, and the
command's table and refusals on a tiny options collection whose fold results are written
by hand (nothing is trained or compiled)."""

import dataclasses
import itertools
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from graphcost.autotune.choice import MIN_GAIN
from graphcost.autotune.headroom import HEADROOM, STRATEGIES, figures, headroom_of, summarize_rows
from graphcost.autotune.search import best_of, top_picks
from graphcost.autotune.space import OptionSearchSpace
from graphcost.bench.families import (
    confirm_set,
    default_index,
    describe,
    expected_choice,
    program_row,
    stored_configs,
)
from graphcost.cli import main
from graphcost.data.collection import open_collection
from graphcost.errors import UserError
from graphcost.formats import LayoutGraph, TileGraph, write_graph
from graphcost.train.settings import TrainSettings
from graphcost.xla.options import OPTION_KNOBS, OptionConfig

DEFAULT = OptionConfig.default().choices

NK = len(OPTION_KNOBS)


def opt(**set_knobs: int) -> tuple[int, ...]:
    """An options config: the named knobs at the given choice, the rest unset."""
    names = [k.name for k in OPTION_KNOBS]
    c = [0] * NK
    for name, choice in set_knobs.items():
        c[names.index(name)] = choice
    return tuple(c)


def tile(options: list[tuple[int, ...]], runtime, name: str = "fam.000") -> TileGraph:
    runtime = np.asarray(runtime, dtype=np.float64)
    return TileGraph(name=name, node_feat=np.ones((2, 140), np.float32),
                     node_opcode=np.array([63, 2]), edge_index=np.array([[1, 0]]),
                     config_feat=np.stack([OptionConfig(o).features() for o in options]),
                     config_runtime=runtime,
                     config_runtime_normalizers=np.full(len(options), 1.0))


def layout(ncf: np.ndarray, name: str = "lay.000") -> LayoutGraph:
    nc = ncf.shape[1]
    return LayoutGraph(name=name, node_feat=np.ones((nc, 140), np.float32),
                       node_opcode=np.full(nc, 63), edge_index=np.zeros((0, 2), np.int64),
                       node_config_ids=np.arange(nc), node_config_feat=ncf,
                       config_runtime=np.arange(ncf.shape[0], dtype=np.float64) + 1.0,
                       node_splits=np.array([0]))


# ------------------------------------------------------------------ brute-force oracles


def brute_choice(runtime, default: int, k: int, value=None, clear=None) -> float:
    """Mean over every k-subset of the finite non-default configs of the value of what the
    draw ends on: its fastest of those it may choose (`clear`; None: those faster than the
    default), else the default."""
    value = runtime if value is None else value
    others = [i for i in range(len(runtime)) if i != default and np.isfinite(runtime[i])]
    if not others:
        return float(value[default])
    draws = list(itertools.combinations(others, min(k, len(others))))
    total = 0.0
    for draw in draws:
        may = [i for i in draw if (runtime[i] < runtime[default] if clear is None
                                   else i in clear)]
        total += value[min(may, key=lambda i: runtime[i])] if may else value[default]
    return total / len(draws)


def clear_of(runtime, default: int, gain: float = MIN_GAIN) -> list[int]:
    """The configs a strategy may choose when no rounds are stored: faster than the
    default by more than `gain`."""
    return [i for i in range(len(runtime)) if i != default and np.isfinite(runtime[i])
            and runtime[default] / runtime[i] - 1 > gain]


def brute_random(runtime, default: int, k: int, gain: float = MIN_GAIN) -> float:
    """Random-K's stored figure, a geometric mean: over every k-subset of the finite
    non-default configs, the log speed-up over the default of the subset's fastest of
    those faster than the default by more than `gain`, else 0; averaged; exponentiated."""
    runtime = np.asarray(runtime, dtype=np.float64)
    others = [i for i in range(len(runtime)) if i != default and np.isfinite(runtime[i])]
    draws = list(itertools.combinations(others, min(k, len(others))))
    if not others:
        return 1.0
    clear = clear_of(runtime, default, gain)
    logs = []
    for draw in draws:
        may = [i for i in draw if i in clear]
        best = min(may, key=lambda i: runtime[i]) if may else default
        logs.append(math.log(runtime[default] / runtime[best]))
    return math.exp(sum(logs) / len(logs))


def brute_pick(pred, runtime, default: int, k: int, gain: float = MIN_GAIN) -> int:
    """The fastest of the K best-scored non-default configs that beat the default by more
    than `gain`, else the default."""
    top = sorted((i for i in range(len(pred)) if i != default), key=lambda i: (pred[i], i))[:k]
    top = [i for i in top if i in clear_of(runtime, default, gain)]
    return min(top, key=lambda i: runtime[i]) if top else default


def gmean(x) -> float:
    return float(np.exp(np.mean(np.log(np.asarray(x, dtype=np.float64)))))


# ------------------------------------------------------------------ expected_choice


def random_runtimes(seed: int, n: int, default: int, failed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rt = rng.uniform(1.0, 2.0, n)
    rt[default] = 1.5  # some configs beat it, some do not
    bad = rng.choice([i for i in range(n) if i != default], failed, replace=False)
    rt[bad] = np.nan
    return rt


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("default", [0, 5])
@pytest.mark.parametrize("failed", [0, 2])
@pytest.mark.parametrize("k", [1, 2, 3, 7, 9, 20])
def test_expected_choice_is_the_mean_over_every_draw(seed, default, failed, k):
    rt = random_runtimes(seed, 10, default, failed)
    assert expected_choice(rt, default, k) == pytest.approx(brute_choice(rt, default, k),
                                                            rel=1e-12)


@pytest.mark.parametrize("seed", [0, 3])
@pytest.mark.parametrize("default", [0, 4])
@pytest.mark.parametrize("k", [1, 3, 8, 12])
def test_expected_choice_averages_a_separate_value(seed, default, k):
    """The draw's choice is made by `runtime`; what is averaged is `value` (e.g. log
    confirmed speed-ups), NaN where a failed config would never be drawn."""
    rt = random_runtimes(seed, 9, default, 2)
    value = np.random.default_rng(seed + 100).normal(size=9)
    value[~np.isfinite(rt)] = np.nan
    got = expected_choice(rt, default, k, value)
    assert np.isfinite(got)
    assert got == pytest.approx(brute_choice(rt, default, k, value), rel=1e-12, abs=1e-12)
    # the value matters: ranking by value would be a different quantity
    assert got != pytest.approx(expected_choice(rt, default, k), abs=1e-9)


def test_expected_choice_edge_pools():
    # the default fastest: every draw keeps it
    assert expected_choice(np.array([1.0, 2.0, 3.0, 4.0]), 0, 2) == 1.0
    # the default slowest: k = 1 is the plain mean of the others
    assert expected_choice(np.array([2.0, 3.0, 9.0, 4.0]), 2, 1) == pytest.approx(3.0)
    # every other config failed: the default
    assert expected_choice(np.array([np.nan, 5.0, np.nan]), 1, 3) == 5.0
    # k at least the pool: the pool's best
    assert expected_choice(np.array([4.0, 3.0, np.nan, 1.0, 2.0]), 0, 4) == 1.0
    assert expected_choice(np.array([4.0, 3.0, np.nan, 1.0, 2.0]), 0, 99) == 1.0
    # a tie with the default is not faster
    assert expected_choice(np.array([2.0, 2.0]), 0, 1) == 2.0
    assert expected_choice(np.array([2.0, 2.0]), 0, 1, np.array([7.0, 3.0])) == 7.0


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("k", [1, 3, 20])
def test_expected_choice_chooses_only_what_may_be_chosen(seed, k):
    """With `clear`, a draw ends on its fastest clear config: a config faster than the
    default but not clear is drawn (it takes a place in the draw) and never chosen."""
    rt = random_runtimes(seed, 10, 0, 2)
    faster = [i for i in range(10) if np.isfinite(rt[i]) and rt[i] < rt[0]]
    clear = faster[::2]  # every other one
    got = expected_choice(rt, 0, k, None, clear)
    assert got == pytest.approx(brute_choice(rt, 0, k, None, clear), rel=1e-12)
    assert expected_choice(rt, 0, k, None, faster) == pytest.approx(expected_choice(rt, 0, k))
    assert expected_choice(rt, 0, k, None, []) == pytest.approx(rt[0], rel=1e-12)


def test_program_row_keeps_the_default_unless_the_stored_rounds_say_clearly_faster():
    """Stored rounds decide: a config 5% faster whose rounds disagree by 30% is noise (the
    model's choice stays the default; `model_fastest`, without the rule, takes it); one
    faster beyond its rounds' spread is chosen; the pool's best ignores the rule."""
    g = tile([DEFAULT, opt(no_fusion=1), opt(fast_math=1)], [10.0, 9.5, 9.0])
    rounds = np.array([[10.0, 10.1], [9.5, 12.4], [9.0, 9.05]])
    noisy = program_row("fam.003", g, [[0.0, 0.1, 0.9]], [0.0, 0.1, 0.9], 1, rounds)
    assert noisy["clear"] == [2]
    assert noisy["choice"]["model"] == [0] and noisy["choice"]["model_fastest"] == [1]
    assert noisy["choice"]["pool"] == 2 and noisy["stored"]["model"] == 1.0
    # random-1: draws {1} (not clear: the default) and {2}: a geometric mean
    assert noisy["stored"]["random"] == pytest.approx(math.sqrt(10 / 9))
    steady = program_row("fam.003", g, [[0.0, 0.9, 0.1]], [0.0, 0.1, 0.9], 1, rounds)
    assert steady["choice"]["model"] == [2] == steady["choice"]["model_fastest"]


# ------------------------------------------------------------------ default_index


def test_default_index_finds_the_default_option_row_anywhere():
    rows = [opt(no_fusion=1), opt(backend_optimization_level=1), DEFAULT,
            opt(max_isa=3)]
    assert default_index(tile(rows, [1, 2, 3, 4])) == 2
    # an all-zero feature row is not the default (the default's codes are not all 0)
    g = tile(rows, [1, 2, 3, 4])
    g.config_feat = np.concatenate([np.zeros((1, 24), np.float32), g.config_feat])
    assert default_index(g) == 3


def test_default_index_finds_the_layout_row_that_sets_nothing():
    ncf = np.full((4, 3, 18), -1.0, np.float32)
    ncf[0, 0, 0:2] = [0, 1]
    ncf[1, 2, 6:8] = [1, 0]
    ncf[3, 1, 17] = 0  # one feature set is enough to be a non-default
    assert default_index(layout(ncf)) == 2


def test_a_pool_without_the_default_is_refused_by_name():
    g = tile([opt(no_fusion=1), opt(fast_math=1)], [1, 2], name="mlp.007")
    with pytest.raises(UserError, match=r"mlp\.007.*no default"):
        default_index(g)
    ncf = np.full((2, 2, 18), -1.0, np.float32)
    ncf[:, 0, 0] = 1
    with pytest.raises(UserError, match=r"cnn\.003"):
        default_index(layout(ncf, name="cnn.003"))


# ------------------------------------------------------------------ top_picks / best_of


def test_top_picks_hand_example():
    pred = [0.5, 0.1, 0.3, 0.1, 0.9, 0.2]
    assert top_picks(pred, 1, 3) == [3, 5, 2]  # the default (also lowest) is skipped
    assert top_picks(pred, 0, 2) == [1, 3]  # tie 0.1: file order
    assert top_picks(pred, 4, 10) == [1, 3, 5, 2, 0]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("k", [1, 3, 11, 30])
def test_top_picks_are_the_k_lowest_scores_in_order_ties_in_file_order(seed, k):
    rng = np.random.default_rng(seed)
    pred = rng.integers(0, 4, 12).astype(float)  # many ties
    d = int(rng.integers(12))
    picks = top_picks(pred, d, k)
    assert d not in picks
    assert len(picks) == len(set(picks)) == min(k, 11)
    assert picks == sorted((i for i in range(12) if i != d), key=lambda i: (pred[i], i))[:k]
    assert all(isinstance(i, int) for i in picks)


def test_best_of_needs_a_strictly_faster_measured_pick_at_any_default():
    rt = np.array([10.0, 12.0, 9.0, 10.0, np.nan, 8.0])
    assert best_of([], rt, default=0) == 0
    assert best_of([1], rt, default=0) == 0
    assert best_of([1, 2], rt, default=0) == 2
    assert best_of([3], rt, default=0) == 0  # a tie keeps the default
    assert best_of([4], rt, default=0) == 0  # failed
    assert best_of([4, 5], rt, default=0) == 5
    assert best_of([5, 2], rt, default=0) == 5
    assert best_of([0], rt, default=3) == 3  # tie, default not at 0
    assert best_of([0, 1, 4], rt, default=3) == 3
    assert best_of([0, 1, 2, 4], rt, default=3) == 2


# ------------------------------------------------------------------ program_row

#: default at row 2 (10 ns); row 0 failed; the pool's best is row 4 (7 ns)
ROW_OPTS = [opt(no_fusion=1), opt(fast_math=1), DEFAULT, opt(max_isa=2),
            opt(prefer_vector_width=2), opt(backend_optimization_level=3)]
ROW_RT = [np.nan, 9.0, 10.0, 11.0, 7.0, 8.0]
K = 2
PRED_A = [0.0, 0.1, -5.0, 0.2, 0.9, 0.8]  # top-2 {0 failed, 1}: row 1 (9 ns)
PRED_B = [0.0, 0.5, 0.0, 0.1, 0.9, 0.8]  # top-2 {0 failed, 3 slower}: the default
PORTFOLIO = [0.9, 0.3, 0.0, 0.8, 0.7, 0.1]  # top-2 {5, 1}: row 5 (8 ns)


def test_program_row_choices_and_stored_speedups():
    g = tile(ROW_OPTS, ROW_RT, name="conv.003")
    row = program_row("conv.003", g, [PRED_A, PRED_B], PORTFOLIO, K)
    rt = np.array(ROW_RT)
    # by hand (see the comments above), then by the brute-force oracle
    assert row["choice"] == {"pool": 4, "default": 2, "portfolio": 5, "model": [1, 2],
                             "model_fastest": [1, 2]}
    assert row["choice"]["model"] == [brute_pick(p, rt, 2, K) for p in (PRED_A, PRED_B)]
    assert row["choice"]["portfolio"] == brute_pick(PORTFOLIO, rt, 2, K)
    assert (row["program"], row["family"], row["configs"], row["default"]) == \
        ("conv.003", "conv", 6, 2)
    np.testing.assert_array_equal(row["runtime_ns"], ROW_RT)
    s = row["stored"]
    assert set(s) == {*STRATEGIES, "model_fastest"}
    assert s["pool"] == pytest.approx(10 / 7)
    assert s["portfolio"] == pytest.approx(10 / 8)
    assert s["default"] == 1.0
    assert s["model"] == pytest.approx(math.sqrt(10 / 9 * 10 / 10))
    # random-2 over the finite non-defaults {1: 9, 3: 11, 4: 7, 5: 8} ns: the 6 pairs end
    # on 9 ({1,3}), 7 ({1,4}, {3,4}, {4,5}) and 8 ({1,5}, {3,5}); a geometric mean
    by_hand = (10 / 9 * (10 / 7) ** 3 * (10 / 8) ** 2) ** (1 / 6)
    assert s["random"] == pytest.approx(by_hand, rel=1e-12)
    assert s["random"] == pytest.approx(brute_random(rt, 2, K), rel=1e-12)
    # not the old figure, the default over the mean runtime of the draws' choices
    assert s["random"] != pytest.approx(10 / (46 / 6), rel=1e-3)
    json.dumps(row)  # plain types: it goes into the --json file


@pytest.mark.parametrize("seed", range(4))
def test_program_row_agrees_with_brute_force_on_random_pools(seed):
    rng = np.random.default_rng(seed)
    cfgs = OptionSearchSpace().enumerate()
    n = 9
    opts = [cfgs[i] for i in rng.choice(len(cfgs), n, replace=False)]
    d = int(rng.integers(n))
    opts[d] = DEFAULT
    opts = list(dict.fromkeys(opts))  # (a drawn non-default never equals the default twice)
    n = len(opts)
    d = opts.index(DEFAULT)
    rt = rng.uniform(5, 15, n)
    rt[rng.choice([i for i in range(n) if i != d], 2, replace=False)] = np.nan
    preds = [list(rng.normal(size=n)) for _ in range(3)]
    port = list(rng.normal(size=n))
    for k in (1, 3, 20):
        row = program_row("fam.001", tile(opts, rt), preds, port, k)
        models = [brute_pick(p, rt, d, k) for p in preds]
        pool = brute_pick(np.where(np.isfinite(rt), rt, np.inf), rt, d, n, gain=0.0)
        assert row["choice"] == {"pool": pool, "default": d,
                                 "portfolio": brute_pick(port, rt, d, k), "model": models,
                                 "model_fastest": [brute_pick(p, rt, d, k, gain=0.0)
                                                   for p in preds]}
        s = row["stored"]
        assert s["pool"] == pytest.approx(rt[d] / np.nanmin(np.append(rt[d], rt)))
        assert s["model"] == pytest.approx(gmean([rt[d] / rt[i] for i in models]))
        assert s["random"] == pytest.approx(brute_random(rt, d, k), rel=1e-12)
        assert 1.0 - 1e-12 <= s["random"] <= s["pool"] + 1e-12
        assert s["pool"] >= s["model"] - 1e-12


def test_program_row_random_when_nothing_can_beat_the_default():
    g = tile([DEFAULT, opt(no_fusion=1), opt(fast_math=1)], [5.0, 6.0, np.nan])
    row = program_row("fam.002", g, [[0.0, 0.1, 0.2]], [0.0, 0.2, 0.1], 3)
    assert row["stored"]["random"] == 1.0 == brute_random([5.0, 6.0, np.nan], 0, 3)
    assert row["choice"] == {"pool": 0, "default": 0, "portfolio": 0, "model": [0],
                             "model_fastest": [0]}


@pytest.mark.parametrize("which", ["model", "portfolio"])
@pytest.mark.parametrize("length", [5, 7, 0])
def test_program_row_refuses_predictions_of_another_length_by_name(which, length):
    """Fold results of another version of the collection: a prediction list longer or
    shorter than the graph's configs is refused naming the graph, not silently cut or
    indexed out of range."""
    g = tile(ROW_OPTS, ROW_RT, name="conv.003")
    bad = [0.1 * i for i in range(length)]
    preds = [PRED_A, bad] if which == "model" else [PRED_A, PRED_B]
    portfolio = bad if which == "portfolio" else PORTFOLIO
    with pytest.raises(UserError, match=rf"conv\.003: {length} predictions for its 6 configs"):
        program_row("conv.003", g, preds, portfolio, K)


# ------------------------------------------------------------------ figures / summarize_rows


def srow(name: str, pool: float, model: float, portfolio: float, random: float) -> dict:
    return {"program": name, "family": name.split(".")[0],
            "stored": {"pool": pool, "model": model, "portfolio": portfolio,
                       "random": random, "default": 1.0}}


ROWS = [srow("a.0", 1.00, 1.00, 1.00, 1.00), srow("a.1", 1.04, 1.02, 1.00, 1.01),
        srow("a.2", 1.05, 1.01, 1.03, 1.02), srow("b.0", 1.08, 1.08, 1.02, 1.03),
        srow("b.1", 1.10, 1.05, 1.10, 1.04), srow("c.0", 1.50, 1.20, 1.30, 1.10)]


def bucket_of(pool: float) -> str:
    return "< 5%" if pool < 1.05 else "5-10%" if pool < 1.10 else ">= 10%"


def test_summary_buckets_families_and_model_share():
    s = summarize_rows(ROWS)
    assert s["source"] == "stored"
    assert s["all"]["programs"] == len(ROWS)
    assert {f: v["programs"] for f, v in s["families"].items()} == {"a": 3, "b": 2, "c": 1}
    assert [label for _, _, label in HEADROOM] == list(s["headroom"])
    counts = {label: 0 for _, _, label in HEADROOM}
    for r in ROWS:
        counts[bucket_of(r["stored"]["pool"])] += 1
    assert {b: v["programs"] for b, v in s["headroom"].items()} == counts == \
        {"< 5%": 2, "5-10%": 2, ">= 10%": 2}
    v = {st: np.array([r["stored"][st] for r in ROWS]) for st in STRATEGIES}
    for st in STRATEGIES:
        assert s["all"][st][0] == pytest.approx(gmean(v[st]))
    assert s["all"]["model_vs_random"][0] == pytest.approx(gmean(v["model"] / v["random"]))
    assert s["all"]["model_vs_portfolio"][0] == pytest.approx(
        gmean(v["model"] / v["portfolio"]))
    share, lo, hi = s["all"]["model_share_of_pool"]
    assert share == pytest.approx(np.log(v["model"]).sum() / np.log(v["pool"]).sum())
    assert lo <= hi
    fam_b = [r for r in ROWS if r["family"] == "b"]
    assert s["families"]["b"]["model_share_of_pool"][0] == pytest.approx(
        sum(math.log(r["stored"]["model"]) for r in fam_b)
        / sum(math.log(r["stored"]["pool"]) for r in fam_b))
    assert s["families"]["c"]["pool"][0] == pytest.approx(1.5)
    assert "model_slower_than_default" not in s


def test_figures_without_headroom_have_no_share_and_empty_rows_only_a_count():
    flat = [srow("a.0", 1.0, 1.0, 1.0, 1.0), srow("a.1", 1.0, 1.0, 1.0, 1.0)]
    f = figures(flat, "stored")
    assert f["programs"] == 2 and f["pool"][0] == pytest.approx(1.0)
    assert "model_share_of_pool" not in f
    assert figures([], "stored") == {"programs": 0}
    s = summarize_rows([])
    assert s["source"] == "stored" and s["all"] == {"programs": 0}


def crow(name: str, stored_pool: float, confirmed: dict, model_ci: list) -> dict:
    r = srow(name, stored_pool, 1.0, 1.0, 1.0)
    return {**r, "confirmed": confirmed, "model_ci": model_ci}


def conf(pool, model, portfolio=1.0, random=1.0):
    return {"pool": pool, "model": model, "portfolio": portfolio, "random": random,
            "default": 1.0}


def test_confirmed_rows_are_summarized_and_bucketed_by_confirmed_speeds():
    rows = [crow("a.0", 1.3, conf(1.00, 0.98), [[0.98, 0.95, 0.99]]),  # slower beyond noise
            crow("a.1", 1.3, conf(1.07, 1.05), [[1.05, 1.0, 1.1], [0.97, 0.9, 1.05]]),
            crow("b.0", 1.3, conf(1.30, 1.20), [[1.2, 1.1, 1.3], [0.9, 0.85, 0.95]]),
            crow("b.1", 1.0, conf(1.12, 1.10), [[1.1, 1.05, 1.15]])]
    for r in rows:
        assert headroom_of(r) == r["confirmed"]["pool"]
    s = summarize_rows(rows)
    assert s["source"] == "confirmed"
    # by the stored pool all but one would be >= 10%
    assert {b: v["programs"] for b, v in s["headroom"].items()} == \
        {"< 5%": 1, "5-10%": 1, ">= 10%": 2}
    assert s["all"]["model"][0] == pytest.approx(gmean([r["confirmed"]["model"] for r in rows]))
    share = (sum(math.log(r["confirmed"]["model"]) for r in rows)
             / sum(math.log(r["confirmed"]["pool"]) for r in rows))
    assert s["all"]["model_share_of_pool"][0] == pytest.approx(share)
    # slower beyond noise: the interval's upper end below 1 (a.1's 0.97 is within noise)
    assert s["model_slower_than_default"] == ["a.0", "b.0"]
    # one row not timed again: the stored figures
    s = summarize_rows([*rows, srow("c.0", 1.2, 1.1, 1.0, 1.0)])
    assert s["source"] == "stored" and "model_slower_than_default" not in s
    assert s["all"]["model"][0] == pytest.approx(gmean([1.0, 1.0, 1.0, 1.0, 1.1]))


# ------------------------------------------------------------------ stored_configs / confirm_set


def fake_tunable() -> SimpleNamespace:
    return SimpleNamespace(name="fam.000", configs=OptionSearchSpace())


def test_stored_configs_reads_option_codes_back_into_choices():
    choices = [DEFAULT, opt(no_fusion=1), opt(backend_optimization_level=1),
               opt(backend_optimization_level=3, prefer_vector_width=1),
               opt(prefer_vector_width=2, max_isa=3, fast_math=1),
               tuple(len(k.choices) - 1 for k in OPTION_KNOBS)]
    g = tile(choices, np.arange(len(choices)) + 1.0)
    assert stored_configs(fake_tunable(), g, "options:cpu", 0, 24) == choices


def test_stored_configs_round_trips_every_option_config():
    every = OptionSearchSpace().enumerate()
    g = tile(every, np.ones(len(every)))
    assert stored_configs(fake_tunable(), g, "options:cpu", 0, 24) == every


def test_a_stored_option_config_is_described_by_the_knobs_it_sets():
    g = tile([DEFAULT, opt(no_fusion=1, max_isa=2)], [1.0, 2.0])
    assert describe(g, 0) == "the default"
    assert describe(g, 1) == "no_fusion=True, max_isa='AVX'"


def test_stored_configs_refuses_an_unknown_knob_code():
    g = tile([DEFAULT, opt(prefer_vector_width=1)], [1.0, 2.0], name="mlp.004")
    g.config_feat[1, 4] = 0.75  # prefer_vector_width's codes are 1, 0.5 and 2
    with pytest.raises(UserError, match=r"mlp\.004.*knob code"):
        stored_configs(fake_tunable(), g, "options:cpu", 0, 24)


def test_confirm_set_holds_every_possible_end_once_default_first():
    rt = [10.0, 8.0, 12.0, 9.0, np.nan, 7.0, 10.0, 11.0]
    row = {"runtime_ns": rt, "default": 0,
           "choice": {"pool": 5, "default": 0, "portfolio": 3, "model": [1, 0, 5, 7],
                      "model_fastest": [1, 6, 5, 7]}}
    got = confirm_set(row)
    assert got[0] == 0
    assert len(got) == len(set(got))
    faster = {i for i, t in enumerate(rt) if t < rt[0]}
    assert set(got) == {0, 5, 3, 1, 7, 6} | faster == {0, 1, 3, 5, 6, 7}
    assert all(isinstance(i, int) for i in got)
    row = {"runtime_ns": [5.0, 4.0, 6.0], "default": 2,
           "choice": {"pool": 1, "default": 2, "portfolio": 2, "model": [2, 2],
                      "model_fastest": [2, 1]}}
    assert confirm_set(row)[0] == 2 and sorted(confirm_set(row)) == [0, 1, 2]


# ------------------------------------------------------------------ the command

#: program → (options of its pool, stored runtimes); families mlp (2), conv (1), attn (2)
PROGRAMS = {
    "mlp.000": ([DEFAULT, opt(no_fusion=1), opt(fast_math=1), opt(max_isa=1)],
                [10.0, 8.0, 11.0, 9.5]),
    "mlp.001": ([opt(no_fusion=1), DEFAULT, opt(max_isa=2), opt(fast_math=1)],
                [12.0, 10.0, 9.0, 10.2]),
    "conv.000": ([opt(max_isa=3), opt(fast_math=1), DEFAULT, opt(no_fusion=1)],
                 [20.0, 21.0, 20.5, 15.0]),
    "attn.000": ([DEFAULT, opt(prefer_vector_width=1), opt(no_fusion=1),
                  opt(max_isa=1)], [5.0, 5.5, 6.0, 5.2]),
    "attn.001": ([opt(fast_math=1), opt(no_fusion=1), opt(max_isa=3), DEFAULT],
                 [7.0, 8.0, 6.0, 7.5]),
}
SPLIT = {"mlp.000": "train", "mlp.001": "valid", "conv.000": "test", "attn.000": "train",
         "attn.001": "test"}


#: the collection's name: the folder's path below `npz/`, as `open_collection` names it
COLLECTION = "options:cpu"


def cli_settings(seed: int, **changed) -> dict:
    """The training settings a `bench families` run without --set asks of seed `seed`'s
    folds (the command's own default: no progress bars), as crossval.json holds them."""
    settings = TrainSettings(**{"progress": False, "seed": seed, **changed})
    return json.loads(json.dumps(dataclasses.asdict(settings)))


def write_run(out, model: str, seed: int, preds: dict, pred_key: bool = True,
              fields: dict | None = None) -> None:
    """OUT/<model>-<seed>/crossval.json as `crossval` writes it for the run that the
    command asks for by default; `fields` replace top-level keys."""
    graphs = {n: {"fold": 0, "family": n.split(".")[0], "score": 0.5,
                  **({"pred": p} if pred_key else {})} for n, p in preds.items()}
    run = {"collection": COLLECTION, "model": model, "folds": 5, "model_settings": {},
           "settings": cli_settings(seed), "seed": seed, "graphs": graphs, **(fields or {})}
    (out / f"{model}-{seed}").mkdir(parents=True, exist_ok=True)
    (out / f"{model}-{seed}" / "crossval.json").write_text(json.dumps(run))


@pytest.fixture(scope="module")
def bench_dirs(tmp_path_factory):
    """An options collection on disk and fold results of ranker seeds 0, 1 and of the
    config-only portfolio, as `crossval` would have left them under OUT."""
    root = tmp_path_factory.mktemp("families")
    coll = root / "npz" / "options" / "cpu"
    for name, (opts, rt) in PROGRAMS.items():
        write_graph(coll / SPLIT[name] / f"{name}.npz", tile(opts, rt, name=name))
    assert open_collection(coll).name == COLLECTION
    out = root / "out"
    rng = np.random.default_rng(0)
    preds = {seed: {n: [float(x) for x in rng.normal(size=len(rt))]
                    for n, (_, rt) in PROGRAMS.items()} for seed in (0, 1)}
    for seed in (0, 1):
        write_run(out, "ranker", seed, preds[seed])
    portfolio = {n: [float(x) for x in rng.normal(size=len(rt))]
                 for n, (_, rt) in PROGRAMS.items()}
    write_run(out, "config-only", 0, portfolio)
    return coll, out, preds, portfolio


def invoke(*args: str):
    return CliRunner().invoke(main, ["bench", "families", *args])


def test_the_command_prints_the_stored_table_per_family_and_headroom(bench_dirs, tmp_path):
    coll, out, preds, portfolio = bench_dirs
    res = invoke(str(coll), "--out", str(out), "--seeds", "0,1", "--k", "2",
                 "--json", str(tmp_path / "f.json"))
    assert res.exit_code == 0, res.output
    assert "reusing" in res.output  # nothing trained
    lines = res.output.splitlines()

    def count_on(label: str) -> int:
        """The `n` column of the table line labelled `label`."""
        found = [ln[24:28] for ln in lines if ln[:24].rstrip() == label]
        assert len(found) == 1, (label, res.output)
        return int(found[0])

    assert {f: count_on(f) for f in ("mlp", "conv", "attn")} == {"mlp": 2, "conv": 1,
                                                                 "attn": 2}
    assert count_on("all") == 5
    assert "by headroom (the pool best's speed-up over the default):" in res.output
    assert "stored runtimes" in res.output
    result = json.loads((tmp_path / "f.json").read_text())
    assert result["summary"]["source"] == "stored" and result["portfolio"] == "config-only"
    rows = {r["program"]: r for r in result["rows"]}
    assert set(rows) == set(PROGRAMS)
    for name, (opts, rt) in PROGRAMS.items():
        d = opts.index(DEFAULT)
        r = rows[name]
        assert r["default"] == d
        assert r["choice"]["model"] == [brute_pick(preds[s][name], rt, d, 2) for s in (0, 1)]
        assert r["choice"]["portfolio"] == brute_pick(portfolio[name], rt, d, 2)
        assert r["stored"]["pool"] == pytest.approx(rt[d] / min(rt))
        assert r["stored"]["random"] == pytest.approx(brute_random(rt, d, 2), rel=1e-12)
    bucket_counts = {label: 0 for _, _, label in HEADROOM}
    for r in rows.values():
        bucket_counts[bucket_of(r["stored"]["pool"])] += 1
    assert {b: v["programs"] for b, v in result["summary"]["headroom"].items()} == \
        bucket_counts
    assert {label: count_on(label) for label in bucket_counts} == bucket_counts


def test_the_command_keeps_only_the_families_asked_for(bench_dirs):
    coll, out, _, _ = bench_dirs
    res = invoke(str(coll), "--out", str(out), "--seeds", "0,1", "--families", "attn")
    assert res.exit_code == 0, res.output
    firsts = [ln.split()[:2] for ln in res.output.splitlines() if ln.split()]
    assert ["attn", "2"] in firsts and ["all", "2"] in firsts
    assert not any(f[0] in ("mlp", "conv") for f in firsts)


def test_the_command_refuses_a_family_not_in_the_collection(bench_dirs):
    coll, out, _, _ = bench_dirs
    res = invoke(str(coll), "--out", str(out), "--seeds", "0,1", "--families", "mlp,nosuch")
    assert res.exit_code == 2, res.output
    assert "Error:" in res.output and "nosuch" in res.output
    assert "Traceback" not in res.output and isinstance(res.exception, SystemExit)


def test_the_command_refuses_seeds_that_are_not_integers(bench_dirs):
    coll, out, _, _ = bench_dirs
    res = invoke(str(coll), "--out", str(out), "--seeds", "a,b")
    assert res.exit_code == 2, res.output
    assert "--seeds expects comma-separated integers" in res.output and "'a,b'" in res.output
    assert "Traceback" not in res.output and isinstance(res.exception, SystemExit)


def test_the_command_refuses_fold_results_without_predictions(bench_dirs, tmp_path):
    coll, _, preds, _ = bench_dirs
    out = tmp_path / "old"
    write_run(out, "ranker", 0, preds[0], pred_key=False)
    res = invoke(str(coll), "--out", str(out), "--seeds", "0")
    assert res.exit_code == 2, res.output
    assert "no per-config predictions" in res.output and "ranker-0" in res.output
    assert "Traceback" not in res.output


def differing_keys(output: str) -> set[str]:
    """The keys a refusal of a reused crossval.json names: `... was made with another
    KEY, KEY than this run asks for ...`."""
    found = [ln for ln in output.splitlines() if " was made with another " in ln]
    assert len(found) == 1, output
    keys = found[0].split(" was made with another ", 1)[1].split(" than this run", 1)[0]
    return set(keys.split(", "))


#: (what differs in the file of ranker seed 0, the command's extra arguments, the keys the
#: refusal names); every other file matches what the command asks for
MISMATCHES = {
    "epochs": ({"settings": cli_settings(0, epochs=7)}, [], {"settings"}),
    "asked-epochs": ({}, ["--epochs", "7"], {"settings"}),
    "another-seed's-settings": ({"settings": cli_settings(1)}, [], {"settings"}),
    "progress-bars": ({"settings": cli_settings(0, progress=True)}, [], {"settings"}),
    "collection": ({"collection": "options:gpu"}, [], {"collection"}),
    "model": ({"model": "mlp"}, [], {"model"}),
    "folds": ({}, ["--folds", "3"], {"folds"}),
    "model-settings": ({"model_settings": {"hidden": 16}}, [], {"model_settings"}),
    "asked-model-settings": ({}, ["--set", "hidden=16"], {"model_settings"}),
    "several": ({"collection": "tile:xla", "folds": 4, "settings": cli_settings(0, lr=1.0)},
                [], {"collection", "folds", "settings"}),
}


@pytest.mark.parametrize("case", list(MISMATCHES))
def test_the_command_refuses_fold_results_made_for_another_run(bench_dirs, tmp_path, case):
    """A reused crossval.json is the run the command asks for or it is refused, naming
    the file and what differs: never silently benchmarked under other settings."""
    coll, _, preds, portfolio = bench_dirs
    changed, args, keys = MISMATCHES[case]
    out = tmp_path / "out"
    write_run(out, "ranker", 0, preds[0], fields=changed)
    write_run(out, "config-only", 0, portfolio)
    res = invoke(str(coll), "--out", str(out), "--seeds", "0", *args)
    assert res.exit_code == 2, res.output
    assert isinstance(res.exception, SystemExit) and "Traceback" not in res.output
    assert "Error:" in res.output
    assert str(out / "ranker-0" / "crossval.json") in res.output
    assert differing_keys(res.output) == keys
    assert "training" not in res.output  # nothing was trained instead
    assert "--out" in res.output and "delete it" in res.output


def test_the_command_refuses_a_portfolio_fold_result_made_for_another_run(bench_dirs,
                                                                          tmp_path):
    coll, _, preds, portfolio = bench_dirs
    out = tmp_path / "out"
    write_run(out, "ranker", 0, preds[0])
    write_run(out, "config-only", 0, portfolio, fields={"settings": cli_settings(0, epochs=3)})
    res = invoke(str(coll), "--out", str(out), "--seeds", "0")
    assert res.exit_code == 2, res.output
    assert str(out / "config-only-0" / "crossval.json") in res.output
    assert differing_keys(res.output) == {"settings"}
    assert "Traceback" not in res.output


def test_the_command_reuses_fold_results_made_with_the_settings_it_asks_for(bench_dirs,
                                                                             tmp_path):
    """--epochs, --set (training and model settings) and --folds given, and files that
    were made with exactly those: reused, nothing trained. The portfolio shares the
    training settings but none of the model's own settings."""
    coll, _, preds, portfolio = bench_dirs
    out = tmp_path / "out"
    for seed in (0, 1):
        write_run(out, "ranker", seed, preds[seed],
                  fields={"folds": 3, "model_settings": {"hidden": 16},
                          "settings": cli_settings(seed, epochs=7, lr=0.01)})
    write_run(out, "config-only", 0, portfolio,
              fields={"folds": 3, "settings": cli_settings(0, epochs=7, lr=0.01)})
    res = invoke(str(coll), "--out", str(out), "--seeds", "0,1", "--k", "2", "--folds", "3",
                 "--epochs", "7", "--set", "lr=0.01", "--set", "hidden=16",
                 "--json", str(tmp_path / "f.json"))
    assert res.exit_code == 0, res.output
    assert res.output.count("reusing") == 3 and "training" not in res.output
    result = json.loads((tmp_path / "f.json").read_text())
    assert result["folds"] == 3 and result["collection"] == COLLECTION
    assert {r["program"] for r in result["rows"]} == set(PROGRAMS)


def test_the_share_of_the_pool_is_left_out_where_the_pool_gains_under_5_percent():
    from graphcost.autotune.headroom import share_of_pool

    pool = np.array([1.02, 1.03, 1.04])  # geometric mean below 1.05: the share is noise
    assert share_of_pool(np.array([1.01, 1.0, 1.03]), pool) is None
    pool = np.array([1.5, 1.2, 1.1])
    arm = np.array([1.4, 1.0, 1.1])
    share, lo, hi = share_of_pool(arm, pool)
    assert share == pytest.approx(np.log(arm).sum() / np.log(pool).sum())
    assert lo <= hi
