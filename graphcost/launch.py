"""The `graphcost` command's start: glibc's per-thread cache of freed blocks off, then the CLI.

glibc keeps up to seven freed blocks of every small size in a per-thread cache (its
tcache). To the heap those blocks are still in use, so they split the space that a
training step's large tensors leave free, and the next step's tensors no longer fit
there: the heap grows step after step. On fold 1 of the bundled layout collection,
training's peak grew to 0.77 GB over five epochs while about 0.17 GB of the heap was in
use; with the cache off it stays at 0.54 GB, at the same seconds an epoch
(docs/training.md, "Memory"). The cache can only be set before a process starts, so
the command starts itself again, once, with `GLIBC_TUNABLES` set. A user who sets
`tcache_count` there keeps their own value; other systems start as they are.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping

#: glibc's tunable that turns its per-thread cache of freed blocks off
NO_TCACHE = "glibc.malloc.tcache_count=0"


def restart_env(env: Mapping[str, str]) -> dict[str, str] | None:
    """The environment to start again with, or None to go on in this process: glibc's
    cache is already set (by us or the user), or the C library is not glibc."""
    tunables = env.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.tcache_count" in tunables or platform.libc_ver()[0] != "glibc":
        return None
    return {**env, "GLIBC_TUNABLES": f"{tunables}:{NO_TCACHE}" if tunables else NO_TCACHE}


def main() -> None:
    """The `graphcost` console script: `python -P -m graphcost ARGS…` started again with
    the cache off (same process id, so a caller's kill reaches it), or the CLI here.
    `-P` keeps the working directory off the module path, as for the script itself: a
    file named `graphcost.py` there must not stand in for the package."""
    env = restart_env(os.environ)
    if env is not None:
        os.execve(sys.executable, [sys.executable, "-P", "-m", "graphcost", *sys.argv[1:]],
                  env)
    from graphcost.cli import main as cli

    cli(prog_name="graphcost")


if __name__ == "__main__":
    main()
