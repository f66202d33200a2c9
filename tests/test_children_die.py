"""Every child process ends with the graphcost process that started it, a kill -9 of that
parent included (issue 42): torchrun and its ranks under `train --nproc`, a `bench
replica` step, a pool's workers. Each test starts the real command in a subprocess, waits
until its children are at work, kills the parent and waits (bounded) for every child to
be gone; whatever outlives the wait is killed, so that a failure leaves nothing running."""

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from graphcost.data.synthetic import write_collection

TINY = ("--model", "mlp", "--set", "hidden=8", "--set", "progress=false")
LONG = ("--epochs", "100000", "--set", "patience=100000")  # only a kill ends it
WAIT_S = 60  # for a killed child to be gone; one that outlives its parent never is


@pytest.fixture(scope="module")
def collection(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("children")
    write_collection(d / "data", kind="tile", source="xla",
                     splits={"train": 4, "valid": 2, "test": 1}, num_nodes=15, num_configs=12)
    return d / "data" / "npz" / "tile" / "xla"


def started(code: str, log: Path) -> psutil.Popen:
    """`python -c CODE` in a session of its own (so that no signal of the test's reaches
    it by the process group), its output in LOG."""
    with open(log, "w") as out:
        return psutil.Popen([sys.executable, "-c", code], stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)


def graphcost(*args: object) -> str:
    """The code that runs the `graphcost` command with ARGS."""
    return ("from graphcost.cli import main; "
            f"main({[str(a) for a in args]!r}, prog_name='graphcost')")


def children_at_work(parent: psutil.Popen, log: Path, count: int,
                     ready: Callable[[], bool] = lambda: True) -> list[psutil.Process]:
    """The parent's descendants, once there are `count` and `ready()` holds."""
    while True:
        assert parent.poll() is None, f"the parent ended first: {log.read_text()[-2000:]}"
        kids = parent.children(recursive=True)
        if len(kids) >= count and ready():
            return kids
        psutil.wait_procs([parent], timeout=0.2)


def assert_all_die_with(parent: psutil.Popen, kids: list[psutil.Process],
                        sig: int = signal.SIGKILL) -> None:
    os.kill(parent.pid, sig)
    parent.wait(WAIT_S)
    _, alive = psutil.wait_procs(kids, timeout=WAIT_S)
    for p in alive:  # a failed test leaves nothing running
        p.kill()
    assert not alive, f"left running after the parent was killed: {[p.cmdline() for p in alive]}"


def test_torchrun_and_every_rank_die_with_a_killed_train(collection, tmp_path):
    out = tmp_path / "run"
    log = tmp_path / "parent.log"
    parent = started(graphcost("train", collection, "--out", out, "--nproc", "2", *LONG,
                               *TINY), log)
    # torchrun and 2 ranks, training: rank 0 has claimed the run folder
    kids = children_at_work(parent, log, 3, lambda: (out / ".lock").exists())
    assert_all_die_with(parent, kids)


def test_a_replica_step_dies_with_a_killed_bench(collection, tmp_path):
    out = tmp_path / "run"
    step = ["train", str(collection), "--out", str(out), *LONG, *TINY]
    log = tmp_path / "parent.log"
    parent = started("import os; from pathlib import Path; "
                     "from graphcost.bench.replica import run_step; "
                     f"run_step('train', {step!r}, dict(os.environ), Path({str(tmp_path)!r}))",
                     log)
    kids = children_at_work(parent, log, 1, lambda: (out / ".lock").exists())
    assert_all_die_with(parent, kids)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_pools_worker_dies_with_its_parent(sig, tmp_path):
    marker = tmp_path / "working"
    log = tmp_path / "parent.log"
    parent = started("import time; from pathlib import Path; from graphcost import children\n"
                     "with children.pool() as pool:\n"
                     f"    pool.submit(Path({str(marker)!r}).touch).result()\n"
                     "    pool.submit(time.sleep, 600).result()", log)
    # the worker, at work once the marker is there, and multiprocessing's resource tracker
    kids = children_at_work(parent, log, 2, marker.exists)
    assert_all_die_with(parent, kids, sig)
