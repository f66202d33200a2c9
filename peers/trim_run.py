"""graphcost's command line, with glibc's `malloc_trim` after every N-th optimiser step.

    python peers/trim_run.py N train DATA --out RUN …

glibc keeps memory that freed tensors held, so graphcost's peak memory while training
holds more than its live tensors. Trimming hands that memory back to the system; this
measures what that saves in peak memory and costs in speed (`peers/speed.py --sides
"graphcost+trim"`). It is a measurement, not a graphcost setting.
"""

from __future__ import annotations

import ctypes
import sys

from torch.optim.optimizer import register_optimizer_step_post_hook

from graphcost.cli import main


def trim_every(n: int) -> None:
    """Call `malloc_trim(0)` after every `n`-th step of any optimiser in this process."""
    libc, steps = ctypes.CDLL("libc.so.6"), [0]

    def hook(*_) -> None:
        steps[0] += 1
        if steps[0] % n == 0:
            libc.malloc_trim(0)

    register_optimizer_step_post_hook(hook)


if __name__ == "__main__":
    if len(sys.argv) < 2 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        raise SystemExit("usage: python peers/trim_run.py N GRAPHCOST_ARGS… (N ≥ 1: steps "
                         "between trims)")
    trim_every(int(sys.argv.pop(1)))
    sys.argv[0] = "graphcost"
    main()
