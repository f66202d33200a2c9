"""The heuristic baselines: each rule's order on hand-made graphs where the definition
says what it must be, and each as a model through train, evaluate and crossval."""

import json

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import graphcost.train.loop
from graphcost.cli import main
from graphcost.data.synthetic import make_layout_graph, make_tile_graph, write_collection
from graphcost.errors import UserError
from graphcost.formats import LayoutGraph, TileGraph
from graphcost.models import Model, score_graph
from graphcost.models.base import collate
from graphcost.models.registry import MODELS, model_names
from graphcost.train import TrainSettings, fit
from graphcost.xla.options import OPTION_KNOBS, OptionConfig

NK = len(OPTION_KNOBS)

torch.set_num_threads(1)
F32 = 13  # node feature column of the f32 one-hot


def layout_graph(configs: list[dict[tuple[int, int], list[int]]]) -> LayoutGraph:
    """Node 0 a 2×2 f32 parameter, node 1 a 64×64 one, node 2 a dot of 0 and 1; all three
    configurable. A config maps (node, role) to a minor-to-major order; the rest −1."""
    feat = np.zeros((3, 140), np.float32)
    for node, dims in enumerate([(2, 2), (64, 64), (2, 64)]):
        feat[node, 21:23] = dims
        feat[node, F32] = 1.0
    ncf = np.full((len(configs), 3, 18), -1.0, np.float32)
    for c, moves in enumerate(configs):
        for (node, role), order in moves.items():
            ncf[c, node, 6 * role:6 * role + len(order)] = order
    return LayoutGraph(name="hand", node_feat=feat, node_opcode=np.array([63, 63, 34]),
                       edge_index=np.array([[2, 0], [2, 1]]),
                       node_config_ids=np.arange(3), node_config_feat=ncf,
                       config_runtime=np.arange(len(configs), dtype=np.float64) + 1.0,
                       node_splits=np.array([0]))


OUT, IN = 0, 1
LAYOUTS = [{}, {(0, OUT): [0, 1]}, {(1, OUT): [0, 1]}, {(0, OUT): [0, 1], (1, OUT): [0, 1]},
           {(2, IN): [0, 1]}]  # the dot's input is node 0's 2×2 tensor


def scores(name: str, graphs: list, score_on=None, **settings) -> np.ndarray:
    m = Model(name, graphs[0].kind, **settings)
    m.build(m.fit_transform(graphs))
    m.net.fit_closed_form(m.prepare(g) for g in graphs)
    return score_graph(m, graphs[0] if score_on is None else score_on)


def test_fewest_changes_counts_moved_layouts():
    np.testing.assert_array_equal(scores("fewest-changes", [layout_graph(LAYOUTS)]),
                                  [0, 1, 1, 2, 1])


def test_moved_bytes_weighs_each_move_by_its_tensor():
    # 2×2 f32 = 16 bytes, 64×64 f32 = 16384; the dot's input role lays out node 0's tensor
    np.testing.assert_array_equal(scores("moved-bytes", [layout_graph(LAYOUTS)]),
                                  [0, 16, 16384, 16400, 16])


def test_changed_bytes_counts_only_layouts_set_to_another_order():
    # the graph's own layouts: node 0's 2×2 tensor is {0, 1} (minor-to-major), node 1's
    # {1, 0}; setting node 0 to {0, 1} keeps its order, setting node 1 to it changes it
    graph = layout_graph(LAYOUTS)
    graph.node_feat[0, 134:136] = [0, 1]
    graph.node_feat[1, 134:136] = [1, 0]
    np.testing.assert_array_equal(scores("changed-bytes", [graph]), [0, 0, 16384, 16384, 0])
    np.testing.assert_array_equal(scores("moved-bytes", [graph]), [0, 16, 16384, 16400, 16])


