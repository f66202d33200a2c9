"""Bad inputs to training and to the commands that load what it writes (issue 30): each
refused with exit status 2, one message naming the file, key or setting, and no
traceback; faults (a full disk, a second run on the same folder) lose nothing.

As in test_cli_errors.py, `no traceback` under CliRunner means: the command ended by
click's own exit (SystemExit) with status 2, not by an exception escaping it.
"""

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from conftest import full_disk, part_of, refused
from tuning_records import kernel_record

from graphcost.cli import main
from graphcost.data.synthetic import write_collection
from graphcost.models.checkpoint import load_checkpoint
from graphcost.train.run import claim_run_dir

torch.set_num_threads(1)

TINY = ("--model", "mlp", "--set", "hidden=8", "--set", "progress=false")


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A tiny tile collection (tile:xla) and a finished one-epoch run on it."""
    d = tmp_path_factory.mktemp("guards")
    write_collection(d / "data", kind="tile", source="xla",
                     splits={"train": 3, "valid": 1, "test": 2}, num_nodes=15, num_configs=12)
    r = run("train", coll(d), "--out", d / "run", "--epochs", "1", *TINY)
    assert r.exit_code == 0, r.output
    return d


def coll(root: Path, source: str = "xla") -> Path:
    return root / "data" / "npz" / "tile" / source


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def killed_run(work: Path, out: Path, *extra) -> Path:
    """A run stopped after epoch 1 of 2, as if killed: `out/last.pt` to resume."""
    r = run("train", coll(work), "--out", out, "--epochs", "2", *TINY,
            "--set", "stop_after_epoch=1", *extra)
    assert r.exit_code == 0, r.output
    assert (out / "last.pt").exists() and not (out / "model.pt").exists()
    return out


# ------------------------------------------------------------------- 1, 2: settings


@pytest.mark.parametrize("setting, needles", [
    ("loss=hinge:-1", ["'loss'", "'hinge'", "-1", "ranks backwards"]),
    ("loss=listmle:0.5,hinge:-0.5", ["'loss'", "'hinge'", "-0.5"]),
    ("loss=hinge:0", ["'loss'", "all 0"]),
    ("loss=hinge:0,listmle:0", ["'loss'", "all 0"]),
    ("loss=hinge:nan", ["'loss'", "finite"]),
    ("loss=hinge:abc", ["'loss'", "'hinge'", "must be a number", "abc"]),
    ("loss=hinge:1,hinge:2", ["'loss'", "'hinge' appears twice"]),
    ("margin=0", ["'margin'", "greater than 0"]),
    ("margin=-0.1", ["'margin'", "greater than 0"]),
    ("configs_per_graph=1", ["'configs_per_graph'", "at least 2", "got 1"]),
    ("valid_configs=1", ["'valid_configs'", "at least 2"]),
    ("max_configs=2", ["'max_configs'", "0 (no cap) or at least 3"]),
    ("gst_max_configs=1", ["'gst_max_configs'", "0 (no cap) or at least 2"]),
    ("epochs=0", ["'epochs'", "at least 1"]),
    ("lr=0", ["'lr'", "greater than 0"]),
])
def test_settings_that_train_nothing_or_backwards_are_refused_before_any_work(
        work, tmp_path, setting, needles):
    out = tmp_path / "run"
    refused(run("train", coll(work), "--out", out, *TINY, "--set", setting), *needles)
    assert not out.exists()


# ------------------------------------------------------------ 3: options beside --set


@pytest.mark.parametrize("args, needles", [
    (["--seed", "1", "--set", "seed=2"], ["'seed'", "--set seed=2", "--seed 1"]),
    (["--epochs", "1", "--set", "epochs=3"], ["'epochs'", "--set epochs=3", "--epochs 1"]),
    (["--device", "cpu", "--set", "device=cuda"], ["'device'", "--set device=cuda",
                                                   "--device cpu"]),
    (["--set", "lr=0.1", "--set", "lr=0.2"], ["'lr'", "--set lr=0.1", "--set lr=0.2"]),
    (["--set", "hidden=16"], ["'hidden'", "--set hidden=8", "--set hidden=16"]),
])
def test_a_setting_given_twice_with_different_values_is_refused_naming_both(
        work, tmp_path, args, needles):
    out = tmp_path / "run"
    refused(run("train", coll(work), "--out", out, *TINY, *args), *needles, "give it once")
    assert not out.exists()


def test_the_same_value_twice_is_fine_and_a_set_without_its_option_applies(work, tmp_path):
    r = run("train", coll(work), "--out", tmp_path / "a", *TINY, "--seed", "3",
            "--set", "seed=3", "--epochs", "1", "--set", "epochs=1")
    assert r.exit_code == 0, r.output
    r = run("train", coll(work), "--out", tmp_path / "b", *TINY, "--set", "seed=5",
            "--set", "epochs=1")  # no --seed: the default 0 no longer wins over it
    assert r.exit_code == 0, r.output
    assert load_checkpoint(tmp_path / "b" / "last.pt")["settings"]["seed"] == 5
    assert load_checkpoint(tmp_path / "a" / "last.pt")["settings"]["seed"] == 3


# ------------------------------------------------------------------- 4: eval indices


@pytest.mark.parametrize("indices, needles", [
    ({"xla_test_0000": [], "xla_test_0001": [0, 1]},
     ["'xla_test_0000'", "0 distinct", "at least 2"]),
    ({"xla_test_0000": [3, 3], "xla_test_0001": [0, 1]}, ["'xla_test_0000'", "1 distinct"]),
    ({}, ["names no graph"]),
])
def test_eval_indices_that_leave_nothing_to_rank_are_refused(work, tmp_path, indices, needles):
    path = tmp_path / "indices.json"
    path.write_text(json.dumps(indices))
    refused(run("evaluate", work / "run" / "model.pt", coll(work), "--split", "test",
                "--eval-indices", path), "indices.json", *needles)
    refused(run("evaluate", work / "run" / "model.pt", coll(work), "--max-configs", "1"),
            "--max-configs", "at least 2")


# ------------------------------------------------------- 5, 11: damaged checkpoints


def test_a_model_whose_tensor_bytes_fail_their_crc_is_refused(work, tmp_path):
    good, bad = work / "run" / "model.pt", tmp_path / "model.pt"
    state = load_checkpoint(good)
    raw = bytearray(good.read_bytes())
    tensor = next(t for t in state["state_dict"].values() if t.numel() >= 8)
    at = bytes(raw).find(tensor.numpy().tobytes())
    assert at > 0  # torch.save stores tensors uncompressed: the bytes are in the file
    raw[at + 3] ^= 0x10  # one bit of one weight: torch.load alone would load it
    bad.write_bytes(bytes(raw))
    graph = next((coll(work) / "test").glob("*.npz"))
    assert run("predict", good, graph).exit_code == 0
    refused(run("predict", bad, graph), bad, "fails its CRC check")
    refused(run("evaluate", bad, coll(work)), bad, "CRC")


def test_a_checkpoint_without_a_key_it_needs_is_refused_naming_file_and_key(work, tmp_path):
    state = load_checkpoint(work / "run" / "model.pt")
    del state["settings"]
    torch.save(state, tmp_path / "model.pt")
    graph = next((coll(work) / "test").glob("*.npz"))
    refused(run("predict", tmp_path / "model.pt", graph), tmp_path / "model.pt", "'settings'")

    out = killed_run(work, tmp_path / "run")
    ckpt = load_checkpoint(out / "last.pt")
    del ckpt["optimizer"]
    torch.save(ckpt, out / "last.pt")
    refused(run("train", coll(work), "--out", out, "--epochs", "2", *TINY, "--resume"),
            out / "last.pt", "'optimizer'")


# --------------------------------------------------------- 6, 7: the run directory


def test_train_into_an_existing_run_is_refused_unless_resume_or_overwrite(work, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(work / "run", out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    refused(run("train", coll(work), "--out", out, "--epochs", "1", *TINY), out,
            "already holds a run", "model.pt", "--resume", "--overwrite")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing replaced
    refused(run("train", coll(work), "--out", out, *TINY, "--resume", "--overwrite"),
            "give one")

    (out / "model.pt").write_bytes(b"the old run's model")
    r = run("train", coll(work), "--out", out, "--epochs", "1", *TINY, "--set", "seed=1",
            "--set", "stop_after_epoch=1", "--overwrite")
    assert r.exit_code == 0, r.output
    assert not (out / "model.pt").exists()  # the old run's files went, none outlives it
    assert load_checkpoint(out / "last.pt")["settings"]["seed"] == 1
    r = run("train", coll(work), "--out", out, "--epochs", "1", *TINY, "--set", "seed=1",
            "--resume")
    assert r.exit_code == 0, r.output
    assert load_checkpoint(out / "model.pt")["name"] == "mlp"


def test_train_help_and_readme_say_what_out_overwrite_and_the_lock_do():
    r = run("train", "--help")
    assert r.exit_code == 0
    assert "--overwrite" in r.output and "held by one run at a time" in r.output
    readme = (Path(__file__).parents[1] / "docs" / "training.md").read_text()
    assert "--overwrite" in readme and "another process holds" in readme


def test_a_run_directory_another_run_holds_is_refused_naming_it_and_the_pid(work, tmp_path):
    out = tmp_path / "run"
    with claim_run_dir(out):  # as a running `graphcost train --out run` holds it
        refused(run("train", coll(work), "--out", out, "--epochs", "1", *TINY), out,
                f"pid {os.getpid()}", "another training run")
        refused(run("train", coll(work), "--out", out, *TINY, "--resume"), out,
                f"pid {os.getpid()}")
        assert not (out / "run.json").exists()  # the holder's folder is left alone
    r = run("train", coll(work), "--out", out, "--epochs", "1", *TINY)  # released
    assert r.exit_code == 0, r.output


# ------------------------------------------------------- 8, 10: what a resume continues


def test_resume_on_other_graphs_is_refused_naming_both_collections(work, tmp_path):
    out = killed_run(work, tmp_path / "run")
    other = write_collection(tmp_path / "cpu", kind="tile", source="cpu",
                             splits={"train": 3, "valid": 1}, num_nodes=15, num_configs=12)
    refused(run("train", other, "--out", out, "--epochs", "2", *TINY, "--resume"),
            out / "last.pt", "tile:xla at", coll(work).resolve(), "tile:cpu at",
            other.resolve())
    more = write_collection(tmp_path / "more", kind="tile", source="xla",
                            splits={"train": 4, "valid": 1}, num_nodes=15, num_configs=12)
    refused(run("train", more, "--out", out, "--epochs", "2", *TINY, "--resume"),
            "3 train", "4 train", "fingerprint")
    assert not (out / "model.pt").exists()
    moved = tmp_path / "moved" / "npz" / "tile" / "xla"
    shutil.copytree(coll(work), moved)  # the same graphs elsewhere: the run goes on
    r = run("train", moved, "--out", out, "--epochs", "2", *TINY, "--resume")
    assert r.exit_code == 0, r.output
    assert (out / "model.pt").exists()


def test_resume_with_another_model_or_model_settings_is_refused_naming_them(work, tmp_path):
    out = killed_run(work, tmp_path / "run")
    refused(run("train", coll(work), "--out", out, "--epochs", "2", "--model", "mlp",
                "--set", "hidden=16", "--resume"),
            out / "last.pt", "hidden is 8 in the run, 16 here")
    refused(run("train", coll(work), "--out", out, "--epochs", "2", "--model", "sage-late",
                "--resume"),
            out / "last.pt", "tile mlp", "tile sage-late", "--model mlp")
    # another optimiser: its state would be read as the other one's
    refused(run("train", coll(work), "--out", out, "--epochs", "2", *TINY,
                "--set", "optimizer=adamw", "--resume"),  # the official recipe's is adam
            out / "last.pt", "optimizer is 'adam' in the run, 'adamw' here")


# ------------------------------------------------------------------------ 9: devices


def test_cuda_without_cuda_is_refused_by_every_command_that_takes_a_device(
        work, monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    model = work / "run" / "model.pt"
    graph = next((coll(work) / "test").glob("*.npz"))
    for args in (["train", coll(work), "--out", tmp_path / "run", *TINY, "--device", "cuda"],
                 ["train", coll(work), "--out", tmp_path / "run", *TINY,
                  "--set", "device=cuda"],
                 ["evaluate", model, coll(work), "--device", "cuda"],
                 ["predict", model, graph, "--device", "cuda"],
                 ["submit", work / "data", "-m", f"tile:xla={model}", "--out",
                  tmp_path / "sub.csv", "--device", "cuda"],
                 ["crossval", coll(work), "--folds", "2", "--device", "cuda"]):
        refused(run(*args), "'cuda'", "CUDA is not available")
    assert not (tmp_path / "run").exists() and not (tmp_path / "sub.csv").exists()


# ------------------------------------------------------------------ 12: a full disk


def no_parts(folder: Path) -> bool:
    return not list(folder.rglob("*.part"))


def test_a_full_disk_in_train_names_the_file_and_the_run_resumes(work, tmp_path, monkeypatch):
    out = tmp_path / "run"
    full_disk(monkeypatch, part_of("model.pt"))
    refused(run("train", coll(work), "--out", out, "--epochs", "1", *TINY),
            out / "model.pt", os.strerror(errno.ENOSPC), "nothing was written", code=1)
    assert not (out / "model.pt").exists() and no_parts(out)
    monkeypatch.undo()  # space freed: the run finishes from its last checkpoint
    r = run("train", coll(work), "--out", out, "--epochs", "1", *TINY, "--resume")
    assert r.exit_code == 0, r.output
    assert load_checkpoint(out / "model.pt")["name"] == "mlp"

    full_disk(monkeypatch, part_of("metrics.jsonl"), errno.EDQUOT)
    lines = (out / "metrics.jsonl").read_text()
    refused(run("train", coll(work), "--out", out, "--epochs", "2", *TINY, "--resume"),
            out / "metrics.jsonl", os.strerror(errno.EDQUOT), "left as it was", code=1)
    assert (out / "metrics.jsonl").read_text() == lines and no_parts(out)


def test_a_full_disk_in_submit_and_evaluate_json_names_the_file(work, tmp_path, monkeypatch):
    model = work / "run" / "model.pt"
    full_disk(monkeypatch, part_of("sub.csv"))
    refused(run("submit", work / "data", "-m", f"tile:xla={model}", "--out",
                tmp_path / "sub.csv"), tmp_path / "sub.csv", os.strerror(errno.ENOSPC), code=1)
    assert not (tmp_path / "sub.csv").exists() and no_parts(tmp_path)

    full_disk(monkeypatch, part_of("report.json"))
    (tmp_path / "report.json").write_text("the last report\n")
    refused(run("evaluate", model, coll(work), "--json", tmp_path / "report.json"),
            tmp_path / "report.json", os.strerror(errno.ENOSPC), "left as it was", code=1)
    assert (tmp_path / "report.json").read_text() == "the last report\n"
    assert no_parts(tmp_path)


def test_a_full_disk_in_convert_names_the_file(tmp_path, monkeypatch):
    src = kernel_record(tmp_path / "kernels.pb", 100)  # one kernel, three timed configs
    out = tmp_path / "out"
    assert run("convert", src, tmp_path / "ok").exit_code == 0  # the record converts
    assert list((tmp_path / "ok" / "tile").glob("*.npz"))
    written = next((tmp_path / "ok" / "tile").glob("*.npz")).name
    full_disk(monkeypatch, part_of(written))
    refused(run("convert", src, out), out / "tile" / written, os.strerror(errno.ENOSPC), code=1)
    assert not list(out.rglob("*.npz")) and no_parts(out)
