"""Search strategies behind one ask/tell interface, the cover order of a table, and
`bench search` on a table of measured configs (issue 44)."""

from __future__ import annotations

import itertools
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from graphcost.autotune.strategy import (
    PRIOR_MOVES,
    CoordinateSearch,
    ModelCoordinate,
    ModelOnline,
    ModelOrder,
    PriorSearch,
    RandomSearch,
    TpeSearch,
    TreeSearch,
    make_strategy,
    onehot,
)
from graphcost.autotune.table import Table, decode_options, move_prior, read_table, single_gains
from graphcost.bench.search import anytime
from graphcost.cli import main
from graphcost.errors import UserError
from graphcost.xla.options import OPTION_KNOBS, OptionConfig
from graphcost.xla.prepare import cover_option_configs

SAMPLE = Path(__file__).resolve().parents[1] / "graphcost" / "sample" / "npz" / "options" / "cpu"
CHOICES = [3, 2, 4]  # a small space: 24 configs
SPACE = list(itertools.product(*(range(n) for n in CHOICES)))


def runtime(c: tuple[int, ...]) -> float:
    """Knob 2 at value 3 is the big win, knob 0 a small one; the rest is flat."""
    return 10.0 / (1 + 2.0 * (c[2] == 3)) / (1 + 0.2 * (c[0] == 1))


def strategies(seed: int = 0, scores=None):
    scores = np.array([runtime(c) for c in SPACE]) if scores is None else scores
    return [RandomSearch(SPACE, seed), CoordinateSearch(SPACE, CHOICES, seed),
            TpeSearch(SPACE, CHOICES, seed), ModelOrder(SPACE, scores, seed),
            ModelOnline(SPACE, scores, CHOICES, seed), ModelCoordinate(SPACE, scores, seed),
            TreeSearch(SPACE, CHOICES, seed), TreeSearch(SPACE, CHOICES, seed, scores),
            PriorSearch(SPACE, CHOICES, PRIOR, seed), PriorSearch(SPACE, CHOICES, PRIOR, seed, 3),
            PriorSearch(SPACE, CHOICES, PRIOR, seed, 3, scores),
            make_strategy("prior-coordinate", SPACE, CHOICES, seed, prior=PRIOR)]


#: what a table of other programs taught: knob 2 -> 3 paid most, knob 0 -> 1 a little
PRIOR = {(2, 3): 0.5, (0, 1): 0.1, (0, 2): 0.0, (1, 1): 0.0}


@pytest.mark.parametrize("index", range(12))
def test_every_strategy_asks_each_candidate_once_then_nothing(index):
    s = strategies()[index]
    s.tell((0, 0, 0), runtime((0, 0, 0)))
    asked = []
    while (c := s.ask()) is not None:
        assert c in SPACE and c not in asked and c != (0, 0, 0), (s.name, c)
        asked.append(c)
        s.tell(c, runtime(c))
    assert sorted(asked) == sorted(set(SPACE) - {(0, 0, 0)}), s.name


def test_coordinate_search_changes_one_knob_of_the_best_so_far():
    s = CoordinateSearch(SPACE, CHOICES, seed=1)
    s.tell((0, 0, 0), runtime((0, 0, 0)))
    for _ in range(8):
        best = s.best
        c = s.ask()
        assert sum(a != b for a, b in zip(c, best, strict=True)) == 1, (c, best)
        s.tell(c, runtime(c))
    assert s.best == (1, 0, 3)  # both wins found within 1 + 1 + 3 single moves


def test_model_online_recovers_from_a_model_that_ranks_backwards():
    wrong = -np.array([runtime(c) for c in SPACE])  # the slowest ranked first
    order, online = ModelOrder(SPACE, wrong), ModelOnline(SPACE, wrong, CHOICES)
    table = Table("toy", SPACE, np.array([runtime(c) for c in SPACE]), np.arange(len(SPACE)),
                  0, None)
    best = 10.0 / (3 * 1.2)
    k_order = int(np.argmax(anytime(order, table, 23)[0] >= best - 1e-9)) + 1
    k_online = int(np.argmax(anytime(online, table, 23)[0] >= best - 1e-9)) + 1
    assert k_online < k_order, (k_online, k_order)


