"""Issue 42, item 10: `demo` on a folder with no collection to demo, `report` on a damaged
run, means that leave graphs out (τ undefined) say how many and why, and `bench replica`
refusing up front a replica of any collection that the disk cannot hold."""

import json
import math
import shutil
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import refused

from graphcost.bench.replica import disk_bytes, replica_bytes
from graphcost.cli import main
from graphcost.data.replica import (
    Published,
    chosen,
    collection_dir,
    collection_shapes,
    write_replica,
)
from graphcost.data.synthetic import write_collection
from graphcost.demo import demo_collections
from graphcost.eval.compare import compare_crossval, format_comparison
from graphcost.formats import read_graph, write_graph

Usage = namedtuple("Usage", "total used free")


def run(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def trained(tmp_path) -> tuple[Path, Path, str]:
    """A small layout collection whose first test graph has all its runtimes equal, a
    training-free heuristic fitted on it, and that graph's name."""
    coll = write_collection(tmp_path / "data", "layout", source="mini",
                            splits={"train": 3, "valid": 2, "test": 3}, num_nodes=30,
                            num_configs=10)
    flat = sorted((coll / "test").glob("*.npz"))[0]
    graph = read_graph(flat, lazy=False)
    graph.config_runtime = np.full_like(graph.config_runtime, 5000.0)
    write_graph(flat, graph)
    out = tmp_path / "run"
    fitted = run("train", coll, "--model", "fewest-changes", "--out", out)
    assert fitted.exit_code == 0, fitted.output
    return coll, out, flat.stem


# ------------------------------------------------------------ j: demo --data


def test_demo_on_an_empty_folder_says_what_it_looks_for(tmp_path):
    (tmp_path / "empty").mkdir()
    result = run("demo", "--quick", "--data", tmp_path / "empty", "--out", tmp_path / "out")
    refused(result, str(tmp_path / "empty"), "train/ and test/", "layout:cpu:default",
            "found no .npz files")
    assert not (tmp_path / "out").exists()


def test_demo_on_a_collection_without_a_test_split_names_it_and_its_splits(tmp_path):
    write_collection(tmp_path / "data", "layout", source="mini",
                     splits={"train": 2, "valid": 1}, num_nodes=20, num_configs=6)
    result = run("demo", "--quick", "--data", tmp_path / "data", "--out", tmp_path / "out")
    refused(result, "train/ and test/", "found layout:mini:random with only train/, valid/")


def test_demo_data_that_is_a_file_or_missing_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    refused(run("demo", "--data", tmp_path / "file", "--out", tmp_path / "out"),
            str(tmp_path / "file"), "not a directory")
    refused(run("demo", "--data", tmp_path / "missing", "--out", tmp_path / "out"),
            "does not exist")


def test_demo_takes_the_one_collection_of_a_folder(tmp_path):
    write_collection(tmp_path / "data", "tile", source="mini",
                     splits={"train": 2, "test": 1}, num_nodes=15, num_configs=6)
    assert [c.name for c in demo_collections(tmp_path / "data", quick=False)] == ["tile:mini"]


# ------------------------------------------------------------ k: report on a damaged run


@pytest.mark.parametrize("lines, needles", [
    (["[1, 2]"], ["line 1", "found list [1, 2]"]),
    (["GOOD", '{"phase": "full", "train_loss": 0.5}'], ["line 2", "found no 'epoch'"]),
    (["GOOD", '{"epoch": "1"}'], ["line 2", "found 'epoch' '1'"]),
    (["GOOD", '{"epoch": 1, "valid_score": "high"}'], ["line 2", "'valid_score' 'high'"]),
    (["GOOD", '{"epoch": 1, "train_lo'], ["line 2", "not JSON"]),  # cut off by a hand edit
])
def test_report_refuses_a_damaged_metrics_line_naming_file_and_line(trained, lines, needles):
    _, out, _ = trained
    metrics = out / "metrics.jsonl"
    good = metrics.read_text().splitlines()[0]
    metrics.write_text("\n".join(good if line == "GOOD" else line for line in lines))
    refused(run("report", out), str(metrics), "expected one JSON object per epoch", *needles)
    assert not (out / "report" / "index.html").exists()


@pytest.mark.parametrize("text, needle", [
    ('{"data": "/somewhere", "mod', "not JSON"),
    ("[1, 2]", "found list"),
    ('{"model": "fewest-changes"}', "found no 'data'"),
    ('{"data": 5}', "found 'data' 5"),
    ('{"data": "/no/such/collection"}', "no folder here"),
])
def test_report_refuses_a_damaged_run_json_naming_it(trained, text, needle):
    _, out, _ = trained
    (out / "run.json").write_text(text)
    refused(run("report", out), str(out / "run.json"), needle, "--data")


def test_report_of_an_intact_run_draws_its_history(trained):
    _, out, _ = trained
    assert run("report", out).exit_code == 0
    assert (out / "report" / "index.html").exists()


# ------------------------------------------------------------ l: graphs left out of a mean


def test_evaluate_says_how_many_graphs_a_mean_is_over_and_which_it_left_out(trained,
                                                                            tmp_path):
    coll, out, flat = trained
    result = run("evaluate", out / "best.pt", coll, "--json", tmp_path / "ev.json")
    assert result.exit_code == 0, result.output
    assert "(3 graphs)" not in result.output and "3 graphs scored" in result.output
    assert (f"over 2 graphs; 1 left out ({flat}): all runtimes equal, τ undefined"
            in result.output)
    assert "slowdown@1" in result.output and "over 3 graphs" in result.output
    summary = json.loads((tmp_path / "ev.json").read_text())["summary"]
    assert summary["kendall_tau"]["n"] == 2
    assert summary["kendall_tau"]["left_out"] == {flat: "all runtimes equal, τ undefined"}
    assert summary["score"]["left_out"] == {flat: "all runtimes equal, score undefined"}
    assert summary["slowdown@1"]["n"] == 3 and summary["slowdown@1"]["left_out"] == {}


def test_the_report_page_says_which_graphs_its_means_left_out(trained):
    _, out, flat = trained
    assert run("report", out).exit_code == 0
    page = (out / "report" / "index.html").read_text()
    assert f"kendall_tau mean over 2 graphs; 1 left out ({flat})" in page


def _crossval(model: str, scores: dict[str, float]) -> dict:
    return {"collection": "layout:mini:random", "kind": "layout", "folds": 2,
            "group": "family", "trained_on": "layout:mini:random", "model": model,
            "model_settings": {}, "settings": {}, "seed": 0,
            "graphs": {name: {"score": s, "configs": 10} for name, s in scores.items()}}


def test_compare_counts_the_graphs_its_difference_is_over():
    nan = math.nan
    c = compare_crossval([_crossval("ranker", {"a.1": 0.5, "b.1": 0.4, "c.1": nan})],
                         [_crossval("resgcn", {"a.1": 0.3, "b.1": 0.1, "c.1": nan})])
    assert c["graphs"] == 3 and c["difference"]["n"] == 2
    assert c["difference"]["left_out"] == {"c.1": "all runtimes equal, score undefined"}
    assert "over 2 graphs; 1 left out (c.1): all runtimes equal" in format_comparison(c)


def test_compare_counts_the_families_that_lose_more_than_a_tenth_to_the_other_side():
    c = compare_crossval([_crossval("ranker", {"a.1": 0.5, "a.2": 0.1, "b.1": 0.4,
                                               "c.1": 0.2})],
                         [_crossval("changed-bytes", {"a.1": 0.6, "a.2": 0.3, "b.1": 0.3,
                                                      "c.1": 0.25})])
    assert c["families"] == pytest.approx({"a": -0.15, "b": 0.1, "c": -0.05})
    assert "families below -0.10: 1 of 3 (a -0.150)" in format_comparison(c)


# ------------------------------------------------------------ m: bench replica and the disk


def test_a_tile_replica_too_big_for_the_disk_is_refused_before_writing(tmp_path,
                                                                       monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda _: Usage(2**40, 2**40 - 2**20, 2**20))
    out = tmp_path / "out"
    result = run("bench", "replica", "tile:xla", "--out", out)
    need = replica_bytes("tile:xla", chosen(collection_shapes("tile:xla"), 2))
    refused(result, "the tile:xla replica (848 graphs)", str(out),
            f"needs about {need / 2**20:,.0f} MB", "1 MB are free")
    assert not out.exists()


def test_every_collection_is_checked_before_the_first_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "disk_usage", lambda _: Usage(2**40, 2**40 - 2**30, 2**30))
    out = tmp_path / "out"
    result = run("bench", "replica", "tile:xla", "layout:xla:random", "--out", out)
    refused(result, "the layout:xla:random replica", "1 GB are free")  # tile:xla would fit
    assert not out.exists()