def test_default_first_puts_the_default_first_and_ties_the_rest():
    np.testing.assert_array_equal(scores("default-first", [layout_graph(LAYOUTS)]),
                                  [0, 1, 1, 1, 1])
    tile = tile_graph([(0,) * NK, (1,) + (0,) * (NK - 1), (0, 1) + (0,) * (NK - 2)])
    np.testing.assert_array_equal(scores("default-first", [tile]), [0, 1, 1])
    no_default = tile_graph([(1,) + (0,) * (NK - 1), (0, 1) + (0,) * (NK - 2)])
    np.testing.assert_array_equal(scores("default-first", [tile], no_default), [1, 1])
    with pytest.raises(UserError, match="default-first: none of the 1 train graphs"):
        scores("default-first", [no_default])


def tile_graph(options: list[tuple[int, ...]], runtime=None, name: str = "t") -> TileGraph:
    feat = option_features_of(options)
    runtime = np.ones(len(options)) if runtime is None else runtime
    return TileGraph(name=name, node_feat=np.ones((2, 140), np.float32),
                     node_opcode=np.array([63, 2]), edge_index=np.array([[1, 0]]),
                     config_feat=feat, config_runtime=runtime,
                     config_runtime_normalizers=np.full(len(options), runtime[0]))


def option_features_of(options: list[tuple[int, ...]]) -> np.ndarray:
    return np.stack([OptionConfig(o).features() for o in options])


def test_config_only_recovers_each_knob_choices_effect_on_log_runtime():
    """log runtime = graph offset + 0.7·[fusion off] + (0, +0.5, −0.2, +0.3)[backend
    optimisation level choice]: the second effect follows neither the knob's codes nor
    "moved or not", so only one weight per choice fits it. Fitted on 4 graphs, it
    predicts a new graph's log-runtime differences exactly."""
    rng = np.random.default_rng(0)

    def graph(i: int) -> TileGraph:
        a, b = rng.integers(0, 2, 16), rng.integers(0, 4, 16)
        opts = [(int(x), 0, 0, int(y)) + (0,) * (NK - 4) for x, y in zip(a, b, strict=True)]
        log_t = 3.0 * i + 0.7 * a + np.array([0.0, 0.5, -0.2, 0.3])[b]
        return tile_graph(opts, np.exp(log_t) * 1e6, name=f"g{i}")

    train, new = [graph(i) for i in range(4)], graph(9)
    s = scores("config-only", train, new, ridge=0.0)
    log_t = np.log(new.target)
    np.testing.assert_allclose(s - s[0], log_t - log_t[0], atol=1e-4)


@pytest.mark.parametrize("name, kind", [(n, k) for n in model_names(learned=False)
                                         for k in MODELS[n].kinds])
def test_a_rule_scores_a_batch_as_it_scores_each_graph_alone(name, kind):
    """Every rule of the registry, both paths: a batch of three graphs of different sizes
    (`forward`) and each graph's configs alone (`config_scores`, what a prior reads)."""
    rng = np.random.default_rng(1)
    make = make_layout_graph if kind == "layout" else make_tile_graph
    graphs = [make(rng, num_nodes=n, num_configs=12, name=f"g{n}") for n in (20, 35, 50)]
    for g in graphs:  # config 0 the default, so that default-first ties not every config
        if kind == "layout":
            g.node_config_feat[0] = -1
        else:
            g.config_feat[0] = OptionConfig.default().features()
    m = Model(name, kind)
    m.build(m.fit_transform(graphs))
    tensors = [m.prepare(g) for g in graphs]
    m.net.fit_closed_form(tensors)
    ids = np.arange(12)
    batch = m.net(collate([(gt, ids) for gt in tensors])).detach().numpy()
    alone = [m.net.config_scores(gt.configs(ids), gt).detach().numpy() for gt in tensors]
    np.testing.assert_allclose(batch, np.stack(alone), rtol=1e-5)
    assert np.ptp(batch) > 0  # not every config tied: the rule read the configs


