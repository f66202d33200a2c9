"""Child processes that end with the process that started them, however it ends.

Without this, a child whose parent is killed (kill -9 included) runs on as an orphan: a
torchrun and its ranks trained to the end, a `bench replica` step ran on. On Linux a
child asks the kernel (`prctl(PR_SET_PDEATHSIG)`) for SIGKILL when its parent exits, then
checks that its parent is still the one that started it: a parent that died before the
request has already handed the child on to another. The signal fires when the parent's
*thread* that started the child exits, so that thread must wait for its children: every
caller here does (`subprocess.run`, a pool used and shut down in one `with` block).

Two ways in, one mechanism:
- a multiprocessing child calls `die_with_parent()` first: `pool` makes its workers do so;
- a command runs through `run(module, args)`: `python -m graphcost.children MODULE ARGS…`
  binds itself to the process named in GRAPHCOST_PARENT_PID, names itself there for the
  children it starts the same way (torchrun's ranks), then runs `python -m MODULE ARGS…`.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import runpy
import signal
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

PARENT_ENV = "GRAPHCOST_PARENT_PID"
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int | None = None) -> None:
    """Be killed (SIGKILL) when process `parent` (default: the multiprocessing parent)
    ends; exit at once if it has ended already. Called in the child itself."""
    if parent is None:
        started_by = mp.parent_process()
        if started_by is None:
            return
        parent = started_by.pid
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the prctl
        os._exit(1)


def pool(workers: int = 1, **kwargs: Any) -> ProcessPoolExecutor:
    """A pool of `workers` fresh (spawned) processes that die with this process. Use it in
    one `with` block: the thread that starts a worker must outlive it (a worker replaced
    under `max_tasks_per_child` is started by the pool's own thread, which lives as long
    as the pool)."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                               initializer=die_with_parent, **kwargs)


def command(module: str, args: Sequence[str]) -> list[str]:
    """The command line that runs `python -m MODULE ARGS…` as a child that dies with the
    process that starts it (give that process's pid in GRAPHCOST_PARENT_PID, as `run`
    does)."""
    return [sys.executable, "-m", __name__, module, *args]


def run(module: str, args: Sequence[str], env: dict[str, str] | None = None,
        **kwargs: Any) -> subprocess.CompletedProcess:
    """`subprocess.run` of `python -m MODULE ARGS…` in a child that dies with this process."""
    env = {**(os.environ if env is None else env), PARENT_ENV: str(os.getpid())}
    return subprocess.run(command(module, args), env=env, check=False, **kwargs)


def _main() -> None:
    """`python -m graphcost.children MODULE ARGS…`: `python -m MODULE ARGS…`, ending with
    the process named in GRAPHCOST_PARENT_PID; this process is named there for its own
    children."""
    parent = os.environ.get(PARENT_ENV, "")
    if parent.isdigit():
        die_with_parent(int(parent))
    os.environ[PARENT_ENV] = str(os.getpid())
    module, *args = sys.argv[1:]
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _main()
