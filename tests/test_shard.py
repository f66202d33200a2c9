"""Sharded collection: the partition of planned graphs, and merging shard folders."""

import json
import shutil
from dataclasses import asdict

import numpy as np
import pytest
from click.testing import CliRunner

from graphcost.cli import main
from graphcost.data.inspect import validate_paths
from graphcost.data.synthetic import make_layout_graph, make_tile_graph
from graphcost.formats.npz import write_graph
from graphcost.xla import collect as collect_mod
from graphcost.xla.plan import CollectSpec, Task, assign_shards, parse_shard, shard_tasks
from graphcost.xla.restart_log import pending_tasks, read_log
from graphcost.xla.shard import MergeError, check_shards, merge

MEASURED_KINDS = ["layout:random", "options"]


def planned(programs: int = 9) -> list[Task]:
    """A plan like `plan_tasks` makes: programs x kinds, families kept within one split."""
    splits = ["train", "valid", "test"]
    return [Task(kind, "zoo", f"fam{i % 5}.{i:03d}", splits[i % 5 % 3])
            for i in range(programs) for kind in MEASURED_KINDS]


def test_parse_shard():
    assert parse_shard("0/1") == (0, 1) and parse_shard("3/4") == (3, 4)
    for bad in ("4/4", "-1/2", "1", "a/b", "1/0", ""):
        with pytest.raises(ValueError, match="I/N"):
            parse_shard(bad)
    with pytest.raises(ValueError, match="I/N"):
        CollectSpec(out="x", shard="2/2")


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7, 40])
def test_every_graph_is_in_exactly_one_shard(n):
    tasks = planned(13)
    parts = [shard_tasks(tasks, i, n) for i in range(n)]
    flat = [t for p in parts for t in p]
    assert sorted(flat, key=str) == sorted(tasks, key=str) and len(set(flat)) == len(tasks)
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1  # balanced
    assert all(p == [t for t in tasks if t in set(p)] for p in parts)  # plan order kept
    # the same partition whatever order the plan lists the graphs in
    assert assign_shards(tasks[::-1], n) == assign_shards(tasks, n)


def _fake_run_workers(todo, worker_fn, spec_d, on_done, on_crash, *rest, **kwargs):
    """Stands in for the measuring workers: writes a synthetic graph per task."""
    for i, task in enumerate(todo):
        rng = np.random.default_rng(i)
        g = (make_tile_graph(rng, 12, 6, task.program) if task.kind == "options"
             else make_layout_graph(rng, 30, 6, name=task.program))
        write_graph(task.path(spec_d["out"]), g)
        on_done({"task": asdict(task), "path": str(task.path(spec_d["out"])), "status": "ok",
                 "name": task.program, "kept": 6, "distinct": 6, "failed": [],
                 "compile_s": 1.0, "time_s": 1.0, "median_spread": 0.01,
                 "runtime_max_over_min": 2.0, "median_runtime_ms": 1.0, "noise_tau": 0.9})


@pytest.fixture
def shards(tmp_path, monkeypatch):
    """Two shard folders made by `collect --shard` (measurement faked, the rest real)."""
    pytest.importorskip("jax", reason="manifests record the JAX version: graphcost[xla]")
    tasks = planned()
    monkeypatch.setattr(collect_mod, "plan_tasks", lambda spec: list(tasks))
    monkeypatch.setattr(collect_mod, "run_workers", _fake_run_workers)
    folders = []
    for i in range(2):
        folder = tmp_path / f"shard{i}"
        r = CliRunner().invoke(main, ["collect", str(folder), "--kinds", ",".join(MEASURED_KINDS),
                                      "--shard", f"{i}/2", "--configs", "6"])
        assert r.exit_code == 0, r.output
        folders.append(folder)
    return tasks, folders


def test_sharded_collect_measures_only_its_part_and_merges(shards, tmp_path):
    tasks, folders = shards
    owned = [{Task(**e["task"]) for e in read_log(f).values()} for f in folders]
    assert owned[0].isdisjoint(owned[1]) and owned[0] | owned[1] == set(tasks)
    plan = json.loads((folders[1] / "shard.json").read_text())
    assert plan["shard"] == "1/2" and len(plan["plan"]) == len(tasks)

    out = tmp_path / "merged"
    r = CliRunner().invoke(main, ["merge", str(out), *map(str, folders)])
    assert r.exit_code == 0, r.output
    assert f"{len(tasks)} graphs, 0 failed" in r.output
    assert len(list(out.rglob("*.npz"))) == len(tasks) and validate_paths([out]) == []
    log = read_log(out)
    assert set(log) == {str(t.path(out)) for t in tasks}
    assert {e["shard"] for e in log.values()} == {"0/2", "1/2"}
    m = json.loads((out / "npz" / "options" / "cpu" / "manifest.json").read_text())
    assert sum(m["splits"].values()) == len(tasks) // 2
    assert [s["shard"] for s in m["shards"]] == ["0/2", "1/2"] and m["spec"]["shard"] == ""
    # the merged folder is an ordinary collection: an unsharded collect finds it complete
    spec = CollectSpec(out=str(out), kinds=MEASURED_KINDS)
    assert pending_tasks(spec, tasks) == []
    with pytest.raises(ValueError, match="already holds"):
        merge(out, folders)


def test_merge_lists_missing_and_duplicated_graphs(shards, tmp_path):
    tasks, (a, b) = shards
    lost = sorted((b / "npz").rglob("*.npz"))[0]
    lost.unlink()
    twice = sorted((a / "npz").rglob("*.npz"))[0]
    shutil.copy(twice, b / twice.relative_to(a))
    with pytest.raises(MergeError) as e:
        check_shards([a, b])
    assert e.value.missing == [f"{lost.relative_to(b).as_posix()} (shard 1/2)"]
    assert len(e.value.duplicated) == 1
    assert e.value.duplicated[0].startswith(twice.relative_to(a).as_posix())
    r = CliRunner().invoke(main, ["merge", str(tmp_path / "m"), str(a), str(b)])
    assert r.exit_code == 1
    assert "1 graphs missing" in r.output and lost.name in r.output
    assert "1 graphs written by more than one shard" in r.output and twice.name in r.output
    assert not (tmp_path / "m").exists()  # nothing merged


def test_merge_without_a_shard_folder_lists_its_graphs(shards):
    tasks, (a, b) = shards
    with pytest.raises(MergeError, match="whose folder was not given") as e:
        check_shards([a])
    assert len(e.value.missing) == len(tasks) // 2


def test_graphs_logged_as_failed_are_not_missing(shards, tmp_path):
    tasks, (a, b) = shards
    lost = sorted((b / "npz").rglob("*.npz"))[0]
    lost.unlink()
    entry = next(e for e in read_log(b).values() if e["path"].endswith(lost.name)
                 and lost.parent.parent.name in e["path"])
    with open(b / "log.jsonl", "a") as f:
        f.write(json.dumps(dict(entry, status="failed", error="XlaRuntimeError")) + "\n")
    result = merge(tmp_path / "m", [a, b])
    assert result.graphs == len(tasks) - 1 and result.failed == 1


def test_shards_of_another_plan_are_refused(shards, tmp_path):
    _, (a, b) = shards
    plan = json.loads((b / "shard.json").read_text())
    plan["spec"]["num_configs"] = 99
    (b / "shard.json").write_text(json.dumps(plan))
    with pytest.raises(MergeError, match="another plan"):
        check_shards([a, b])
    with pytest.raises(MergeError, match="not shards"):
        check_shards([a, tmp_path])