def test_fit_steps_no_optimiser_and_says_so(monkeypatch):
    def no_optimiser(*args, **kwargs):
        raise AssertionError("a heuristic must not get an optimiser")

    monkeypatch.setattr(graphcost.train.loop, "optimiser", no_optimiser)
    g = layout_graph(LAYOUTS)
    result = fit(Model("fewest-changes", "layout"), [g], [g], TrainSettings(progress=False))
    assert "no optimiser steps" in result["closed_form"]
    assert len(result["history"]) == 1 and np.isfinite(result["history"][0]["valid_tau"])


@pytest.fixture(scope="module")
def collections(tmp_path_factory):
    root = tmp_path_factory.mktemp("heuristics")
    splits = {"train": 3, "valid": 2, "test": 2}
    return (write_collection(root / "l", "layout", splits=splits, num_nodes=30,
                             num_configs=12),
            write_collection(root / "t", "tile", splits=splits, num_nodes=8, num_configs=12))


def test_train_then_evaluate_a_heuristic_through_the_cli(collections, tmp_path):
    layout, _ = collections
    run = tmp_path / "run"
    trained = CliRunner().invoke(main, ["train", str(layout), "--model", "fewest-changes",
                                        "--out", str(run)])
    assert trained.exit_code == 0, trained.output
    assert "fewest-changes: training-free" in trained.output
    assert {p.name for p in run.iterdir()} >= {"model.pt", "best.pt", "run.json",
                                               "metrics.jsonl"}
    evaluated = CliRunner().invoke(main, ["evaluate", str(run / "model.pt"), str(layout)])
    assert evaluated.exit_code == 0, evaluated.output
    assert "kendall_tau" in evaluated.output
    reported = CliRunner().invoke(main, ["report", str(run)])  # curves without a loss
    assert reported.exit_code == 0, reported.output


def test_crossval_of_config_only_runs(collections):
    _, tile = collections
    result = CliRunner().invoke(main, ["crossval", str(tile), "--folds", "2", "--model",
                                       "config-only"])
    assert result.exit_code == 0, result.output
    assert "config-only, 2-fold leave-family-out" in result.output


def test_train_help_lists_heuristics_and_only_settings_that_exist():
    result = CliRunner().invoke(main, ["train", "--help"])
    assert result.exit_code == 0, result.output
    assert "ridge=0.001" in result.output
    flat = "".join(result.output.split())  # help wraps lines, also at a name's hyphen
    assert all(name in flat for name in MODELS)  # the --model help, from the registry
    assert "Model settings of fewest-changes" not in result.output  # it has none


def test_a_heuristic_on_the_wrong_kind_is_refused(collections, tmp_path):
    _, tile = collections
    result = CliRunner().invoke(main, ["train", str(tile), "--model", "fewest-changes",
                                       "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    assert "'fewest-changes' is for layout collections, not tile" in result.output


def test_compare_shows_the_best_heuristic_paired_with_the_model(collections, tmp_path):
    layout, _ = collections
    files = {}
    for name in ("default-first", "fewest-changes", "moved-bytes", "changed-bytes"):
        files[name] = tmp_path / f"{name}.json"
        done = CliRunner().invoke(main, ["crossval", str(layout), "--folds", "2", "--model",
                                         name, "--json", str(files[name])])
        assert done.exit_code == 0, done.output
    means = {n: np.mean([g["score"] for g in json.loads(f.read_text())["graphs"].values()])
             for n, f in files.items() if n != "default-first"}
    best = max(means, key=means.get)
    result = CliRunner().invoke(main, [
        "compare", str(files["default-first"]), "--against", str(files["fewest-changes"]),
        "--heuristic", str(files["fewest-changes"]), "--heuristic", str(files["moved-bytes"]),
        "--heuristic", str(files["changed-bytes"]), "--json", str(tmp_path / "c.json")])
    assert result.exit_code == 0, result.output
    assert f"paired difference default-first − {best}:" in result.output
    c = json.loads((tmp_path / "c.json").read_text())
    assert c["heuristic"]["against"]["model"] == best
    assert c["heuristic"]["against"]["mean"]["mean"] == pytest.approx(means[best])
