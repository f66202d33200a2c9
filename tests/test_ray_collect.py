"""Collection on a real local Ray cluster: the same plan and configs as the local
collector, workers killed mid-run, shards merged, and the CLI's errors."""

import os
import signal
import socket
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("ray", reason="collect --ray needs the extra graphcost[ray]")

from click.testing import CliRunner  # noqa: E402

from graphcost.bench.collect import bench_collect  # noqa: E402
from graphcost.cli import main  # noqa: E402
from graphcost.data.inspect import validate_paths  # noqa: E402
from graphcost.errors import UserError  # noqa: E402
from graphcost.formats import read_graph  # noqa: E402
from graphcost.formats.npz import read_extra  # noqa: E402
from graphcost.xla.collect import collect  # noqa: E402
from graphcost.xla.plan import CollectSpec  # noqa: E402
from graphcost.xla.ray_pool import (  # noqa: E402
    Slot,
    _probe,
    connected,
    node_resources,
    timing_slots,
)
from graphcost.xla.restart_log import read_log  # noqa: E402
from graphcost.xla.timing import Protocol  # noqa: E402

FAST = Protocol(warmup=1, runs=3, max_run_s=30)  # no timeout on a busy machine
TINY = {"per_family": 1, "families": ["mlp", "reduction"]}


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray instance for the module, started as `collect --ray` starts it;
    collect runs reuse it (and leave it running), so tests that need no Ray session come
    before the first that takes this fixture."""
    with connected("local") as ray:
        yield ray


def dying_programs(marker: str = ""):
    """`dies.once` kills its worker the first time it is traced (then leaves a marker),
    `dies.always` every time, `fine.000` never."""
    import jax.numpy as jnp

    def once(x):
        if not Path(marker).exists():
            Path(marker).touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return (x * 2).sum()

    def always(x):
        os.kill(os.getpid(), signal.SIGKILL)

    args = (jnp.ones((8, 8)),)
    return [("dies.once", once, args), ("dies.always", always, args),
            ("fine.000", lambda x: (x @ x).sum(), args)]


def _npz(folder: Path) -> dict[str, Path]:
    return {p.relative_to(folder).as_posix(): p for p in folder.rglob("*.npz")}


def test_an_unreachable_cluster_is_a_clear_error(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = CliRunner().invoke(main, ["collect", str(tmp_path), "--ray", f"127.0.0.1:{port}",
                                  "--per-family", "1", "--families", "mlp"])
    assert r.exit_code == 2 and f"cannot reach the Ray cluster at '127.0.0.1:{port}'" in r.output


def test_a_ray_collection_measures_the_local_collectors_plan(ray_cluster, tmp_path):
    kw = dict(program_kwargs=TINY, num_configs=3, protocol=FAST)
    local = collect(CollectSpec(out=str(tmp_path / "local"), **kw))
    on_ray = collect(CollectSpec(out=str(tmp_path / "ray"), ray="local", **kw))
    assert local.written == on_ray.written == 6 and on_ray.failed == 0
    a, b = _npz(tmp_path / "local"), _npz(tmp_path / "ray")
    assert sorted(a) == sorted(b)  # the same graphs in the same splits
    for rel in a:  # the same sampled configs and executables; only the timings differ
        ga, gb = read_graph(a[rel]), read_graph(b[rel])
        assert np.array_equal(ga.node_feat, gb.node_feat)
        key = "config_feat" if ga.kind == "tile" else "node_config_feat"
        assert np.array_equal(np.asarray(getattr(ga, key)), np.asarray(getattr(gb, key)))
        assert (read_extra(a[rel])["config_fingerprint"].tolist()
                == read_extra(b[rel])["config_fingerprint"].tolist())
        assert (gb.config_runtime > 0).all()
    log = read_log(tmp_path / "ray")
    assert sorted(log) == sorted(str(p) for p in b.values())
    cores = set(os.sched_getaffinity(0))
    assert all(len(e["core"]) == 1 and set(e["core"]) <= cores for e in log.values())
    assert validate_paths([tmp_path / "ray"]) == []
    again = collect(CollectSpec(out=str(tmp_path / "ray"), ray="local", **kw))
    assert again.written == 0 and again.skipped == 6


def test_a_killed_worker_loses_nothing_and_resume_measures_nothing(ray_cluster, tmp_path):
    out = tmp_path / "out"
    spec = CollectSpec(out=str(out), programs=["test_ray_collect:dying_programs"],
                       program_kwargs={"marker": str(tmp_path / "died")}, kinds=["options"],
                       num_configs=2, protocol=FAST, ray="local")
    result = collect(spec)
    assert (tmp_path / "died").exists()  # a worker was killed mid-task
    assert result.written == 2 and result.failed == 1 and result.remaining == 0
    lines = [line for line in (out / "log.jsonl").read_text().splitlines() if line]
    assert len(lines) == 3  # each graph logged once, the retried one included
    log = read_log(out)
    status = {Path(p).stem: e["status"] for p, e in log.items()}
    assert status == {"dies.once": "ok", "dies.always": "crashed", "fine.000": "ok"}
    crashed = next(e for e in log.values() if e["status"] == "crashed")
    assert "worker died 2 times" in crashed["error"]
    written = {p: p.stat().st_mtime_ns for p in out.rglob("*.npz")}
    assert len(written) == 2
    again = collect(spec)  # nothing is measured twice, the reported crash included
    assert again.written == 0 and again.skipped == 3 and again.remaining == 0
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.npz")} == written


def _die(task, context):
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_slot_probed_while_ray_restarts_it_answers_once_it_is_back(ray_cluster):
    """The probe goes out the moment a slot's death is seen, while Ray is still restarting
    the actor: a plain call then fails at once ("the actor is restarting"), on a busy
    machine nearly always, and the run took the slot for gone for good."""
    from ray.exceptions import RayActorError

    slot = ray_cluster.remote(Slot).options(max_restarts=-1, max_task_retries=0).remote(
        _die, min(os.sched_getaffinity(0)))
    try:
        for _ in range(2):
            with pytest.raises(RayActorError):
                ray_cluster.get(slot.run.remote(None, None))
            assert ray_cluster.get(_probe(slot), timeout=120) is True
    finally:
        ray_cluster.kill(slot)


def test_ray_shards_merge_into_a_collection_that_validates(ray_cluster, tmp_path):
    args = ["--per-family", "1", "--families", "mlp,reduction", "--kinds",
            "layout:random,options", "--configs", "2", "--runs", "3", "--warmup", "1",
            "--max-run-s", "30"]
    for i in range(2):
        r = CliRunner().invoke(main, ["collect", str(tmp_path / f"s{i}"), "--ray",
                                      "--shard", f"{i}/2", *args])
        assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["merge", str(tmp_path / "all"), str(tmp_path / "s0"),
                                  str(tmp_path / "s1")])
    assert r.exit_code == 0, r.output
    assert len(_npz(tmp_path / "all")) == 4
    assert validate_paths([tmp_path / "all"]) == []


def test_timing_slots_count_each_core_of_each_node():
    class Cluster:  # what ray.cluster_resources() reports for two nodes, one with 3 cores
        @staticmethod
        def cluster_resources():
            return {"CPU": 5.0, "graphcost_core_0": 2.0, "graphcost_core_1": 2.0,
                    "graphcost_core_10": 1.0}

    assert timing_slots(Cluster) == ["graphcost_core_0"] * 2 + ["graphcost_core_1"] * 2 + [
        "graphcost_core_10"]
    assert timing_slots(Cluster, workers=3) == ["graphcost_core_0"] * 2 + ["graphcost_core_1"]
    assert set(node_resources([3, 1])) == {"graphcost_core_1", "graphcost_core_3"}


def test_cli_refuses_ray_with_the_pipeline_and_without_ray(tmp_path, monkeypatch):
    r = CliRunner().invoke(main, ["collect", str(tmp_path / "a"), "--ray", "--pipeline"])
    assert r.exit_code == 2 and "--pipeline is not available with --ray" in r.output
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    r = CliRunner().invoke(main, ["collect", str(tmp_path / "b"), "--ray", "--per-family",
                                  "1", "--families", "mlp", "--kinds", "options"])
    assert r.exit_code == 2 and "pip install 'graphcost[ray]'" in r.output
    assert not list((tmp_path / "b").rglob("*.npz"))


def test_bench_collect_times_one_and_two_ray_workers_on_the_same_graphs(ray_cluster):
    s = bench_collect(["mlp"], 1, ["layout:random", "options"], 2, FAST,
                      modes=["ray:1", "ray:2", "off:1"])
    rows = {r["mode"]: r for r in s.rows}
    assert set(rows) == {"ray:1", "ray:2", "off:1"}
    assert all(r["graphs"] == 2 and r["samples"] == 4 for r in rows.values())
    assert s.per_mode["ray:1"]["speedup"] == 1.0 and s.per_mode["ray:2"]["speedup"] > 0
    assert s.per_mode["off:1"]["noise_diff"] is not None  # paired over the same graphs
    with pytest.raises(UserError, match="unknown mode 'ray:x'"):
        bench_collect(["mlp"], 1, ["options"], 2, FAST, modes=["ray:x"])
