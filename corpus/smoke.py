"""Smoke check of the corpus: build, compile, run and time every program once.

    nice -n 19 taskset -c 1 /tmp/corpusvenv/bin/python corpus/smoke.py [MODULE ...] [-k REGEX]

For each program it prints one line: the name, the CPU seconds of tracing, lowering and
compiling, wall and CPU milliseconds per call (the mean of 5 calls after one untimed
call), the line count of the optimized
HLO module and whether that module has a while loop. A line ends in `!` when the call
falls outside the corpus's window (0.2-30 ms) or the compile takes over 10 s, and says
`nondeterministic` when two calls disagree or `non-finite` when an output has NaN/inf. MODULE
names a module of corpus/programs (default: all); -k keeps the programs whose
name matches REGEX.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "jax")

HERE = Path(__file__).resolve().parent / "programs"
sys.path.insert(0, str(HERE))

import jax  # noqa: E402
import numpy as np  # noqa: E402

MODULES = sorted(p.stem for p in HERE.glob("*_programs.py"))
CALLS = 5
WINDOW_MS = (0.2, 30.0)
MAX_COMPILE_S = 10.0


def check(name: str, fn, args: tuple) -> str:
    """One line of the table for program `name`."""
    t0 = time.process_time()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.process_time() - t0
    first = jax.block_until_ready(compiled(*args))
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(CALLS):
        last = jax.block_until_ready(compiled(*args))
    wall_ms = (time.perf_counter() - wall) / CALLS * 1e3
    cpu_ms = (time.process_time() - cpu) / CALLS * 1e3
    text = compiled.as_text()
    lines, loop = text.count("\n"), "while" in text
    ms = min(wall_ms, cpu_ms)  # CPU time is the honest figure on a shared core
    bad = not (WINDOW_MS[0] <= ms <= WINDOW_MS[1]) or compile_s > MAX_COMPILE_S
    a, b = jax.tree.leaves(first), jax.tree.leaves(last)
    same = all(np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)
               for x, y in zip(a, b, strict=True))
    finite = all(np.isfinite(np.asarray(x)).all() for x in a
                 if np.issubdtype(np.asarray(x).dtype, np.floating))
    notes = ("" if same else " nondeterministic") + ("" if finite else " non-finite")
    return (f"{name:32s} {compile_s:7.2f} {wall_ms:9.2f} {cpu_ms:9.2f} {lines:7d} "
            f"{'yes' if loop else 'no':>5s}{' !' if bad else ''}{notes}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", default=MODULES)
    parser.add_argument("-k", dest="keep", default="")
    opts = parser.parse_args()
    print(f"{'program':32s} {'compile':>7s} {'wall ms':>9s} {'cpu ms':>9s} {'hlo':>7s} "
          f"{'while':>5s}")
    failed = total = 0
    for module_name in opts.modules:
        t0 = time.perf_counter()
        try:
            made = importlib.import_module(module_name).programs()
        except Exception:
            traceback.print_exc()
            print(f"{module_name}: FAILED to build")
            failed += 1
            continue
        print(f"# {module_name}: {len(made)} programs built in "
              f"{time.perf_counter() - t0:.1f} s")
        for name, fn, args in made:
            if not re.search(opts.keep, name):
                continue
            total += 1
            try:
                print(check(name, fn, args), flush=True)
            except Exception as e:
                failed += 1
                print(f"{name:32s} FAILED {type(e).__name__}: {str(e).splitlines()[0]:.120}",
                      flush=True)
    print(f"# {total} programs, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
