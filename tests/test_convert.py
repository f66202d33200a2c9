"""Tuning records (.pb) -> TpuGraphs files, on the real TPU fixtures and on broken copies."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from graphcost.cli import main
from graphcost.formats import LayoutGraph, TileGraph, read_graph, validate_graph
from graphcost.formats import hlo_proto as pb
from graphcost.formats.tuning import (
    DROP_RULES,
    convert_files,
    convert_tuning_file,
    is_program_graph,
    tile_config_features,
)

FIXTURES = Path(__file__).parents[2] / "shared" / "fixtures" / "tpu"
LAYOUT_PB = FIXTURES / "module_tuning_data_layout.pb"
TILE_PB = FIXTURES / "op_tuning_data.pb"
needs_fixtures = pytest.mark.skipif(
    not (LAYOUT_PB.exists() and TILE_PB.exists()),
    reason=f"real TPU tuning records not found in {FIXTURES} (shared fixtures absent)")


def _instructions(module):
    return [i for c in module.computations for i in c.instructions]


def _check_node_features(g, module):
    insts = _instructions(module)
    assert g.num_nodes == len(insts)
    one_hot = g.node_feat[:, 2:21]
    np.testing.assert_array_equal(one_hot.sum(1), 1)  # every fixture type is listed
    for row, i in zip(g.node_feat, insts, strict=True):
        dims = list(i.shape.dimensions)
        if i.shape.element_type != 13 and 1 <= len(dims) <= 6:
            assert row[28] == math.prod(row[21:21 + len(dims)])
            assert row[28] == math.prod(dims)


@pytest.fixture(scope="module")
def layout_report():
    if not LAYOUT_PB.exists():
        pytest.skip(f"{LAYOUT_PB} not found")
    return convert_tuning_file(LAYOUT_PB)


@pytest.fixture(scope="module")
def tile_report():
    if not TILE_PB.exists():
        pytest.skip(f"{TILE_PB} not found")
    return convert_tuning_file(TILE_PB)


@needs_fixtures
def test_layout_record_keeps_112_of_122_runs(layout_report):
    r = layout_report
    assert r.errors == [] and r.skipped == []
    assert len(r.graphs) == 1
    g = r.graphs[0]
    assert isinstance(g, LayoutGraph)
    # 122 runs: 10 have error=true (compute_time_ns 0) and are dropped; 111 measured
    # random layouts + 1 default survive.
    assert r.dropped_runs == {"run_error": 10}
    assert g.num_configs == 112
    assert g.node_config_ids.size == 62
    assert set(g.node_opcode[g.node_config_ids].tolist()) == {26, 75}  # convolution, reshape
    ncf = np.asarray(g.node_config_feat)
    assert ncf.shape == (112, 62, 18) and ncf.min() == -1 and ncf.max() <= 5
    assert 9.1e8 < g.config_runtime.min() < g.config_runtime.max() < 9.3e8
    assert len(g.node_splits) == 143 and g.node_splits[0] == 0
    module = pb.ModuleTuningData.FromString(LAYOUT_PB.read_bytes()).module
    _check_node_features(g, module)


@needs_fixtures
def test_tile_file_gives_15_kernels_normalized_by_the_default(tile_report):
    r = tile_report
    assert r.errors == [] and r.skipped == []
    assert len(r.graphs) == 15 and all(isinstance(g, TileGraph) for g in r.graphs)
    assert r.dropped_runs == {"run_error": 2}
    records = pb.TuningData.FromString(TILE_PB.read_bytes()).modules
    for g, rec in zip(r.graphs, records, strict=True):
        _check_node_features(g, rec.module)
        default = next(run.profile.compute_time_ns for run in rec.runs if run.is_default)
        assert (g.config_runtime_normalizers == default).all()
        kept = [run for run in rec.runs if not run.error]
        assert g.num_configs == len(kept)
        np.testing.assert_array_equal(
            g.config_feat, [tile_config_features(run.op_config.tile_size_config) for run in kept])
    assert sum(g.num_configs for g in r.graphs) == 752
    assert r.graphs[1].num_configs == 579  # fusion.191: 581 runs, 2 errored


def test_tile_config_features_layout():
    cfg = pb.TileSizeConfig(kernel_bounds=[3, 1, 24, 3], output_bounds=[12, 4])
    f = tile_config_features(cfg)
    np.testing.assert_array_equal(f[:8], [3, 1, 24, 3, 0, 0, 31, 216])
    np.testing.assert_array_equal(f[8:16], [12, 4, 0, 0, 0, 0, 16, 48])
    np.testing.assert_array_equal(f[16:], 0)  # empty bounds: product 0 too


@needs_fixtures
def test_written_files_validate_and_round_trip(tmp_path):
    (rl,), (rt,) = convert_files([LAYOUT_PB], tmp_path), convert_files([TILE_PB], tmp_path)
    assert len(rt.written) == 15 and rl.written[0].parent.name == "layout"
    for g, path in zip(rl.graphs + rt.graphs, rl.written + rt.written, strict=True):
        back = read_graph(path, lazy=False)
        validate_graph(back, path, deep=True)
        assert type(back) is type(g) and not is_program_graph(back)
        np.testing.assert_array_equal(back.node_feat, g.node_feat)
        np.testing.assert_array_equal(back.edge_index, g.edge_index)
        np.testing.assert_array_equal(back.config_runtime, g.config_runtime)


@needs_fixtures
def test_cli_convert(tmp_path):
    res = CliRunner().invoke(main, ["convert", str(TILE_PB), str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert "15 graphs written" in res.output and "dropped 2 runs: run_error" in res.output
    assert len(list((tmp_path / "tile").glob("*.npz"))) == 15


# ------------------------------------------------------------------ bad input


@needs_fixtures
def test_truncated_tuning_data_keeps_the_whole_records(tmp_path):
    data = TILE_PB.read_bytes()
    cut = tmp_path / "cut.pb"
    cut.write_bytes(data[: int(len(data) * 0.6)])
    r = convert_tuning_file(cut)
    assert 1 <= len(r.graphs) < 15
    (err,) = r.errors
    assert err.path == str(cut) and err.key == f"modules[{len(r.graphs)}]"
    assert "truncated" in str(err)


@needs_fixtures
def test_truncated_module_tuning_data_is_an_error(tmp_path):
    cut = tmp_path / "cut_layout.pb"
    cut.write_bytes(LAYOUT_PB.read_bytes()[:600_000])
    r = convert_tuning_file(cut)
    assert r.graphs == []
    (err,) = r.errors
    assert err.key == "runs" and "truncated" in str(err)


@pytest.mark.parametrize("content", [b"hello, I am not a protobuf\n", b"\xff" * 64, b""])
def test_not_a_tuning_record(tmp_path, content):
    path = tmp_path / "junk.pb"
    path.write_bytes(content)
    r = convert_tuning_file(path)
    assert r.graphs == []
    (err,) = r.errors
    assert err.path == str(path) and "TuningData" in str(err)


def test_npz_file_is_not_a_tuning_record(tmp_path, layout_graph):
    from graphcost.formats import write_graph

    path = write_graph(tmp_path / "g.npz", layout_graph)
    r = convert_tuning_file(path)
    assert r.graphs == [] and len(r.errors) == 1


@needs_fixtures
def test_bad_operand_in_one_record_spares_the_others(tmp_path):
    td = pb.TuningData.FromString(TILE_PB.read_bytes())
    bad = td.modules[3].module.computations[-1].instructions[-1]
    bad.operand_ids.append(123456789)
    path = tmp_path / "bad_operand.pb"
    path.write_bytes(td.SerializeToString())
    r = convert_tuning_file(path)
    assert len(r.graphs) == 14
    (err,) = r.errors
    assert err.key.startswith("modules[3].computations[") and err.key.endswith(".operand_ids")
    assert "123456789" in str(err) and bad.name in str(err)
    res = CliRunner().invoke(main, ["convert", str(path), str(tmp_path / "out")])
    assert res.exit_code == 1
    assert "14 graphs written" in res.output and "123456789" in res.output


def test_records_without_a_default_or_with_one_run_are_skipped_with_a_reason(tmp_path):
    td = pb.TuningData()
    for n_runs, default in ((1, True), (3, False)):
        rec = td.modules.add()
        comp = rec.module.computations.add(name="c", id=1, root_id=1)
        comp.instructions.add(id=1, name="p", opcode="parameter").shape.element_type = 11
        for k in range(n_runs):
            run = rec.runs.add(is_default=default and k == 0)
            run.op_config.tile_size_config.kernel_bounds.append(k + 1)
            run.profile.compute_time_ns = 100 + k
    path = tmp_path / "odd.pb"
    path.write_bytes(td.SerializeToString())
    r = convert_tuning_file(path)
    assert r.graphs == [] and r.errors == []
    assert [reason for _, reason in r.skipped] == ["record_single_run", "record_no_default"]
    assert all(reason in DROP_RULES for _, reason in r.skipped)


@needs_fixtures
def test_converted_fixtures_train_and_evaluate_agrees_with_an_independent_scorer(tmp_path):
    """Converted records train end to end, and evaluate's τ on held-out kernels equals
    scipy's τ between the model's scores and the runtimes read with plain numpy.

    (It once trained and evaluated on the same files and asserted only τ ∈ [−1, 1], which
    no scorer can fail. One epoch teaches little; what is checked here is that the
    numbers evaluate reports are the right ones, on kernels it did not train on.)"""
    from scipy import stats

    from graphcost.models import ConfigScorer, load_model

    runner = CliRunner()
    assert runner.invoke(main, ["convert", str(TILE_PB), str(tmp_path / "raw")]).exit_code == 0
    kernels = sorted((tmp_path / "raw" / "tile").glob("*.npz"))
    coll = tmp_path / "tile"
    for i, p in enumerate(kernels):  # every third kernel held out
        split = "test" if i % 3 == 0 else "train"
        (coll / split).mkdir(parents=True, exist_ok=True)
        p.rename(coll / split / p.name)
    run = tmp_path / "run"
    trained = runner.invoke(main, ["train", str(coll), "--model", "mlp", "--out", str(run),
                                   "--epochs", "1", "--set", "progress=False",
                                   "--set", "hidden=16"])
    assert trained.exit_code == 0, trained.output
    result = runner.invoke(main, ["evaluate", str(run / "model.pt"), str(coll),
                                  "--json", str(tmp_path / "eval.json")])
    assert result.exit_code == 0, result.output
    assert "scored the test split" in result.output
    report = json.loads((tmp_path / "eval.json").read_text())
    held_out = sorted((coll / "test").glob("*.npz"))
    assert sorted(report["graphs"]) == sorted(p.stem for p in held_out) and len(held_out) == 5
    model = load_model(run / "model.pt")
    for p in held_out:
        pred = ConfigScorer(model, read_graph(p)).scores()
        raw = np.load(p)
        runtime = raw["config_runtime"] / raw["config_runtime_normalizers"]
        row = report["graphs"][p.stem]
        assert row["configs"] == len(runtime)
        if np.ptp(runtime) == 0:
            assert math.isnan(row["kendall_tau"])
        elif np.ptp(pred) == 0:
            assert row["kendall_tau"] == 0.0
        else:
            expected = stats.kendalltau(pred, runtime).statistic
            assert row["kendall_tau"] == pytest.approx(expected, abs=1e-12), p.stem
