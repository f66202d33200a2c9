"""`graphcost bench noise`: how this machine's timing noise looks, before trusting it.

One program's default executable is timed in many short rounds on a pinned core, each
round bracketed by a *canary*, a single-threaded NumPy matmul timed a few calls. A
round is slow when its minimum is more than `SLOW` above the 5th percentile of all
rounds (for the canary, the larger of its two timings). The figures say how often and
for how long the machine runs slow, and whether the canary could have told: if slow
rounds are about as frequent where the canary was fast as where it was slow, no canary
can filter them and only rounds spread apart in time help (docs/design.md §7). Run it
with and without other work on the other cores to see whether that work is the cause.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from graphcost.bench import BenchResult

SLOW = 1.10  # a round this much above the fast level is slow
CANARY_SLOW = 1.30  # the canary's calls are short, so its own noise is larger


@dataclasses.dataclass
class NoiseResult(BenchResult):
    """Per-round minima of the program and of the canary, and what they say."""

    program: str
    rounds: int
    runs: int
    seconds: float
    round_ms: list[float]  # the program's per-round minimum, in timing order
    canary_ms: list[float]  # the canary's slower timing around each round
    figures: dict[str, Any]


def noise_figures(round_ms: np.ndarray, canary_ms: np.ndarray, seconds: float
                  ) -> dict[str, Any]:
    """Quantiles, the share of slow rounds, the longest slow stretch (rounds and
    seconds), and the program's slow share where the canary was fast and where slow."""
    fast = np.percentile(round_ms, 5)
    slow = round_ms > SLOW * fast
    canary = canary_ms > CANARY_SLOW * np.percentile(canary_ms, 5)
    longest = run = 0
    for s in slow:
        run = run + 1 if s else 0
        longest = max(longest, run)

    def share(mask: np.ndarray) -> float | None:
        return float(slow[mask].mean()) if mask.any() else None

    return {"p5_ms": float(fast), "median_ms": float(np.median(round_ms)),
            "p95_ms": float(np.percentile(round_ms, 95)),
            "max_over_min": float(round_ms.max() / round_ms.min()),
            "slow_share": float(slow.mean()), "longest_slow_rounds": longest,
            "longest_slow_s": longest * seconds / len(round_ms),
            "canary_slow_share": float(canary.mean()),
            "slow_when_canary_fast": share(~canary), "slow_when_canary_slow": share(canary)}


def bench_noise(program: str, rounds: int = 600, runs: int = 15) -> NoiseResult:
    """Time `program`'s default executable (a zoo name or MODULE:FUNCTION) in `rounds`
    rounds of `runs` calls, the canary around each; the caller pins the process."""
    import jax

    from graphcost.autotune.program import load_target, prepare
    from graphcost.xla.prepare import input_maker

    name, fn, args = load_target(program)
    exe = prepare(name, fn, args, "options").default_exe
    inputs = input_maker(args)(exe)()
    jax.block_until_ready(exe(*inputs))
    matrix = np.random.default_rng(0).random((128, 128), dtype=np.float32)

    def least(call, n: int) -> float:
        best = float("inf")
        for _ in range(n):
            start = time.perf_counter_ns()
            call()
            best = min(best, time.perf_counter_ns() - start)
        return best / 1e6

    def canary() -> float:
        return least(lambda: matrix @ matrix, 3)

    start = time.perf_counter()
    round_ms, canary_ms = [], []
    for _ in range(rounds):
        before = canary()
        round_ms.append(least(lambda: jax.block_until_ready(exe(*inputs)), runs))
        canary_ms.append(max(before, canary()))
    seconds = time.perf_counter() - start
    return NoiseResult(name, rounds, runs, seconds, round_ms, canary_ms,
                       noise_figures(np.array(round_ms), np.array(canary_ms), seconds))


def format_noise(r: NoiseResult) -> str:
    """The figures in a few lines, and the slow rounds as a strip (S slow, . fast)."""
    f = r.figures

    def pct(v: float | None) -> str:
        return "n/a" if v is None else f"{100 * v:.0f}%"

    strip = "".join("S" if m > SLOW * f["p5_ms"] else "." for m in r.round_ms[:120])
    return "\n".join([
        f"{r.program}: {r.rounds} rounds of {r.runs} calls in {r.seconds:.1f} s; per-round "
        f"minimum p5 {f['p5_ms']:.3f} ms, median {f['median_ms']:.3f}, p95 "
        f"{f['p95_ms']:.3f} (max/min {f['max_over_min']:.2f})",
        f"slow rounds (> {SLOW:.2f}x p5): {pct(f['slow_share'])}, the longest "
        f"{f['longest_slow_rounds']} in a row ({f['longest_slow_s']:.2f} s)",
        f"canary slow in {pct(f['canary_slow_share'])} of rounds; the program slow in "
        f"{pct(f['slow_when_canary_fast'])} of the rounds the canary called fast and "
        f"{pct(f['slow_when_canary_slow'])} of those it called slow",
        f"first {min(120, r.rounds)} rounds: {strip}"])