def test_model_coordinate_starts_at_the_models_pick_then_moves_one_knob():
    scores = np.array([runtime(c) for c in SPACE])
    scores[SPACE.index((2, 1, 0))] = 0.0  # the model's (wrong) favourite
    s = ModelCoordinate(SPACE, scores)
    s.tell((0, 0, 0), runtime((0, 0, 0)))
    assert s.ask() == (2, 1, 0)
    s.tell((2, 1, 0), runtime((2, 1, 0)))
    best = s.best
    c = s.ask()
    assert sum(a != b for a, b in zip(c, best, strict=True)) == 1
    assert c == (0, 0, 3)  # the best scored single change of the default (best so far)


def test_tpe_finds_the_big_win_sooner_than_random_on_average():
    table = Table("toy", SPACE, np.array([runtime(c) for c in SPACE]), np.arange(len(SPACE)),
                  0, None)
    first = {}
    for name, make in (("random", lambda s: RandomSearch(SPACE, s)),
                       ("tpe", lambda s: TpeSearch(SPACE, CHOICES, s))):
        first[name] = np.mean([np.argmax(anytime(make(s), table, 23)[0] >= 3.0) for s in range(20)])
    assert first["tpe"] <= first["random"] + 1, first


def test_onehot_marks_one_value_per_knob():
    x = onehot(SPACE, CHOICES)
    assert x.shape == (24, 9) and (x.sum(axis=1) == 3).all()
    assert x[SPACE.index((2, 1, 3))].nonzero()[0].tolist() == [2, 4, 8]


def test_trees_find_the_big_win_sooner_than_random_and_search_near_the_best():
    table = Table("toy", SPACE, np.array([runtime(c) for c in SPACE]), np.arange(len(SPACE)),
                  0, None)
    found = {name: np.mean([np.argmax(anytime(make(s), table, 23)[0] >= 3.6 - 1e-9)
                            for s in range(10)])
             for name, make in (("random", lambda s: RandomSearch(SPACE, s)),
                                ("trees", lambda s: TreeSearch(SPACE, CHOICES, s, eps=0)))}
    assert found["trees"] < found["random"] - 1, found
    s = TreeSearch(SPACE, CHOICES, seed=3, elite=1, eps=0)
    for c in [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)]:  # past the warm-up
        s.tell(c, runtime(c))
    c = s.ask()  # a mutation of the best so far, (1, 0, 0): one or two knobs away
    assert 1 <= sum(a != b for a, b in zip(c, (1, 0, 0), strict=True)) <= 2, c


def test_prior_search_takes_the_moves_that_paid_elsewhere_first():
    s = PriorSearch(SPACE, CHOICES, PRIOR)
    s.tell((0, 0, 0), runtime((0, 0, 0)))
    asked = []
    for _ in range(3):
        asked.append(s.ask())
        s.tell(asked[-1], runtime(asked[-1]))
    # knob 2 -> 3 first (the big win, now the best), then knob 0 -> 1 on top of it
    assert asked[:2] == [(0, 0, 3), (1, 0, 3)]
    assert s.best == (1, 0, 3)


def test_prior_trees_hand_over_to_trees_after_the_switch():
    s = PriorSearch(SPACE, CHOICES, PRIOR, switch=2)
    s.tell((0, 0, 0), runtime((0, 0, 0)))
    for _ in range(2):
        c = s.ask()
        assert sum(v != 0 for v in c) <= 2  # coordinate moves
        s.tell(c, runtime(c))
    assert s.name == "prior-trees" and s.after.told == s.told  # the trees see every result
    c = s.ask()
    assert c not in s.told


