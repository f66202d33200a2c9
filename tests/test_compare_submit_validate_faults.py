"""Issue 42, item 10: compare, submit, read_submission and validate say when their
inputs do not fit, instead of answering anyway."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import raw_arrays, refused

from graphcost.cli import main
from graphcost.data.inspect import sample_root
from graphcost.data.synthetic import make_tile_graph, write_collection
from graphcost.eval.submission import SubmissionError, read_submission
from graphcost.formats import read_graph, write_graph

torch.set_num_threads(1)

FAMILIES = {"mlp": 3, "cnn": 2, "rnn": 2, "attn": 2}


def run(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


def tile_families(root: Path, source: str = "synth", families=FAMILIES, drop: int = 0) -> Path:
    """A tile collection `tile:<source>` of graphs named `family.NNN`, spread over the
    splits; `drop` leaves out that many of the last graphs."""
    rng = np.random.default_rng(0)
    base = root / "npz" / "tile" / source
    names = [f"{fam}.{j:03d}" for fam, count in families.items() for j in range(count)]
    for i, name in enumerate(names[:len(names) - drop]):
        g = make_tile_graph(rng, num_nodes=8, num_configs=8, name=name)
        write_graph(base / ("train", "valid", "test")[i % 3] / f"{name}.npz", g)
    return base


MINE = ("--model", "config-only")  # a heuristic: crossval trains nothing
OTHER = ("--model", "config-only", "--set", "ridge=1")  # another model to compare with


def crossval(data: Path, out: Path, *args: object) -> Path:
    """The crossval result (`--json`) of `args`, written to `out`."""
    r = run("crossval", data, "--json", out, *args)
    assert r.exit_code == 0, r.output
    return out


# --------------------------------------------------------------------------- compare


def test_compare_refuses_results_of_another_protocol_naming_both_files_and_the_field(
        tmp_path):
    data = tile_families(tmp_path / "zoo")
    mine = crossval(data, tmp_path / "mine.json", *MINE, "--folds", "2")
    seed1 = crossval(data, tmp_path / "seed1.json", *MINE, "--folds", "2",
                     "--seed", "1")
    theirs = crossval(data, tmp_path / "theirs.json", *OTHER, "--folds", "2")
    # the same protocol, other seeds and models: paired, --heuristic included
    ok = run("compare", mine, seed1, "--against", theirs, "--heuristic", theirs)
    assert ok.exit_code == 0 and "over 9 graphs scored by both" in ok.output, ok.output
    three = crossval(data, tmp_path / "three.json", *OTHER, "--folds", "3")
    refused(run("compare", mine, "--against", three),
            "mine.json", "three.json", "differ in folds: 2 and 3")
    by_graph = crossval(data, tmp_path / "graph.json", *OTHER, "--folds", "2",
                        "--group", "graph")
    refused(run("compare", mine, "--against", by_graph),
            "mine.json", "graph.json", "differ in group: 'family' and 'graph'")
    refused(run("compare", mine, "--against", theirs, "--heuristic", by_graph),
            "mine.json", "graph.json", "group")
    refused(run("compare", mine, seed1, "--against", theirs, "--ensemble", "--heuristic",
                by_graph), "graph.json", "group")
    # a collection of the same name that holds one graph fewer
    fewer = crossval(tile_families(tmp_path / "copy", drop=1), tmp_path / "fewer.json",
                     *OTHER, "--folds", "2")
    refused(run("compare", mine, "--against", fewer), "mine.json", "fewer.json",
            "differ in the graphs scored: 9 and 8", "attn.001")


def test_compare_refuses_external_results_of_another_external_or_training_set(tmp_path):
    zoo = tile_families(tmp_path / "zoo")
    other_zoo = tile_families(tmp_path / "zoo2", source="other")
    ext = tile_families(tmp_path / "ext", source="ext", families={"flax_cnn": 2, "eqx": 1})
    ext2 = tile_families(tmp_path / "ext2", source="ext2", families={"flax_cnn": 2, "eqx": 1})
    a = crossval(zoo, tmp_path / "a.json", *MINE, "--external", ext)
    b = crossval(zoo, tmp_path / "b.json", *OTHER, "--external", ext, "--seed", "1")
    ok = run("compare", a, "--against", b)
    assert ok.exit_code == 0 and "over 3 graphs scored by both" in ok.output, ok.output
    c = crossval(zoo, tmp_path / "c.json", *OTHER, "--external", ext2)
    refused(run("compare", a, "--against", c), "a.json", "c.json", "differ in collection")
    d = crossval(other_zoo, tmp_path / "d.json", *OTHER, "--external", ext)
    refused(run("compare", a, "--against", d), "a.json", "d.json",
            "differ in trained_on: 'tile:synth' and 'tile:other'")
    folds = crossval(zoo, tmp_path / "folds.json", *OTHER, "--folds", "2")
    refused(run("compare", a, "--against", folds), "a.json", "folds.json", "differ in")


# --------------------------------------------------------------------------- submit


def test_submit_refuses_a_collection_given_two_models_naming_it_and_both(tmp_path):
    data = tile_families(tmp_path / "data")
    models = []
    for name, ridge in (("a", "0.001"), ("b", "1")):
        r = run("train", data, "--model", "config-only", "--set", f"ridge={ridge}",
                "--out", tmp_path / name)
        assert r.exit_code == 0, r.output
        models.append(tmp_path / name / "model.pt")
    out = tmp_path / "sub.csv"
    refused(run("submit", data, "-m", f"tile:synth={models[0]}", "-m",
                f"tile:synth={models[1]}", "--out", out),
            "tile:synth", str(models[0]), str(models[1]))
    refused(run("submit", data, "-m", models[0], "-m", f"tile:synth={models[1]}",
                "--out", out), "tile:synth", str(models[0]), str(models[1]))
    assert not out.exists()


def test_submit_on_the_bundled_options_collection_reads_back_and_other_ids_are_refused(
        tmp_path):
    data = sample_root() / "npz" / "options" / "cpu"
    r = run("train", data, "--model", "default-first", "--out", tmp_path / "run")
    assert r.exit_code == 0, r.output
    model, out = tmp_path / "run" / "model.pt", tmp_path / "sub.csv"
    r = run("submit", data, "-m", model, "--out", out)
    assert r.exit_code == 0, r.output
    expected = {f"options:cpu:{p.stem}": read_graph(p, runtimes=False).num_configs
                for p in sorted((data / "test").glob("*.npz"))}
    assert sorted(read_submission(out, expected)) == sorted(expected) != []
    lines = out.read_text().splitlines()
    for extra, needles in (("options:cpu:nosuch", ["graph nosuch that options:cpu lacks"]),
                           ("tile:xla:k", ["expected collection (options:cpu)", "tile:xla"])):
        bad = tmp_path / "extra.csv"
        bad.write_text("\n".join([*lines, f"{extra},0;1;2;3;4"]) + "\n")
        with pytest.raises(SubmissionError) as e:
            read_submission(bad, expected)
        for needle in [str(bad), f"line {len(lines) + 1}", f"ID '{extra}'", *needles]:
            assert needle in str(e.value), (needle, str(e.value))
    # a collection with no ID's name (a folder outside npz/) is refused before ranking
    shutil.copytree(data / "test", tmp_path / "mine" / "test")
    refused(run("submit", tmp_path / "mine", "-m", model, "--out", tmp_path / "mine.csv"),
            "collection mine", "options:<source>:<graph>")
    assert not (tmp_path / "mine.csv").exists()


# --------------------------------------------------------------------------- validate


def _rewrite(path: Path, **arrays: np.ndarray) -> None:
    """`path` again with some of its arrays replaced."""
    a = raw_arrays(read_graph(path, lazy=False))
    path.unlink()
    np.savez(path, **{**a, **arrays})


def test_validate_refuses_the_nan_and_negative_runtimes_evaluate_leaves_out(tmp_path):
    base = write_collection(tmp_path / "data", kind="tile", source="synth",
                            splits={"train": 3, "valid": 1, "test": 4}, num_nodes=8,
                            num_configs=8)
    tests = sorted((base / "test").glob("*.npz"))
    rt = read_graph(tests[0]).config_runtime
    _rewrite(tests[0], config_runtime=np.where(np.arange(8) == 1, np.nan, rt))
    _rewrite(tests[1], config_runtime=np.where(np.arange(8) == 2, -3.0, rt))
    _rewrite(tests[2], config_runtime_normalizers=np.where(np.arange(8) == 4, np.nan, rt))
    r = run("validate", base)
    assert r.exit_code == 1
    bad = sorted(line for line in r.output.splitlines() if line.startswith("BAD"))
    assert len(bad) == 3 and "5 of 8 files valid" in r.output, r.output
    keys = ("'config_runtime'", "'config_runtime'", "'config_runtime_normalizers'")
    for line, path, needle in zip(bad, tests[:3], keys, strict=True):
        assert str(path) in line and needle in line, line
    assert "got nan at config 1" in bad[0] and "got -3.0 at config 2" in bad[1]
    r = run("train", base, "--model", "config-only", "--out", tmp_path / "run")
    assert r.exit_code == 0, r.output
    r = run("evaluate", tmp_path / "run" / "model.pt", base, "--split", "test")
    assert r.exit_code == 0 and "warning: 3 files left out" in r.output, r.output
    assert [line.split()[0] for line in r.output.splitlines()
            if line.startswith("synth_test_")] == [tests[3].stem]
    # placeholders (absent, or zeros as the published test split) stay files to rank
    _rewrite(tests[3], config_runtime=np.zeros(8))
    assert run("validate", tests[3]).exit_code == 0


def test_duplicate_configs_more_than_2x_apart_are_named_by_validate_and_evaluate(
        tmp_path, caplog):
    base = write_collection(tmp_path / "data", kind="tile", source="synth",
                            splits={"train": 3, "valid": 1, "test": 2}, num_nodes=8,
                            num_configs=8)
    path = sorted((base / "test").glob("*.npz"))[0]
    g = read_graph(path)
    feat, rt = g.config_feat.copy(), g.config_runtime.copy()
    feat[1], rt[1] = feat[0], 3 * rt[0]  # one config measured 3x apart: contradicts
    feat[3], rt[3] = feat[2], 1.5 * rt[2]  # 1.5x apart: noise, said nothing of
    norm = np.full(8, g.config_runtime_normalizers[0])
    _rewrite(path, config_feat=feat, config_runtime=rt, config_runtime_normalizers=norm)
    r = run("validate", base)
    assert r.exit_code == 0 and "6 of 6 files valid" in r.output, r.output
    warned = [line for line in r.output.splitlines() if line.startswith("WARN")]
    assert len(warned) == 1, r.output
    for needle in (str(path), ": 1 of its", "groups of identical configs", "more than 2×",
                   "up to 3×"):
        assert needle in warned[0], (needle, warned[0])
    r = run("train", base, "--model", "config-only", "--out", tmp_path / "run")
    assert r.exit_code == 0, r.output
    caplog.clear()
    out = tmp_path / "eval.json"
    r = run("evaluate", tmp_path / "run" / "model.pt", base, "--split", "test", "--json", out)
    assert r.exit_code == 0, r.output
    said = [rec for rec in caplog.records if "identical configs" in rec.getMessage()]
    assert len(said) == 1 and said[0].levelname == "WARNING"
    assert str(path) in said[0].getMessage() and ": 1 of its" in said[0].getMessage()
    assert "identical configs" not in r.stdout  # stderr only: the report is unchanged
    assert path.stem in json.loads(out.read_text())["graphs"]


def test_the_bundled_sample_has_no_contradicting_duplicates():
    r = run("validate", sample_root() / "npz")
    assert r.exit_code == 0 and "WARN" not in r.output, r.output
