"""Every class of bad input through the real CLI: exit status 2, one message naming the
file, key, setting or path, and no traceback (issue 18).

CliRunner catches exceptions itself, so `no traceback` is checked as: the command ended
by click's own exit (SystemExit) with status 2, not by an exception escaping it; one
test runs the installed entry point in a subprocess and reads its stderr.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import raw_arrays, refused

from graphcost.cli import main
from graphcost.data.synthetic import make_tile_graph, write_collection
from graphcost.formats import write_graph
from graphcost.models import Model
from graphcost.train import TrainSettings, fit

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """Bad files, an empty folder, a tile collection and a small model trained on it."""
    d = tmp_path_factory.mktemp("bad")
    g = make_tile_graph(np.random.default_rng(0), num_nodes=15, num_configs=12, name="k")
    good = write_graph(d / "good.npz", g)
    (d / "text.npz").write_text("not an archive\n")
    (d / "truncated.npz").write_bytes(good.read_bytes()[:300])
    a = raw_arrays(g)
    np.savez(d / "missing_key.npz", **{k: v for k, v in a.items() if k != "node_opcode"})
    np.savez(d / "bad_shape.npz", **{**a, "node_feat": a["node_feat"][:, :100]})
    (d / "empty").mkdir()
    write_collection(d / "data", kind="tile", source="xla",
                     splits={"train": 3, "valid": 1, "test": 2}, num_nodes=15, num_configs=12)
    coll = d / "data" / "npz" / "tile" / "xla"
    model = Model("mlp", "tile", hidden=8)
    from graphcost.data.collection import open_collection

    fit(model, list(open_collection(coll).graphs("train")), None,
        TrainSettings(epochs=1, progress=False))
    model.save(d / "model.pt")
    return d


def run(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.mark.parametrize("name, needle", [
    ("text.npz", "not a zip file"), ("truncated.npz", "readable .npz archive"),
    ("missing_key.npz", "node_opcode"), ("bad_shape.npz", "(15, 100)")])
def test_info_and_predict_name_the_bad_file_and_its_problem(work, name, needle):
    refused(run("info", work / name), name, needle)
    refused(run("predict", work / "model.pt", work / name), name, needle)


def test_info_on_a_collection_counts_only_readable_files_and_names_the_others(work, tmp_path):
    coll = tmp_path / "c"
    coll.mkdir()
    (coll / "good.npz").write_bytes((work / "good.npz").read_bytes())
    (coll / "missing_key.npz").write_bytes((work / "missing_key.npz").read_bytes())
    r = run("info", coll)
    assert r.exit_code == 0
    row = next(line for line in r.output.splitlines() if line.startswith("c all"))
    assert row.split()[3] == "1"  # graphs: the readable one only
    assert "unreadable" in r.output and "missing_key.npz" in r.output


@pytest.mark.parametrize("command", ["info", "validate", "train", "evaluate"])
def test_an_empty_folder_is_refused(work, tmp_path, command):
    empty = work / "empty"
    args = {"info": ["info", empty], "validate": ["validate", empty],
            "train": ["train", empty, "--out", tmp_path / "run"],
            "evaluate": ["evaluate", work / "model.pt", empty]}[command]
    refused(run(*args), "empty")


@pytest.mark.parametrize("setting, needles", [
    ("bogus_key=1", ["unknown setting 'bogus_key'", "lr", "configs_per_graph", "hidden"]),
    ("lr=abc", ["'lr'", "a number", "abc"]),
    ("hidden=0", ["'hidden'", "at least 1"]),
    ("lr=-1", ["'lr'", "greater than 0"]),
    ("epochs=-3", ["'epochs'", "at least 1"]),
    ("dedup=maybe", ["'dedup'", "true or false"]),
    ("loss=nope", ["'loss'", "unknown loss 'nope'"]),
    ("balance=foo", ["'balance'", "one of '', graph, source", "got 'foo'"]),
    ("novalue", ["KEY=VALUE", "novalue"]),
])
def test_bad_settings_are_refused_before_any_work(work, tmp_path, setting, needles):
    run_dir = tmp_path / "run"
    refused(run("train", work / "data" / "npz" / "tile" / "xla", "--model", "mlp",
                "--out", run_dir, "--set", setting), *needles)
    assert not run_dir.exists()


def test_train_help_lists_every_setting_with_its_default_and_meaning():
    r = run("train", "--help")
    assert r.exit_code == 0
    for text in ("configs_per_graph=32", "lr=0.002", "peak AdamW learning rate",
                 "Model settings of ranker", "hidden=64", "prune_hops=2"):
        assert text in r.output, text


def test_training_without_a_train_split_is_refused(work, tmp_path):
    coll = work / "data" / "npz" / "tile" / "xla"
    refused(run("train", coll / "valid", "--out", tmp_path / "run"), "no train split",
            "it has valid")
    # the autotuning benchmark trains by the same rule, not on whatever split there is
    refused(run("bench", "pool", "--data", coll / "valid", "--programs", "mlp.000",
                "--no-pin"),  # pinning would pin this test process to one core
            "no train split", "it has valid")


def test_unwritable_outputs_are_refused_before_the_work_naming_the_users_path(
        work, tmp_path, monkeypatch):
    import graphcost.eval.submit as submit

    def never(*a, **k):
        raise AssertionError("ranked before the output path was checked")

    monkeypatch.setattr(submit, "score_graph", never)
    model = f"tile:xla={work / 'model.pt'}"
    refused(run("submit", work / "data", "-m", model, "--out", "/proc/sub.csv"),
            "/proc/sub.csv")
    refused(run("submit", work / "data", "-m", model, "--out", work / "good.npz" / "sub.csv"),
            "good.npz/sub.csv", "is a file")
    refused(run("train", work / "data" / "npz" / "tile" / "xla", "--out", work / "good.npz"),
            "good.npz", "is a file")
    refused(run("evaluate", work / "model.pt", work / "data", "--json", "/proc/x.json"),
            "/proc/x.json")


def test_a_file_that_is_not_a_model_is_refused(work):
    refused(run("predict", work / "text.npz", work / "good.npz"), "text.npz",
            "not a PyTorch checkpoint")
    refused(run("evaluate", work / "good.npz", work / "data"), "good.npz")


def test_debug_shows_the_traceback_of_a_user_error(work):
    r = run("--debug", "info", work / "text.npz")
    assert r.exit_code == 1 and not isinstance(r.exception, SystemExit)


def test_the_installed_command_prints_no_traceback(work):
    p = subprocess.run([sys.executable, "-m", "graphcost", "info", str(work / "truncated.npz")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and "truncated.npz" in p.stderr
    assert len(p.stderr.strip().splitlines()) <= 2


def test_report_extract_and_apply_refuse_bad_input(work, tmp_path):
    refused(run("report", work / "empty"), "run.json not found", "--data")
    refused(run("demo", "--out", work / "good.npz"), "good.npz", "is a file")
    refused(run("extract", "no_such_module_xyz:fn", tmp_path / "x.npz"),
            "no_such_module_xyz:fn", "importable")
    refused(run("extract", "no_such_module_xyz:fn", "/proc/x.npz"), "/proc/x.npz")
    refused(run("apply", work / "text.npz", "mlp.000"), "text.npz", "autotune config")


def test_a_train_split_of_unreadable_files_and_a_model_of_the_wrong_kind(work, tmp_path):
    (tmp_path / "c" / "train").mkdir(parents=True)
    (tmp_path / "c" / "train" / "a.npz").write_bytes((work / "truncated.npz").read_bytes())
    refused(run("train", tmp_path / "c", "--out", tmp_path / "run"), "no readable file",
            "a.npz")
    from graphcost.data.inspect import sample_root

    refused(run("evaluate", work / "model.pt",
                sample_root() / "npz" / "layout" / "cpu" / "random"),
            "a tile model cannot score layout graph")


def test_bench_json_paths_are_checked_before_the_benchmark_runs():
    refused(run("bench", "scale", "--sizes", "100", "--json", "/proc/scale.json"),
            "/proc/scale.json")


@pytest.mark.parametrize("args, needles", [
    (["--kinds", "bogus"], ["unknown kinds", "bogus"]),
    (["--rounds", "0"], ["rounds"]),
    (["--configs", "1"], ["num_configs", "2"]),
    (["--families", "nope"], ["unknown program families", "nope"]),
    (["--shard", "2/2"], ["I/N", "2/2"]),
])
def test_collect_refuses_bad_settings_before_measuring(tmp_path, args, needles):
    refused(run("collect", str(tmp_path / "out"), *args), *needles)
    assert not (tmp_path / "out" / "log.jsonl").exists()