def test_prior_tpe_tells_tpe_every_measurement_before_it_takes_over():
    s = make_strategy("prior-tpe", SPACE, CHOICES, seed=0, prior=PRIOR)
    s.tell((0, 0, 0), runtime((0, 0, 0)))
    for _ in range(PRIOR_MOVES):
        c = s.ask()
        assert sum(v != 0 for v in c) <= PRIOR_MOVES  # the prior's coordinate moves
        s.tell(c, runtime(c))
    assert s.name == "prior-tpe" and isinstance(s.after, TpeSearch)
    assert len(s.after.study.trials) == len(s.told) == PRIOR_MOVES + 1  # TPE saw them all
    c = s.ask()
    assert c not in s.told


def test_prior_coordinate_takes_the_priors_first_pick_then_coordinate_moves():
    s = make_strategy("prior-coordinate", SPACE, CHOICES, seed=0, prior=PRIOR)
    s.tell((0, 0, 0), runtime((0, 0, 0)))
    first = s.ask()
    assert first == (0, 0, 3)  # the move that paid most elsewhere
    s.tell(first, runtime(first))
    assert isinstance(s.after, CoordinateSearch) and s.after.told == s.told
    asked = []
    for _ in range(3):
        asked.append(s.ask())
        s.tell(asked[-1], runtime(asked[-1]))
    # then knob by knob from the best so far, knob 0's other values first
    assert set(asked[:2]) == {(1, 0, 3), (2, 0, 3)} and s.best == (1, 0, 3)


def make_table(name: str, gains: dict[tuple[int, int], float]) -> Table:
    configs = [(0, 0, 0)] + [tuple(v if k == knob else 0 for k in range(3))
                             for knob, v in gains]
    runtime = np.array([1.0] + [np.exp(-g) for g in gains.values()])
    return Table(name, configs, runtime, np.arange(len(configs)), 0, None)


def test_move_prior_is_the_mean_gain_counting_losses_as_zero():
    a = make_table("a.000", {(2, 3): np.log(2.0), (0, 1): -0.5})
    b = make_table("b.000", {(2, 3): 0.0, (0, 1): 0.3})
    assert single_gains(a) == pytest.approx({(2, 3): np.log(2.0), (0, 1): -0.5})
    prior = move_prior([single_gains(a), single_gains(b)])
    assert prior == pytest.approx({(0, 1): 0.15, (2, 3): np.log(2.0) / 2})


def test_trees_without_lightgbm_say_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "lightgbm", None)  # import fails
    with pytest.raises(UserError, match=r"graphcost\[tune\]"):
        TreeSearch(SPACE, CHOICES)


def test_model_trees_start_in_the_models_order():
    scores = -np.arange(len(SPACE), dtype=float)  # the last candidate ranked first
    s = TreeSearch(SPACE, CHOICES, scores=scores)
    assert s.name == "model-trees"
    s.tell((0, 0, 0), runtime((0, 0, 0)))
    assert s.ask() == SPACE[-1]


def test_anytime_counts_only_new_executables():
    configs = [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)]
    table = Table("dup", configs, np.array([4.0, 4.0, 2.0, 1.0]), np.array([0, 0, 1, 2]), 0,
                  None)
    curve, best = anytime(ModelOrder(configs, [0.0, 1.0, 2.0, 3.0]), table, 3)
    # (1,0,0) compiles to the default's executable: free, so K=1 is (0,1,0), K=2 (0,0,1)
    assert curve.tolist() == [2.0, 4.0, 4.0]
    assert best == [(0, 1, 0), (0, 0, 1), (0, 0, 1)]


def test_anytime_scores_the_best_told_config_by_other_runtimes():
    configs = [(0, 0, 0), (1, 0, 0), (0, 1, 0)]
    table = Table("luck", configs, np.array([4.0, 1.0, 2.0]), np.array([0, 1, 2]), 0, None)
    # (1,0,0) was fastest in the round the strategy saw, and slower than the default in
    # the other: what the search found is worth 0.8x, not 4x
    curve, best = anytime(ModelOrder(configs, [0.0, 1.0, 2.0]), table, 2,
                          scored=np.array([4.0, 5.0, 2.0]))
    assert curve.tolist() == [0.8, 0.8]
    assert best == [(1, 0, 0), (1, 0, 0)]


