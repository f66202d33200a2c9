"""Whole collection runs: layout on disk, resumption after a kill, crashes, family splits,
the pipeline, the noise ceiling."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

from graphcost.data.collection import find_collections  # noqa: E402
from graphcost.data.inspect import validate_paths  # noqa: E402
from graphcost.formats.npz import read_extra  # noqa: E402
from graphcost.xla.collect import collect  # noqa: E402
from graphcost.xla.manifest import collection_figures, write_summary  # noqa: E402
from graphcost.xla.plan import (  # noqa: E402
    CollectSpec,
    assign_splits,
    collection_name,
    plan_tasks,
)
from graphcost.xla.restart_log import pending_tasks, read_log  # noqa: E402
from graphcost.xla.timing import Protocol  # noqa: E402

FAST = Protocol(warmup=1, runs=3, max_run_s=30)  # no timeout on a busy machine
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


def test_a_resumed_run_naming_fewer_families_keeps_the_written_splits(tmp_path):
    fams = ["mlp", "reduction", "rnn", "vit", "moe"]
    spec = CollectSpec(out=str(tmp_path), kinds=["options"],
                       program_kwargs={"per_family": 1, "families": fams})
    first = {t.program: t.split for t in plan_tasks(spec)}
    for t in plan_tasks(spec):  # as if measured
        t.path(tmp_path).parent.mkdir(parents=True, exist_ok=True)
        t.path(tmp_path).write_bytes(b"")
    fewer = CollectSpec(out=str(tmp_path), kinds=["options"],
                        program_kwargs={"per_family": 2, "families": fams[:2]})
    drawn = assign_splits(fams[:2])
    assert any(drawn[f] != first[f + ".000"] for f in drawn)  # the draw alone would move one
    tasks = plan_tasks(fewer)
    assert {t.program: t.split for t in tasks} == {
        f"{f}.{i:03d}": first[f + ".000"] for f in fams[:2] for i in range(2)}
    assert [t.program for t in pending_tasks(fewer, tasks)] == ["mlp.001", "reduction.001"]


def test_collection_resumes_after_a_stop_and_measures_noise(tmp_path):
    spec = CollectSpec(out=str(tmp_path), program_kwargs=TINY, num_configs=3, protocol=FAST,
                       limit=2)
    tasks = plan_tasks(spec)
    assert len(tasks) == 6
    first = collect(spec)
    assert first.written == 2 and first.remaining == 4
    lines = (tmp_path / "log.jsonl").read_text().splitlines(keepends=True)
    unlogged = json.loads(lines[-1])["path"]  # killed after writing the file, before its line
    (tmp_path / "log.jsonl").write_text("".join(lines[:-1]) + '{"cut off by a ki')
    spec.limit = 0
    second = collect(spec)
    assert second.skipped == 2 and second.written == 4 and second.remaining == 0
    assert second.samples > 0 and second.samples_per_minute > 0

    files = sorted(tmp_path.rglob("*.npz"))
    assert len(files) == 6 and not list(tmp_path.rglob("*.part"))
    assert validate_paths([tmp_path]) == []
    log = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()
           if x.startswith('{"') and '"status": "ok"' in x]
    assert sorted(e["path"] for e in log) == sorted(map(str, files))  # each graph once
    recovered = [e for e in log if e.get("recovered")]
    assert [e["path"] for e in recovered] == [unlogged] and recovered[0]["noise_tau"] is not None
    assert recovered[0]["exhausted"] == (recovered[0]["distinct"] < spec.num_configs)
    colls = find_collections(tmp_path / "npz")
    assert set(colls) == {"layout:cpu:random", "layout:cpu:default", "options:cpu"}
    for name, coll in colls.items():
        fams = {s: {f.name.split(".")[0] for f in files} for s, files in coll.splits.items()}
        assert not (fams.get("train", set()) & fams.get("valid", set()))
        manifest = json.loads((coll.root / "manifest.json").read_text())
        assert manifest["jax"] and manifest["samples_per_minute_per_core"] > 0
        taus = [e["noise_tau"] for e in log if collection_name(e["task"]["kind"]) == name]
        assert len(taus) == 2, name
        assert manifest["noise_ceiling_tau"] == pytest.approx(np.mean(taus)), name
        low, high = manifest["noise_ceiling_ci"]
        assert low <= manifest["noise_ceiling_tau"] <= high
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary) == set(colls) and all(v["graphs"] == 2 for v in summary.values())
    for v in summary.values():  # the headline figures of each collection
        assert 1.0 <= v["random_top5_score"] <= 2.0 and v["runtime_max_over_min_median"] >= 1
        assert v["noise_ceiling_tau"] is not None and v["distinct_executables_median"] == 3
    for f in files:  # every config carries its executable and both rounds' medians
        extra = read_extra(f)
        assert extra["config_runtime_rounds"].shape[1] == FAST.rounds
        assert len(extra["config_fingerprint"]) == len(extra["config_runtime_rounds"])


def test_figures_of_a_resumed_collection_count_only_what_this_log_timed():
    """Graphs recovered from files (a collection extended from a copy) have no seconds: the
    rate is the timed graphs' configs over their seconds, and a recovered graph short of
    distinct executables counts as exhausted."""
    def entry(name: str, recovered: bool, distinct: int) -> dict:
        return {"status": "ok", "name": name, "kept": distinct, "distinct": distinct,
                "compile_s": 0.0 if recovered else 50.0, "time_s": 0.0 if recovered else 10.0,
                "recovered": recovered, "exhausted": distinct < 24, "noise_tau": 0.5,
                "runtime_max_over_min": 2.0, "median_runtime_ms": 1.0, "median_spread": 0.1,
                "random_top5_score": 1.5}

    figures = collection_figures([entry("mlp.000", True, 9), entry("mlp.004", False, 24),
                                  entry("mlp.005", False, 24)])
    assert figures["graphs"] == 3 and figures["configs"] == 9 + 24 + 24
    assert figures["samples_per_minute_per_core"] == 24.0  # 48 configs in 120 s
    assert figures["graphs_exhausted"] == 1


def test_summary_keeps_the_collections_a_run_of_other_kinds_did_not_measure(tmp_path):
    """`collect --kinds layout:default` into a folder that also holds layout:cpu:random
    rewrites summary.json with both collections, each from its own manifest."""
    for name, graphs in (("layout:cpu:random", 192), ("layout:cpu:default", 96)):
        folder = tmp_path / "npz" / "layout" / "cpu" / name.split(":")[-1]
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text(json.dumps({"collection": name, "graphs": graphs,
                                                          "command": "graphcost collect"}))
    summary = write_summary(tmp_path)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert {name: s["graphs"] for name, s in summary.items()} == {
        "layout:cpu:random": 192, "layout:cpu:default": 96}
    assert "command" not in summary["layout:cpu:random"]  # the figures only


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
                                  "--runs", "3", "--warmup", "1", "--max-run-s", "30",
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert r.output.count("executable ") == 3 and out.exists()
    assert "3 distinct executables" in r.output
    bad = CliRunner().invoke(main, ["measure", "nope.000", "--per-family", "1"])
    assert bad.exit_code != 0 and "no program" in bad.output


def _files(folder: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*.npz")}


def test_a_killed_collection_resumes_without_measuring_anything_twice(tmp_path):
    """Kill the whole run (parent and workers) as soon as a graph is written; the rerun
    leaves every written file alone and measures exactly the rest."""
    spec = dict(out=str(tmp_path), program_kwargs={**TINY, "per_family": 3}, num_configs=2,
                protocol={"warmup": 1, "runs": 3}, kinds=["layout:random", "options"])
    total = 12
    code = ("import json, sys; from graphcost.xla.collect import collect; "
            "from graphcost.xla.plan import CollectSpec; "
            "collect(CollectSpec(**json.loads(sys.argv[1])))")
    proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(spec)],
                            start_new_session=True, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not _files(tmp_path) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _files(tmp_path)
    assert 1 <= len(before) < total, "the kill came after the whole run finished"
    result = collect(CollectSpec(**spec))
    assert result.skipped == len(before) and result.written == total - len(before)
    after = _files(tmp_path)
    assert {p: after[p] for p in before} == before  # nothing written before was touched
    measured = []
    for line in (tmp_path / "log.jsonl").read_text().splitlines():
        try:
            e = json.loads(line)
        except json.JSONDecodeError:  # a line the kill cut off
            continue
        measured += [e["path"]] if e["status"] == "ok" else []
    assert sorted(measured) == sorted(after)  # each graph measured (logged) once


def test_pipeline_and_inline_runs_sample_the_same_executables(tmp_path):
    kw = dict(program_kwargs={"per_family": 1, "families": ["mlp"]}, num_configs=4,
              protocol=FAST, kinds=["layout:random"])
    inline = collect(CollectSpec(out=str(tmp_path / "inline"), pipeline=False, **kw))
    piped = collect(CollectSpec(out=str(tmp_path / "piped"), pipeline=True, **kw))
    assert inline.written == piped.written == 1
    (a,), (b,) = (list((tmp_path / d).rglob("*.npz")) for d in ("inline", "piped"))
    fa, fb = read_extra(a)["config_fingerprint"], read_extra(b)["config_fingerprint"]
    assert fa.tolist() == fb.tolist() and len(set(fa.tolist())) == 4
    log = read_log(tmp_path / "piped")
    assert [e["core"] for e in log.values()] == [[sorted(os.sched_getaffinity(0))[-1]]]


def test_random_pick_score_is_the_mean_over_every_pick():
    from itertools import combinations

    from graphcost.stats import random_pick_score

    r = np.random.default_rng(0).uniform(1, 3, 9)
    r[3] = r[5]  # a tie, as configs sharing one executable have
    every = [2 - r[list(c)].min() / r.min() for c in combinations(range(9), 5)]
    assert random_pick_score(r) == pytest.approx(np.mean(every))
    assert random_pick_score(r[:5]) == 1.0  # five configs: any pick holds the best


def test_noise_ceiling_counts_each_executable_once(tmp_path):
    from graphcost.data.noise import file_noise_tau, noise_ceiling
    from graphcost.data.synthetic import make_layout_graph
    from graphcost.formats.npz import write_graph
    from graphcost.stats import kendall_tau

    g = make_layout_graph(np.random.default_rng(0), 30, 6, name="g")
    rounds = np.array([[1, 1.1], [2, 1.9], [3, 3.2], [3, 3.2], [4, 3.9], [5, 2.5]]) * 1e6
    fp = np.array([1, 2, 3, 3, 4, 5])  # rows 2 and 3: one executable, listed twice
    write_graph(tmp_path / "g.npz", g, extra={"config_fingerprint": fp,
                                              "config_runtime_rounds": rounds})
    distinct = rounds[[0, 1, 2, 4, 5]]
    assert file_noise_tau(tmp_path / "g.npz") == kendall_tau(distinct[:, 0], distinct[:, 1])
    write_graph(tmp_path / "plain.npz", g)  # published files keep no rounds
    assert file_noise_tau(tmp_path / "plain.npz") is None
    mean, low, high, n = noise_ceiling([tmp_path / "g.npz", tmp_path / "plain.npz"])
    assert n == 1 and mean == low == high == file_noise_tau(tmp_path / "g.npz")
