"""Time compiled executables on this machine (the protocol of docs/design.md §7).

Pinned to one core, each executable is first called once (its outputs are checked
against a reference executable), then timed in `rounds` independent rounds: every
round visits the executables in a fresh random order, gives each fresh input buffers,
`warmup` untimed calls and `runs` timed calls with `block_until_ready`, optionally
flushing the CPU caches before each timed call (as TenSet does). Every round's runtime
is kept: Kendall τ between two rounds is the noise ceiling of a graph. A round's runtime
is the minimum of its calls by default (`statistic`; see `STATISTICS` for why). An executable
that raises, is slower than `max_run_s` per call, or whose outputs disagree with the
reference is recorded as failed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphcost.errors import UserError


@dataclass
class Protocol:
    """How hard to time: rounds, calls, limits and output checks."""

    warmup: int = 2  # untimed calls per executable per round
    runs: int = 10  # timed calls per executable per round, at least
    rounds: int = 2  # independent rounds, each in a fresh order with fresh inputs
    max_run_s: float = 0.25  # a single call slower than this fails the executable
    check_outputs: bool = True
    flush_cache: bool = False  # overwrite a buffer twice the last-level cache per call
    min_time_s: float = 0.03  # more calls (up to 10 x runs) until a round times this long
    statistic: str = "min"  # of a round's calls (and of all calls): "min" or "median"

    def check(self) -> None:
        """Raise ValueError naming the setting that cannot work."""
        if self.runs < 1 or self.rounds < 1 or self.warmup < 0:
            raise UserError(f"the timing protocol needs runs >= 1, rounds >= 1 and "
                             f"warmup >= 0, got runs={self.runs}, rounds={self.rounds}, "
                             f"warmup={self.warmup}")
        if self.max_run_s <= 0:
            raise UserError(f"max_run_s must be > 0, got {self.max_run_s}")
        if self.min_time_s < 0:
            raise UserError(f"min_time_s must be >= 0, got {self.min_time_s}")
        if self.statistic not in STATISTICS:
            raise UserError(f"statistic must be one of {sorted(STATISTICS)}, "
                             f"got {self.statistic!r}")


#: The defaults of the two ways graphcost times, each declared once here (the command
#: options read them). Collecting times every sampled config of many programs, its noise
#: ceiling measured by the rounds; autotuning times a few picks whose speed-ups it
#: reports, so it spends more calls on each.
COLLECTING = Protocol()
AUTOTUNING = Protocol(warmup=3, runs=20)


#: how a set of timed calls becomes one runtime. The minimum is the default: noise on a
#: pinned core only adds time, and some executables' calls are bimodal (a slow mode
#: that comes and goes with buffer placement), which moves the median between rounds.
#: Measured here on four zoo graphs (16 executables, 3 rounds of 20 calls), τ between
#: rounds was 0.70/0.42/0.73/0.75 with the minimum and 0.45/−0.07/0.73/0.50 with the
#: median.
STATISTICS = {"min": np.min, "median": np.median}


@dataclass
class ConfigResult:
    """One executable's (or config's) outcome: `status` is ok, compile, run, timeout or
    mismatch; `rounds_ns` holds each round's runtime (the protocol's statistic)."""

    status: str = "ok"
    error: str = ""
    runtime_ns: float = float("nan")  # the protocol's statistic over every timed call
    median_ns: float = float("nan")  # median of every timed call of every round
    min_ns: float = float("nan")
    spread: float = float("nan")  # (p75 - p25) / median over every timed call
    rounds_ns: list[float] = field(default_factory=list)  # the statistic of each round

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def pin_to_core(core: int) -> None:
    """Run this process (and the threads it starts later) on one core only."""
    os.sched_setaffinity(0, {core})


def _tolerance(dtype: np.dtype) -> tuple[float, float]:
    """(rtol, atol relative to the output's largest magnitude) for a dtype."""
    if dtype.kind in "biu":
        return 0.0, 0.0
    if dtype.itemsize <= 2:  # bf16 / f16
        return 5e-2, 2e-2
    return 2e-3, 1e-4


def outputs_agree(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Whether two flat output lists agree to within their dtypes' precision."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=False):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        rtol, scale = _tolerance(y.dtype)
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        atol = scale * float(np.nanmax(np.abs(y64))) if y64.size else 0.0
        if not np.allclose(x64, y64, rtol=rtol, atol=atol, equal_nan=True):
            return False
    return True


def _last_level_cache_bytes() -> int:
    """The largest CPU cache of core 0 (sysfs), 32 MiB when it cannot be read."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip().upper()
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            sizes.append(int(text.rstrip("KMG")) * mult)
        except ValueError:
            continue
    return max(sizes, default=32 << 20)


_FLUSH: list[np.ndarray] = []


def flush_cache() -> None:
    """Evict the caches by writing a buffer twice the size of the last-level cache."""
    if not _FLUSH:
        _FLUSH.append(np.zeros(2 * _last_level_cache_bytes() // 8))
    _FLUSH[0] += 1.0


Runnable = tuple[Callable, Callable[[], Sequence[Any]]]  # (executable, fresh inputs)


def time_executables(runnables: Mapping[Hashable, Runnable], protocol: Protocol,
                     reference: Hashable | None = None, seed: int = 0
                     ) -> dict[Hashable, ConfigResult]:
    """Time each `key -> (executable, make_inputs)`; outputs are compared with those of
    `reference` (or of the first key that runs, if it fails or is None)."""
    import jax

    results = {k: ConfigResult() for k in runnables}
    live = dict(runnables)
    calls_per_round: dict[Hashable, int] = {}
    ref_out = None
    for k in sorted(live, key=lambda k: k != reference):
        exe, make_inputs = live[k]
        try:
            start = time.perf_counter()
            out = jax.block_until_ready(exe(*make_inputs()))
            took = time.perf_counter() - start
        except Exception as e:  # XLA's errors have no common base class worth naming
            results[k] = ConfigResult("run", error_line(e))
            del live[k]
            continue
        flat = [np.asarray(x) for x in jax.tree.leaves(out)]
        wanted = int(np.ceil(protocol.min_time_s / max(took, 1e-9)))
        calls_per_round[k] = min(max(protocol.runs, wanted), 10 * protocol.runs)
        if took > protocol.max_run_s * 20:  # the first call may include one-time setup
            results[k] = ConfigResult("timeout", f"first call took {took:.3f}s")
            del live[k]
        elif ref_out is None:
            ref_out = flat
        elif protocol.check_outputs and not outputs_agree(flat, ref_out):
            results[k] = ConfigResult("mismatch", "outputs differ from the reference")
            del live[k]

    rng = np.random.default_rng(seed)
    samples: dict[Hashable, list[list[int]]] = {k: [] for k in live}
    for _ in range(protocol.rounds):
        keys = list(live)
        for j in rng.permutation(len(keys)):
            k = keys[j]
            exe, make_inputs = live[k]
            inputs = make_inputs()
            calls: list[int] = []
            for call in range(protocol.warmup + calls_per_round[k]):
                if protocol.flush_cache and call >= protocol.warmup:
                    flush_cache()
                start = time.perf_counter_ns()
                jax.block_until_ready(exe(*inputs))
                took = time.perf_counter_ns() - start
                if took > protocol.max_run_s * 1e9:
                    results[k] = ConfigResult("timeout", f"a run took {took / 1e9:.3f}s > "
                                              f"max_run_s={protocol.max_run_s}")
                    del live[k]
                    break
                if call >= protocol.warmup:
                    calls.append(took)
            else:
                samples[k].append(calls)
    stat = STATISTICS[protocol.statistic]
    for k in live:
        rounds = [np.asarray(calls, dtype=np.float64) for calls in samples[k]]
        t = np.concatenate(rounds)
        med = float(np.median(t))
        q75, q25 = np.percentile(t, [75, 25])
        results[k] = ConfigResult("ok", "", float(stat(t)), med, float(t.min()),
                                  float((q75 - q25) / med), [float(stat(r)) for r in rounds])
    return results


def error_line(e: BaseException) -> str:
    """The first line of an error, with its type: what a log or report keeps."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]
