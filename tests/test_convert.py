"""Tuning records (.pb) -> TpuGraphs files: on records of our own made at test time
(tests/tuning_records.py), on broken copies of them, and on the real TPU records where
they are at hand (marker `real_tpu_records`)."""

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from tuning_records import (
    CONFIGURABLE,
    configurable_nodes,
    instructions,
    layout_record,
    tile_records,
)

from graphcost.cli import main
from graphcost.formats import LayoutGraph, TileGraph, read_graph, validate_graph
from graphcost.formats import hlo_proto as pb
from graphcost.formats.hlo import OPCODE_IDS
from graphcost.formats.tuning import (
    DROP_RULES,
    convert_files,
    convert_tuning_file,
    is_program_graph,
    tile_config_features,
)

TPU_RECORDS_DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "tpu"
TPU_RECORD_FILES = ("module_tuning_data_layout.pb", "op_tuning_data.pb")
real_tpu_records = pytest.mark.real_tpu_records


def _check_node_features(g, module):
    insts = instructions(module)
    assert g.num_nodes == len(insts)
    one_hot = g.node_feat[:, 2:21]
    np.testing.assert_array_equal(one_hot.sum(1), 1)  # every type in these records is listed
    for row, i in zip(g.node_feat, insts, strict=True):
        dims = list(i.shape.dimensions)
        if i.shape.element_type != 13 and 1 <= len(dims) <= 6:
            assert row[28] == math.prod(row[21:21 + len(dims)])
            assert row[28] == math.prod(dims)


def _check_tile_graphs(report, records):
    """Each kernel's graph has its module's nodes, its runs that did not fail as configs
    (in order) and its default run's time as every normalizer."""
    for g, rec in zip(report.graphs, records, strict=True):
        assert isinstance(g, TileGraph)
        _check_node_features(g, rec.module)
        default = next(run.profile.compute_time_ns for run in rec.runs if run.is_default)
        assert (g.config_runtime_normalizers == default).all()
        kept = [run for run in rec.runs if not run.error]
        assert g.num_configs == len(kept)
        np.testing.assert_array_equal(g.config_runtime, [run.profile.compute_time_ns
                                                         for run in kept])
        np.testing.assert_array_equal(
            g.config_feat, [tile_config_features(run.op_config.tile_size_config) for run in kept])


# ------------------------------------------------------------------ records of our own


@pytest.fixture(scope="module")
def own_records(tmp_path_factory) -> tuple[Path, Path]:
    """(layout record, tile records) as .pb files, built from modules compiled now."""
    pytest.importorskip("jax", reason="the test tuning records are compiled with JAX, the "
                        "extra graphcost[xla]")
    folder = tmp_path_factory.mktemp("records")
    layout, tiles = folder / "layout_record.pb", folder / "tile_records.pb"
    layout.write_bytes(layout_record().SerializeToString())
    tiles.write_bytes(tile_records().SerializeToString())
    return layout, tiles


def _tile_data(path) -> pb.TuningData:
    return pb.TuningData.FromString(Path(path).read_bytes())


def test_layout_record_converts_to_what_was_written(own_records):
    """The graph has the record's configurable nodes, each run's layouts as its config
    features (−1 past a tensor's dims and for tensors left unset) and the runtimes of the
    runs that did not fail, in run order."""
    path = own_records[0]
    record = pb.ModuleTuningData.FromString(path.read_bytes())
    r = convert_tuning_file(path)
    assert r.errors == [] and r.skipped == []
    (g,) = r.graphs
    assert isinstance(g, LayoutGraph) and g.name == path.stem
    _check_node_features(g, record.module)
    kept = [run for run in record.runs if not run.error]
    assert 0 < len(kept) < len(record.runs)
    assert r.dropped_runs == {"run_error": len(record.runs) - len(kept)}
    ids = configurable_nodes(record.module)
    np.testing.assert_array_equal(g.node_config_ids, ids)
    assert len(ids) > 0 and set(g.node_opcode[ids]) <= {OPCODE_IDS[o] for o in CONFIGURABLE}
    ncf = np.asarray(g.node_config_feat)
    assert ncf.shape == (len(kept), len(ids), 18)
    for c, run in enumerate(kept):
        for k, node in enumerate(run.module_config.layout_config.nodes):
            row = [d for t in node.tensors for d in list(t.dims) + [-1] * (6 - len(t.dims))]
            np.testing.assert_array_equal(ncf[c, k], row + [-1] * (18 - len(row)))
    assert (ncf[0] == -1).all() and (ncf[1:, :, 0] >= 0).all()  # default, then set layouts
    np.testing.assert_array_equal(g.config_runtime, [run.profile.compute_time_ns
                                                     for run in kept])