def test_cover_order_is_the_default_every_single_then_every_pair():
    configs = cover_option_configs(300, np.random.default_rng(0))
    moves = sum(len(k.choices) - 1 for k in OPTION_KNOBS)
    pairs = sum(a * b for a, b in itertools.combinations(
        [len(k.choices) - 1 for k in OPTION_KNOBS], 2))
    changed = [sum(v != 0 for v in c) for c in configs]
    assert configs[0] == (0,) * len(OPTION_KNOBS) and len(set(configs)) == 300
    assert changed[1:1 + moves] == [1] * moves
    assert changed[1 + moves:1 + moves + pairs] == [2] * pairs
    assert cover_option_configs(300, np.random.default_rng(0)) == configs  # seeded


def test_decode_reads_back_every_option_config():
    configs = cover_option_configs(150, np.random.default_rng(1))
    features = np.stack([OptionConfig(c).features() for c in configs])
    assert decode_options(features, Path("t.npz")) == configs


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> Path:
    """Four families of the bundled options collection, as a small table."""
    root = tmp_path_factory.mktemp("table") / "npz" / "options" / "cpu"
    for f in sorted(SAMPLE.rglob("*.npz")):
        if f.stem.split(".")[0] in ("mlp", "rnn", "embedding", "normalization"):
            dest = root / f.parent.name / f.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, dest)
    return root


def test_bench_search_runs_every_strategy_on_a_table(table, tmp_path):
    out = tmp_path / "bench.json"
    r = CliRunner().invoke(main, ["bench", "search", str(table), "--data", str(table),
                                  "--out", str(tmp_path / "folds"), "--seeds", "0",
                                  "--folds", "2", "--draws", "3", "--budget", "30", "--epochs", "1",
                                  "--headroom", "1.0", "--json", str(out),
                                  "--plot", str(tmp_path / "curves.png")])
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    assert result["strategies"] == ["random", "coordinate", "tpe", "trees", "prior",
                                    "prior-trees", "prior-tpe", "model", "model-online",
                                    "model-coordinate", "model-trees", "model-prior-trees"]
    assert len(result["programs"]) == 16 and (tmp_path / "curves.png").stat().st_size > 0
    for p in result["programs"]:
        t = read_table(next(table.rglob(p["name"] + ".npz")))
        executables = len(set(t.executable.tolist()))
        for name, curve in p["curves"].items():
            assert len(curve) == 30 and np.all(np.diff(curve) >= -1e-12), name
            assert curve[-1] <= p["optimum"] + 1e-9
            if executables <= 30:  # every strategy timed the whole table
                assert curve[-1] == pytest.approx(p["optimum"]), (p["name"], name)
    assert "over random" in r.output and " 10 model" in r.output
    # every strategy is paired per program with each baseline search that ran
    f = result["summary"]["by_strategy"]["prior-trees"]["10"]
    ratios = [p["curves"]["prior-trees"][9] / p["curves"]["coordinate"][9]
              for p in result["programs"]]
    assert f["over_coordinate"][0] == pytest.approx(np.exp(np.mean(np.log(ratios))))
    assert set(f) == {"speedup", "share_of_optimum", "pooled_share", "over_random",
                      "over_coordinate", "over_tpe"}
    logs = [np.log(p["curves"]["prior-trees"][9]) for p in result["programs"]]
    optima = [np.log(p["optimum"]) for p in result["programs"]]
    assert f["pooled_share"][0] == pytest.approx(np.mean(logs) / np.mean(optima))