def test_replicas_kept_must_fit_the_disk_together(tmp_path, monkeypatch):
    subsets = {n: chosen(collection_shapes(n), 2) for n in ("tile:xla", "layout:xla:random")}
    need = {n: replica_bytes(n, s) for n, s in subsets.items()}
    free = max(need.values()) + min(need.values()) // 2  # the largest fits, not both
    monkeypatch.setattr(shutil, "disk_usage", lambda _: Usage(2**40, 2**40 - free, free))
    out = tmp_path / "out"
    result = run("bench", "replica", *subsets, "--out", out, "--keep")
    refused(result, "the 2 replicas kept (--keep) need", str(out))
    assert not out.exists()


def test_the_tile_estimate_holds_what_a_tile_replica_writes(tmp_path):
    shapes = collection_shapes("tile:xla", pub=Published((6, 2, 2), (40, 2, 1_000),
                                                         (1_842, 2, 10_000)))
    write_replica(tmp_path, "tile:xla", shapes)
    written = disk_bytes(collection_dir(tmp_path, "tile:xla"))
    assert written <= replica_bytes("tile:xla", shapes) <= 4 * written


def test_seed_average_leaves_an_undefined_graph_nan_without_a_warning():
    import warnings

    from graphcost.eval.compare import seed_average

    runs = [{"graphs": {"flat": {"score": float("nan")}, "ok": {"score": 0.5}}},
            {"graphs": {"flat": {"score": float("nan")}, "ok": {"score": float("nan")}}}]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "Mean of empty slice" reached the user
        averaged = seed_average(runs)
    assert np.isnan(averaged["flat"]) and averaged["ok"] == 0.5