def test_tile_records_keep_their_runs_normalized_by_the_default(own_records):
    path = own_records[1]
    records = _tile_data(path).modules
    r = convert_tuning_file(path)
    assert r.errors == [] and r.skipped == []
    assert len(r.graphs) == len(records)
    assert r.dropped_runs == {"run_error": sum(run.error for rec in records for run in rec.runs)}
    _check_tile_graphs(r, records)


def test_tile_config_features_layout():
    cfg = pb.TileSizeConfig(kernel_bounds=[3, 1, 24, 3], output_bounds=[12, 4])
    f = tile_config_features(cfg)
    np.testing.assert_array_equal(f[:8], [3, 1, 24, 3, 0, 0, 31, 216])
    np.testing.assert_array_equal(f[8:16], [12, 4, 0, 0, 0, 0, 16, 48])
    np.testing.assert_array_equal(f[16:], 0)  # empty bounds: product 0 too


def test_written_files_validate_and_round_trip(own_records, tmp_path):
    layout, tiles = own_records
    (rl,), (rt,) = convert_files([layout], tmp_path), convert_files([tiles], tmp_path)
    assert len(rt.written) == len(_tile_data(tiles).modules)
    assert rl.written[0].parent.name == "layout"
    assert {p.parent.name for p in rt.written} == {"tile"}
    for g, path in zip(rl.graphs + rt.graphs, rl.written + rt.written, strict=True):
        back = read_graph(path, lazy=False)
        validate_graph(back, path, deep=True)
        assert type(back) is type(g) and not is_program_graph(back)
        np.testing.assert_array_equal(back.node_feat, g.node_feat)
        np.testing.assert_array_equal(back.edge_index, g.edge_index)
        np.testing.assert_array_equal(back.config_runtime, g.config_runtime)