def test_bench_search_across_rounds_scores_on_the_round_it_was_not_told(table, tmp_path):
    out = tmp_path / "cross.json"
    r = CliRunner().invoke(main, ["bench", "search", str(table), "--out", str(tmp_path),
                                  "--strategies", "random,coordinate", "--draws", "2",
                                  "--budget", "30", "--headroom", "1.0", "--cross-rounds",
                                  "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert "told half the timing rounds, scored on the other half" in r.output
    for p in json.loads(out.read_text())["programs"]:
        path = next(table.rglob(p["name"] + ".npz"))
        t = read_table(path)
        rounds = np.load(path)["config_runtime_rounds"]
        d = t.default
        exhaustive = [rounds[d, b] / rounds[np.argmin(rounds[:, a]), b] for a, b in
                      ((0, 1), (1, 0))]
        assert p["optimum"] == pytest.approx(np.sqrt(np.prod(exhaustive)))
        assert p["headroom"] == pytest.approx(t.optimum)
        if len(set(t.executable.tolist())) <= 30:  # searched to the end: every config told
            for curve in p["curves"].values():
                assert curve[-1] == pytest.approx(p["optimum"]), p["name"]


def test_cross_round_views_split_the_rounds_into_even_and_odd_halves(table):
    from graphcost.bench.search import _views

    path = next(table.rglob("*.npz"))
    configs = len(read_table(path).configs)
    rounds = np.arange(configs * 4, dtype=np.float64).reshape(-1, 4)[:, ::-1] + 1
    with np.load(path) as z:
        arrays = {**{k: z[k] for k in z.files}, "config_runtime_rounds": rounds}
    four = table.parent / "four.npz"
    np.savez(four, **arrays)
    t = read_table(four)  # the table carries the rounds its file stores
    (told, scored), (told2, scored2) = _views(t, four, cross_rounds=True, first=None)
    # rounds 0 and 2 against rounds 1 and 3, each the minimum of its half
    assert told.runtime.tolist() == rounds[:, [0, 2]].min(axis=1).tolist() == scored2.tolist()
    assert scored.tolist() == rounds[:, [1, 3]].min(axis=1).tolist() == told2.runtime.tolist()
    # counting only the first two rounds: one round told, the other scored
    (told, scored), _ = _views(t, four, cross_rounds=True, first=2)
    assert told.runtime.tolist() == rounds[:, 0].tolist()
    assert scored.tolist() == rounds[:, 1].tolist()
    four.unlink()


def test_bench_search_across_rounds_needs_the_rounds(table, tmp_path):
    copy = tmp_path / "npz" / "options" / "cpu"
    shutil.copytree(table, copy)
    f = next(copy.rglob("*.npz"))
    with np.load(f) as z:
        arrays = {k: z[k] for k in z.files if k != "config_runtime_rounds"}
    np.savez(f, **arrays)
    r = CliRunner().invoke(main, ["bench", "search", str(copy), "--out", str(tmp_path),
                                  "--strategies", "random", "--draws", "1", "--cross-rounds"])
    assert r.exit_code == 2 and f.name in r.output and "config_runtime_rounds" in r.output, \
        r.output


def test_bench_search_counts_only_the_rounds_asked_for(table, tmp_path):
    out = tmp_path / "one.json"
    r = CliRunner().invoke(main, ["bench", "search", str(table), "--out", str(tmp_path),
                                  "--strategies", "random", "--draws", "1", "--budget", "5",
                                  "--headroom", "1.0", "--table-rounds", "1",
                                  "--json", str(out)])
    assert r.exit_code == 0 and "its first 1 timing rounds" in r.output, r.output
    for p in json.loads(out.read_text())["programs"]:  # the optimum of round 0 alone
        rounds = np.load(next(table.rglob(p["name"] + ".npz")))["config_runtime_rounds"]
        t = read_table(next(table.rglob(p["name"] + ".npz")))
        assert p["headroom"] == pytest.approx(rounds[t.default, 0] / rounds[:, 0].min())
    r = CliRunner().invoke(main, ["bench", "search", str(table), "--out", str(tmp_path),
                                  "--strategies", "random", "--table-rounds", "3"])
    assert r.exit_code == 2 and "with 3 rounds or more" in r.output, r.output


def test_bench_search_refuses_a_layout_collection(tmp_path):
    layout = SAMPLE.parents[1] / "layout" / "cpu" / "random"
    r = CliRunner().invoke(main, ["bench", "search", str(layout), "--out", str(tmp_path)])
    assert r.exit_code == 2 and "not an options collection" in r.output, r.output


def test_prepare_with_cover_compiles_the_single_knob_changes_first():
    import jax.numpy as jnp

    from graphcost.xla.prepare import prepare

    def fn(x, w):
        return jnp.tanh(x @ w).sum()

    prep = prepare("cover", fn, (np.ones((16, 16), np.float32), np.ones((16, 16), np.float32)),
                   "options", distinct=4, cover=True)
    configs = decode_options(np.stack(prep.features), Path("cover"))
    assert configs[0] == (0,) * len(OPTION_KNOBS)
    assert all(sum(v != 0 for v in c) == 1 for c in configs[1:]), configs


def test_confirm_times_each_strategys_choice_again_with_the_default():
    from graphcost.bench.search import confirm_choices
    from graphcost.xla.timing import Protocol

    isa = [k.name for k in OPTION_KNOBS].index("max_isa")
    sse = [2 if i == isa else 0 for i in range(len(OPTION_KNOBS))]
    programs = [{"name": "mlp.000", "headroom": 2.0,
                 "choices": {"random": sse, "coordinate": sse,
                             "tpe": [0] * len(OPTION_KNOBS)}}]
    said = []
    c = confirm_choices(programs, ["random", "coordinate", "tpe"], 10, 1.1,
                        Protocol(warmup=1, runs=3, rounds=3, max_run_s=30), None, said.append)
    speed = c["programs"][0]["speedup"]
    assert speed["tpe"] == 1.0  # the default itself, timed once
    assert speed["random"] == speed["coordinate"]  # one config, timed once for both
    assert c["over_random"]["coordinate"][0] == pytest.approx(1.0)
    assert c["rounds"] == 3 and "mlp.000" in said[0]


def test_bench_search_ensemble_orders_by_the_mean_of_the_seeds_scores(table, tmp_path):
    from graphcost.bench.search import CHOICES, bench_search
    from graphcost.data.collection import open_collection
    from graphcost.eval.crossval import pooled_files
    from graphcost.eval.folds import fold_model, fold_runs
    from graphcost.models.scorer import ConfigScorer
    from graphcost.train.settings import TrainSettings

    settings = TrainSettings(epochs=1, progress=False)
    kw = {"strategies": ["model"], "seeds": (0, 1), "budget": 10, "headroom": 1.0,
          "folds": 2, "settings": settings}
    ens = bench_search(table, table, tmp_path, ensemble=True, **kw)
    each = bench_search(table, table, tmp_path, **kw)  # the same fold models, reused
    assert ens.ensemble and not each.ensemble
    models = [fold_model(r) for r in fold_runs(table, "ranker", (0, 1), tmp_path, settings, 2,
                                               lambda _m: None)]
    files = pooled_files(open_collection(table))
    differs = 0
    for p, q in zip(ens.programs, each.programs, strict=True):
        t = read_table(files[p["name"]])
        # each seed's model of the fold that held the program out (the table is the data)
        scores = [ConfigScorer(m(p["name"]), t.graph).scores() for m in models]
        want, _ = anytime(make_strategy("model", t.configs, CHOICES, 0,
                                        np.mean(scores, axis=0)), t, 10)
        np.testing.assert_allclose(p["curves"]["model"], want)
        differs += not np.allclose(p["curves"]["model"], q["curves"]["model"])
    assert differs  # the ensemble's order is not one seed's, nor their curves' mean
