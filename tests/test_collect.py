"""Whole collection runs: layout on disk, resumption, crashes, family splits, noise."""

import json
import os

import pytest

pytest.importorskip("jax")

from graphcost.data.collection import find_collections  # noqa: E402
from graphcost.data.inspect import validate_paths  # noqa: E402
from graphcost.xla.collect import collect, read_log  # noqa: E402
from graphcost.xla.measure import Protocol  # noqa: E402
from graphcost.xla.plan import CollectSpec, assign_splits, plan_tasks  # noqa: E402

FAST = Protocol(warmup=1, runs=3)
TINY = {"per_family": 1, "families": ["mlp", "reduction"]}


def crashing_programs():
    """A program whose tracing kills its process, and one that is fine."""
    import jax.numpy as jnp

    def crash(x):
        os._exit(3)

    return [("crash.000", crash, (jnp.ones((4, 4)),)),
            ("fine.000", lambda x: (x @ x).sum(), (jnp.ones((8, 8)),))]


def test_splits_keep_families_apart():
    fams = [f"f{i}" for i in range(10)]
    s = assign_splits(fams, seed=3)
    assert set(s) == set(fams)
    assert {"train", "valid", "test"} == set(s.values())
    assert assign_splits(fams, seed=3) == s
    assert set(assign_splits(["a", "b", "c"]).values()) == {"train", "valid", "test"}


def test_collection_resumes_after_a_stop_and_measures_noise(tmp_path):
    spec = CollectSpec(out=str(tmp_path), program_kwargs=TINY, num_configs=3, protocol=FAST,
                       limit=2)
    tasks = plan_tasks(spec)
    assert len(tasks) == 6
    first = collect(spec)
    assert first.written == 2 and first.remaining == 4
    (tmp_path / "log.jsonl").open("a").write('{"cut off by a ki')  # a kill mid-write
    spec.limit = 0
    second = collect(spec, repeat=1)
    assert second.skipped == 2 and second.written == 4 and second.remaining == 0

    files = sorted(tmp_path.rglob("*.npz"))
    assert len(files) == 6 and not list(tmp_path.rglob("*.part"))
    assert validate_paths([tmp_path]) == []
    log = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()
           if x.startswith('{"') and '"status": "ok"' in x]
    assert sorted(e["path"] for e in log) == sorted(map(str, files))  # each graph once
    colls = find_collections(tmp_path / "npz")
    assert set(colls) == {"layout:cpu:random", "layout:cpu:default", "options:cpu"}
    for name, coll in colls.items():
        fams = {s: {f.name.split(".")[0] for f in files} for s, files in coll.splits.items()}
        assert not (fams.get("train", set()) & fams.get("valid", set()))
        manifest = json.loads((coll.root / "manifest.json").read_text())
        assert manifest["jax"] and manifest["samples_per_minute_per_core"] > 0
        assert "noise_ceiling_tau" in manifest, name
    assert json.loads((tmp_path / "noise.json").read_text())["graphs"]


def test_a_crashing_program_is_reported_and_the_rest_finish(tmp_path):
    spec = CollectSpec(out=str(tmp_path), programs=["test_collect:crashing_programs"],
                       kinds=["options"], num_configs=2, protocol=FAST, workers=1)
    result = collect(spec)
    assert result.written == 1 and result.failed == 1
    log = read_log(tmp_path)
    crashed = [e for e in log.values() if e["status"] == "crashed"]
    assert len(crashed) == 1 and "crash.000" in crashed[0]["path"]
    again = collect(spec)  # a logged crash is not retried unless asked
    assert again.written == 0 and again.remaining == 0


def test_cli_measure_prints_every_config(tmp_path):
    from click.testing import CliRunner

    from graphcost.cli import main

    out = tmp_path / "g.npz"
    r = CliRunner().invoke(main, ["measure", "mlp.000", "--per-family", "1", "--configs", "3",
                                  "--runs", "3", "--warmup", "1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert r.output.count("config ") == 3 and out.exists()
    bad = CliRunner().invoke(main, ["measure", "nope.000", "--per-family", "1"])
    assert bad.exit_code != 0 and "no program" in bad.output