def test_cli_convert(own_records, tmp_path):
    tiles = own_records[1]
    records = _tile_data(tiles).modules
    failed = sum(run.error for rec in records for run in rec.runs)
    res = CliRunner().invoke(main, ["convert", str(tiles), str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert f"{len(records)} graphs written" in res.output
    assert f"dropped {failed} runs: run_error" in res.output
    assert len(list((tmp_path / "tile").glob("*.npz"))) == len(records)


# ------------------------------------------------------------------ bad input


def test_truncated_tuning_data_keeps_the_whole_records(own_records, tmp_path):
    data = own_records[1].read_bytes()
    cut = tmp_path / "cut.pb"
    cut.write_bytes(data[: int(len(data) * 0.6)])
    r = convert_tuning_file(cut)
    assert 1 <= len(r.graphs) < len(_tile_data(own_records[1]).modules)
    (err,) = r.errors
    assert err.path == str(cut) and err.key == f"modules[{len(r.graphs)}]"
    assert "truncated" in str(err)


def test_truncated_module_tuning_data_is_an_error(own_records, tmp_path):
    data = own_records[0].read_bytes()
    record = pb.ModuleTuningData.FromString(data)
    runs_start = len(pb.ModuleTuningData(module=record.module).SerializeToString())
    cut = tmp_path / "cut_layout.pb"
    cut.write_bytes(data[: (runs_start + len(data)) // 2])  # halfway through the runs
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


def test_bad_operand_in_one_record_spares_the_others(own_records, tmp_path):
    td = _tile_data(own_records[1])
    kept = len(td.modules) - 1
    bad = td.modules[3].module.computations[-1].instructions[-1]
    bad.operand_ids.append(123456789)
    path = tmp_path / "bad_operand.pb"
    path.write_bytes(td.SerializeToString())
    r = convert_tuning_file(path)
    assert len(r.graphs) == kept
    (err,) = r.errors
    assert err.key.startswith("modules[3].computations[") and err.key.endswith(".operand_ids")
    assert "123456789" in str(err) and bad.name in str(err)
    res = CliRunner().invoke(main, ["convert", str(path), str(tmp_path / "out")])
    assert res.exit_code == 1
    assert f"{kept} graphs written" in res.output and "123456789" in res.output


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


def test_converted_records_train_and_evaluate_agrees_with_an_independent_scorer(
        own_records, tmp_path):
    """Converted records train end to end, and evaluate's τ on held-out kernels equals
    scipy's τ between the model's scores and the runtimes read with plain numpy.

    (It once trained and evaluated on the same files and asserted only τ ∈ [−1, 1], which
    no scorer can fail. One epoch teaches little, and the runtimes are random; what is
    checked here is that the numbers evaluate reports are the right ones, on kernels it
    did not train on.)"""
    from scipy import stats

    from graphcost.models import ConfigScorer, load_model

    runner = CliRunner()
    converted = runner.invoke(main, ["convert", str(own_records[1]), str(tmp_path / "raw")])
    assert converted.exit_code == 0, converted.output
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
    assert [p.name for p in held_out] == [p.name for p in kernels[::3]] and len(held_out) >= 2
    assert sorted(report["graphs"]) == sorted(p.stem for p in held_out)
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


# ------------------------------------------------------------------ the real TPU records


@pytest.fixture(scope="module")
def tpu_records() -> Path:
    """The folder of the real TPU records (Google's data, never in this repository):
    $GRAPHCOST_TPU_RECORDS, else ../shared/fixtures/tpu beside the checkout."""
    env = os.environ.get("GRAPHCOST_TPU_RECORDS")
    folder = Path(env) if env else TPU_RECORDS_DEFAULT
    if not all((folder / name).is_file() for name in TPU_RECORD_FILES):
        pytest.skip(f"real TPU tuning records ({', '.join(TPU_RECORD_FILES)}) not found in "
                    f"{folder}: they are read from the folder that GRAPHCOST_TPU_RECORDS "
                    f"names, else from ../shared/fixtures/tpu beside the checkout "
                    f"({TPU_RECORDS_DEFAULT})")
    return folder


@pytest.fixture(scope="module")
def layout_report(tpu_records):
    return convert_tuning_file(tpu_records / TPU_RECORD_FILES[0])


@pytest.fixture(scope="module")
def tile_report(tpu_records):
    return convert_tuning_file(tpu_records / TPU_RECORD_FILES[1])


@real_tpu_records
def test_layout_record_keeps_112_of_122_runs(layout_report, tpu_records):
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
    data = (tpu_records / TPU_RECORD_FILES[0]).read_bytes()
    _check_node_features(g, pb.ModuleTuningData.FromString(data).module)


@real_tpu_records
def test_tile_file_gives_15_kernels_normalized_by_the_default(tile_report, tpu_records):
    r = tile_report
    assert r.errors == [] and r.skipped == []
    assert len(r.graphs) == 15
    assert r.dropped_runs == {"run_error": 2}
    _check_tile_graphs(r, _tile_data(tpu_records / TPU_RECORD_FILES[1]).modules)
    assert sum(g.num_configs for g in r.graphs) == 752
    assert r.graphs[1].num_configs == 579  # fusion.191: 581 runs, 2 errored


@real_tpu_records
def test_real_records_convert_to_valid_files(tpu_records, tmp_path):
    """The real records through `convert_files`: every graph written validates deeply."""
    reports = convert_files([tpu_records / name for name in TPU_RECORD_FILES], tmp_path)
    written = [p for r in reports for p in r.written]
    assert [len(r.written) for r in reports] == [1, 15]
    for path in written:
        validate_graph(read_graph(path, lazy=False), path, deep=True)
