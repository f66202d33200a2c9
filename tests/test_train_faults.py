"""Training faults of issue 42 (items 2, 10f, 10g, 10h): a run without validation says
what chose its best epoch; a setting that cannot change on resume, or that does not
apply to the collection's kind, is refused naming it; a run that cannot split its
batch over its processes is refused before any rank starts, and a run that fails
before its first epoch leaves nothing that blocks its rerun.

As in test_train_guards.py, `no traceback` under CliRunner means: the command ended by
click's own exit (SystemExit) with status 2, not by an exception escaping it.
"""

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from conftest import refused

from graphcost.cli import main
from graphcost.data.synthetic import write_collection
from graphcost.models.checkpoint import load_checkpoint

torch.set_num_threads(1)

TINY = ("--model", "mlp", "--set", "hidden=8", "--set", "progress=false")
RANKER = ("--set", "hidden=8", "--set", "opcode_dim=4", "--set", "heads=2",
          "--set", "layers=1", "--set", "progress=false")


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """Tiny collections: tile with train/valid/test, tile without valid, and layout."""
    d = tmp_path_factory.mktemp("faults")
    write_collection(d / "tile", kind="tile", source="xla",
                     splits={"train": 3, "valid": 1, "test": 2}, num_nodes=15, num_configs=12)
    write_collection(d / "novalid", kind="tile", source="xla",
                     splits={"train": 3, "test": 2}, num_nodes=15, num_configs=12)
    write_collection(d / "layout", kind="layout", source="xla",
                     splits={"train": 3, "valid": 1}, num_nodes=20, num_configs=8)
    return d


def tile(work: Path) -> Path:
    return work / "tile" / "npz" / "tile" / "xla"


def layout(work: Path) -> Path:
    return work / "layout" / "npz" / "layout" / "xla" / "random"


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


# ------------------------------------------------------------- 2: no validation split


def test_without_a_valid_split_the_run_says_the_training_loss_chose_its_best_epoch(
        work, tmp_path):
    data, out = work / "novalid" / "npz" / "tile" / "xla", tmp_path / "run"
    r = run("train", data, "--out", out, "--epochs", "2", *TINY)
    assert r.exit_code == 0, r.output
    warning = [line for line in r.stderr.splitlines() if "warning" in line]
    assert len(warning) == 1 and "no valid/ split" in warning[0], r.stderr
    assert "chosen by training loss" in warning[0]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all(row["best_by"] == "train_loss" for row in rows)
    assert json.loads((out / "run.json").read_text())["best_by"] == "train_loss"
    best = rows[-1]["best_epoch"]
    loss = next(row["train_loss"] for row in rows if row["epoch"] == best)
    last = r.stdout.strip().splitlines()[-1]
    assert f"best epoch {best} by training loss {loss:.4f} (no valid/ split)" in last, last
    assert "score" not in last

    report = tmp_path / "report"
    r = run("report", out, "--data", data, "--out", report)
    assert r.exit_code == 0, r.output
    assert f"best epoch {best} chosen by training loss {loss:.4f}" in \
        (report / "index.html").read_text()


def test_with_a_valid_split_the_run_names_its_validation_figure(work, tmp_path):
    out = tmp_path / "run"
    r = run("train", tile(work), "--out", out, "--epochs", "1", *TINY)
    assert r.exit_code == 0, r.output
    assert "warning" not in r.stderr and "training loss" not in r.output
    assert "best epoch 1 (validation OPA " in r.stdout  # mlp's official recipe: opa
    assert json.loads((out / "run.json").read_text())["best_by"] == "valid_opa_pooled"


# ------------------------------------------------------- 10f: what a resume may change


def killed_run(work: Path, out: Path) -> Path:
    """A run stopped after epoch 1 of 2, as if killed: `out/last.pt` to resume."""
    r = run("train", tile(work), "--out", out, "--epochs", "2", *TINY,
            "--set", "stop_after_epoch=1")
    assert r.exit_code == 0, r.output
    assert (out / "last.pt").exists() and not (out / "model.pt").exists()
    return out


@pytest.mark.parametrize("setting, new", [("lr", 0.5), ("weight_decay", 0.25), ("seed", 7),
                                          ("select_on", "score")])
