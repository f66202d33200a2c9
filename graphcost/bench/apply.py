"""`graphcost bench apply`: what a call of an autotuned program (`autotune.apply`) costs
against a plain `jax.jit` call of the same tuned program, for the default config and for
a layout config that moves argument layouts away from the default.

Per program, the callables are timed in alternating rounds of `calls` calls each,
outputs awaited at the end of a round; each figure is the best round's mean per call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphcost.bench import BenchResult


def per_call_us(run: Callable[[], Any], calls: int) -> float:
    """Mean µs per call over one round of `calls`, outputs awaited at its end."""
    import jax

    t0 = time.perf_counter()
    for _ in range(calls):
        out = run()
    jax.block_until_ready(out)
    return (time.perf_counter() - t0) / calls * 1e6


def compare_calls(fn: Callable, args: Sequence[Any], config: dict[str, Any], calls: int = 200,
                  rounds: int = 5) -> dict[str, float]:
    """Best-round µs per call of `apply(fn, args, config)` and of plain `jax.jit` of the
    same tuned program (its layouts and options), both on arguments placed once in the
    executable's layouts (`run.place`): the cost of the call itself. Also `jax.jit(fn)`
    untuned, and `apply` on the arguments as given (moved layouts relaid out per call)."""
    import jax

    from graphcost.autotune.chosen import apply, plan_of
    from graphcost.xla.configs import LayoutSpace

    run = apply(fn, args, config)
    placed = run.place(*args)
    layout = LayoutSpace(fn, tuple(args))
    tuned = layout.jit(plan_of(layout, config), config.get("compiler_options"))
    leaves = jax.tree.leaves(placed)
    jitted = jax.jit(fn)
    arms = {"tuned_jit": lambda: tuned(*leaves), "apply": lambda: run(*placed),
            "jit": lambda: jitted(*args), "apply_unplaced": lambda: run(*args)}
    best = {name: float("inf") for name in arms}
    for f in arms.values():  # compile and warm up outside the timing
        jax.block_until_ready(f())
    for _ in range(rounds):
        for name, f in arms.items():
            best[name] = min(best[name], per_call_us(f, calls))
    return {**{f"{k}_us": v for k, v in best.items()},
            "ratio": best["apply"] / best["tuned_jit"]}


def moved_parameter_config(name: str, fn: Callable, args: Sequence[Any],
                           seed: int = 0) -> dict[str, Any] | None:
    """A config of the program's layout space that sets some argument's layout (None if
    a few random draws find none)."""
    from graphcost.autotune.program import prepare

    t = prepare(name, fn, args, "layout")
    for plan in t.configs.sample(64, np.random.default_rng(seed)):
        if any(t.layout.points[p].kind == "parameter" for p, _ in plan):
            return t.config_json(plan)
    return None


@dataclass
class ApplyResult(BenchResult):
    """`bench apply`'s figures: a `compare_calls` row per (program, config) and the
    geometric mean of their apply / tuned-jit ratios."""

    rows: list[dict[str, Any]]
    calls: int  # calls per round
    rounds: int
    geomean_ratio: float


def bench_apply(programs: Sequence[str], calls: int = 200, rounds: int = 5,
                on_row: Callable[[dict], None] | None = None) -> ApplyResult:
    """Rows per (program, config): µs per call of jit and of apply, and their ratio."""
    from graphcost.autotune.program import load_target

    rows = []
    for spec in programs:
        name, fn, args = load_target(spec)
        configs = {"default": {"format": "graphcost-autotune/1", "layouts": [],
                               "compiler_options": {}}}
        moved = moved_parameter_config(name, fn, args)
        if moved is not None:
            configs["argument layouts moved"] = moved
        for what, config in configs.items():
            row = {"program": name, "config": what,
                   **compare_calls(fn, args, config, calls, rounds)}
            rows.append(row)
            if on_row:
                on_row(row)
    ratios = [r["ratio"] for r in rows]
    return ApplyResult(rows=rows, calls=calls, rounds=rounds,
                       geomean_ratio=float(np.exp(np.mean(np.log(ratios)))))


HEADER = (f"{'program':<18} {'config':<24} {'tuned jit':>9} {'apply':>8} {'ratio':>6} "
          f"{'untuned jit':>11} {'apply unplaced':>14}   (µs per call)")


def format_row(r: dict) -> str:
    return (f"{r['program']:<18} {r['config']:<24} {r['tuned_jit_us']:>9.1f} "
            f"{r['apply_us']:>8.1f} {r['ratio']:>6.2f} {r['jit_us']:>11.1f} "
            f"{r['apply_unplaced_us']:>14.1f}")


def format_apply(result: ApplyResult) -> str:
    """The geometric-mean ratio and how it was timed."""
    return (f"apply / jax.jit of the same tuned program, per call, geometric mean over rows: "
            f"{result.geomean_ratio:.2f} (arguments placed once with run.place; best of "
            f"{result.rounds} alternating rounds of {result.calls} calls)")
