"""A full disk is the machine's fault: one `Error:` line, exit 1, nothing half-written,
and never a healthy input file called corrupt (issue 42, items 1 and 6)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import full_disk, part_of, refused

from graphcost.cli import main

SAMPLE = Path(__file__).resolve().parents[1] / "graphcost" / "sample" / "npz" / "layout" / "cpu"
DEFAULT = SAMPLE / "default"
FULL = os.strerror(errno.ENOSPC)


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """A layout model (the changed-bytes rule: no training) for the bundled collections."""
    out = tmp_path_factory.mktemp("model") / "run"
    r = run("train", DEFAULT, "--model", "changed-bytes", "--out", out)
    assert r.exit_code == 0, r.output
    return out / "model.pt"


def test_a_full_read_cache_stops_every_reader_and_calls_no_file_corrupt(
        tmp_path, monkeypatch, model):
    cache = Path(os.environ["GRAPHCOST_CACHE"])
    full_disk(monkeypatch, lambda p: cache in p.parents)
    for args in (["train", DEFAULT, "--model", "changed-bytes", "--out", tmp_path / "run"],
                 ["evaluate", model, DEFAULT],
                 ["validate", DEFAULT]):
        r = run(*args)
        refused(r, "read cache", "GRAPHCOST_CACHE", "full", ".npz", code=1)
        assert "corrupt" not in r.output and "skipp" not in r.output, r.output
    assert not (tmp_path / "run" / "model.pt").exists()
    assert not list(cache.rglob("*.npy")) and not list(cache.rglob("*.part"))


def test_a_read_cache_that_is_a_file_is_named_not_the_graph_files(tmp_path, monkeypatch):
    blocker = tmp_path / "cache_is_a_file"
    blocker.write_text("")
    monkeypatch.setenv("GRAPHCOST_CACHE", str(blocker))
    r = run("validate", DEFAULT)
    refused(r, "GRAPHCOST_CACHE", str(blocker), "writable folder")
    assert "corrupt" not in r.output and "valid" not in r.output.split("Error:")[0]


def test_a_full_disk_while_saving_last_pt_is_one_line_and_exit_1(tmp_path, monkeypatch):
    out = tmp_path / "run"
    full_disk(monkeypatch, part_of("last.pt"))
    refused(run("train", DEFAULT, "--out", out, "--epochs", "1", "--set", "hidden=8",
                "--set", "progress=false", "--set", "configs_per_graph=4"),
            out / "last.pt", FULL, "nothing was written", code=1)
    assert not (out / "last.pt").exists() and not list(out.glob(".*.part"))


def test_a_report_on_a_full_disk_leaves_no_page_and_no_empty_file(tmp_path, monkeypatch,
                                                                  model):
    full_disk(monkeypatch, part_of("index.html"))
    out = tmp_path / "report"
    refused(run("report", model.parent, "--out", out), out / "index.html", FULL, code=1)
    assert not (out / "index.html").exists() and not list(out.glob(".*.part"))
    assert all(f.stat().st_size > 0 for f in out.iterdir())


def test_autotune_refuses_an_unwritable_out_before_measuring(tmp_path, model):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    for flag in ("--out", "--report"):
        r = run("autotune", "mlp.000", "--model", model, flag, blocker / "chosen.json",
                "--no-pin")
        refused(r, blocker / "chosen.json", "is a file")
        assert "measur" not in r.output.split("Error:")[0], r.output


def test_predict_into_a_full_stdout_is_one_line_and_exit_1(model):
    graph = next((DEFAULT / "test").glob("*.npz"))
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "graphcost", "predict", str(model),
                            str(graph)], stdout=full, stderr=subprocess.PIPE, text=True,
                           timeout=120)
    assert p.returncode == 1, p.stderr
    assert p.stderr.strip().splitlines() == [
        f"Error: standard output: {FULL} (the disk or quota is full)"], p.stderr