def test_resume_refuses_a_setting_that_the_restored_state_would_override(
        work, tmp_path, setting, new):
    out = killed_run(work, tmp_path / "run")
    before = (out / "last.pt").read_bytes()
    stored = load_checkpoint(out / "last.pt")["settings"][setting]
    assert stored != new
    refused(run("train", tile(work), "--out", out, "--epochs", "2", *TINY, "--resume",
                "--set", f"{setting}={new}"),
            out / "last.pt", f"setting {setting} is {stored!r} in the run, {new!r} here",
            "cannot change it")
    assert (out / "last.pt").read_bytes() == before and not (out / "model.pt").exists()


def test_resume_applies_the_settings_that_may_change(work, tmp_path):
    out = killed_run(work, tmp_path / "run")
    r = run("train", tile(work), "--out", out, "--epochs", "3", *TINY, "--resume",
            "--set", "patience=5", "--set", "warmup_steps=3")
    assert r.exit_code == 0, r.output
    settings = load_checkpoint(out / "last.pt")["settings"]
    assert (settings["epochs"], settings["patience"], settings["warmup_steps"]) == (3, 5, 3)
    rows = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(row)["epoch"] for row in rows] == [1, 2, 3]


# ------------------------------------------------ 10g: settings of the other kind only


@pytest.mark.parametrize("data, setting, applies, kind", [
    (layout, "tile_join=late", "tile", "layout"),
    (tile, "change_features=true", "layout", "tile"),
    (tile, "prune_hops=1", "layout", "tile"),
    (tile, "segment_size=100", "layout", "tile"),
])
def test_a_setting_of_the_other_kind_only_is_refused_naming_it_and_the_kind(
        work, tmp_path, data, setting, applies, kind):
    out = tmp_path / "run"
    key = setting.partition("=")[0]
    refused(run("train", data(work), "--out", out, "--epochs", "1", *RANKER, "--set", setting),
            f"setting '{key}' applies to {applies} models only", f"this is a {kind} ranker")
    assert not out.exists()
    refused(run("crossval", data(work), "--folds", "2", *RANKER, "--set", setting),
            f"'{key}'", f"{kind} ranker")


def test_a_setting_of_its_own_kind_is_stored_and_applied(work, tmp_path):
    out = tmp_path / "run"
    r = run("train", layout(work), "--out", out, "--epochs", "1", *RANKER,
            "--set", "change_features=true")
    assert r.exit_code == 0, r.output
    assert load_checkpoint(out / "model.pt")["settings"]["change_features"] is True


# ------------------------------------ 10h: a batch that cannot split, a run that failed


def test_nproc_above_the_graphs_of_a_step_is_refused_before_any_rank_starts(work, tmp_path):
    out = tmp_path / "run"
    refused(run("train", tile(work), "--out", out, "--epochs", "1", *TINY, "--nproc", "3",
                "--set", "graphs_per_batch=2"),
            "--nproc 3", "graphs_per_batch is 2", "at least 3", "--nproc to at most 2")
    refused(run("train", tile(work), "--out", out, "--epochs", "1", *TINY, "--nproc", "4"),
            "--nproc 4", "there are 3 train graphs", "--nproc to at most 3")
    assert not out.exists()  # no rank started, no file written
    # a batch that splits: 2 processes train into the same folder
    r = run("train", tile(work), "--out", out, "--epochs", "1", *TINY, "--nproc", "2",
            "--set", "graphs_per_batch=2")
    assert r.exit_code == 0, r.output
    assert (out / "model.pt").exists()
    assert load_checkpoint(out / "last.pt")["settings"]["graphs_per_batch"] == 2


def test_a_run_that_failed_before_its_first_epoch_does_not_block_its_rerun(work, tmp_path):
    out = tmp_path / "run"
    refused(run("train", tile(work), "--out", out, "--epochs", "1", *TINY,
                "--set", "memory_budget=1K"), "memory budget")
    r = run("train", tile(work), "--out", out, "--epochs", "1", *TINY)
    assert r.exit_code == 0, r.output
    # what a run killed during its first epoch leaves: run.json, metrics.jsonl, no weights
    killed = tmp_path / "killed"
    killed.mkdir()
    (killed / "run.json").write_text('{"collection": "another"}')
    (killed / "metrics.jsonl").write_text("")
    r = run("train", tile(work), "--out", killed, "--epochs", "1", *TINY)
    assert r.exit_code == 0, r.output
    assert json.loads((killed / "run.json").read_text())["collection"] == "tile:xla"
    assert (killed / "model.pt").exists()
