"""Measuring a program's configs: the tuners' measurer (TVM MetaSchedule's `Runner`).

Both ways of measuring compile a config the same way (`compile_config`) and time each
distinct executable once, by fingerprint, as collection does (docs/design.md §7), on
one core when asked:
- `measure` times a batch of configs in the same rounds, the first the outputs'
  reference: every confirmation round, and the benchmarks' pools;
- `Measurer` times one config at a time, each in the same rounds as the default, so a
  search is told its runtime relative to the default's, free of the drift between
  measurements minutes apart (the tuner, `tune`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from graphcost.autotune.program import Tunable
from graphcost.autotune.space import Config
from graphcost.xla.configs import LayoutSpace
from graphcost.xla.fingerprint import fingerprint
from graphcost.xla.timing import ConfigResult, Protocol, Runnable, error_line, time_executables


@contextmanager
def pinned(core: int | None) -> Iterator[None]:
    """Run the block on one core (this thread and threads it starts), then restore."""
    if core is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def executable_and_inputs(layout: LayoutSpace, exe: Any) -> tuple[Any, list]:
    """The executable and the program's arguments placed in the layouts it expects."""
    import jax

    formats = exe.input_formats[0]
    return exe, [jax.device_put(x, f) for x, f in zip(layout.leaves, formats, strict=False)]


def compile_config(t: Tunable, config: Config) -> tuple[Any, int]:
    """`config`'s executable (the default's own when it sets nothing) and its fingerprint.
    XLA's compile errors pass through."""
    plan, opts = t.plan_and_options(config)
    exe = t.default_exe if not plan and not opts else t.layout.compile(plan, opts or None)
    return exe, fingerprint(exe.as_text(), opts)


def measure(t: Tunable, configs: Sequence[Config], protocol: Protocol,
            core: int | None = None) -> list[ConfigResult]:
    """Time `configs` (the first is the output reference) in the same rounds. Configs
    that compile to one executable are timed once and share the result: a duplicate
    costs no time and cannot differ from its twin by noise."""
    results = [ConfigResult() for _ in configs]
    runnable: dict[int, Runnable] = {}
    executable_of: dict[int, int] = {}  # config index -> fingerprint
    for i, config in enumerate(configs):
        try:
            exe, key = compile_config(t, config)
        except Exception as e:  # XLA's errors have no common base class worth naming
            results[i] = ConfigResult("compile", error_line(e))
            continue
        executable_of[i] = key
        if key not in runnable:
            exe, inputs = executable_and_inputs(t.layout, exe)
            runnable[key] = (exe, lambda inputs=inputs: inputs)
    with pinned(core):
        timed = time_executables(runnable, protocol, reference=executable_of.get(0))
    for i, key in executable_of.items():
        results[i] = replace(timed[key])
    return results


class Measurer:
    """Compiles configs, and times each new executable in the same rounds as the default."""

    def __init__(self, t: Tunable, protocol: Protocol, core: int | None):
        self.t, self.protocol, self.core = t, protocol, core
        self.default = executable_and_inputs(t.layout, t.default_exe)
        self.default_key = compile_config(t, t.configs.default())[1]
        # executable -> (runtime / default's, status, error)
        self.timed: dict[int, tuple[float, str, str]] = {self.default_key: (1.0, "ok", "")}
        self.compiled: dict[Any, int | str] = {}  # config's key -> executable, or its error

    def measure(self, config: Config) -> tuple[int | None, float, str, str]:
        """(executable key, runtime / default's, status, error) of `config`; a config
        compiled before is not compiled again, an executable timed before not timed again;
        a config that fails to compile has no key."""
        config_key = self.t.configs.key(config)
        known = self.compiled.get(config_key)
        if isinstance(known, str):
            return None, float("inf"), "compile", known
        if known is not None:
            return (known, *self.timed[known])
        try:
            exe, key = compile_config(self.t, config)
        except Exception as e:  # XLA's errors have no common base class worth naming
            self.compiled[config_key] = error_line(e)
            return None, float("inf"), "compile", error_line(e)
        self.compiled[config_key] = key
        if key not in self.timed:
            d_exe, d_inputs = self.default
            c_exe, c_inputs = executable_and_inputs(self.t.layout, exe)
            runnable = {"default": (d_exe, lambda: d_inputs), "config": (c_exe, lambda: c_inputs)}
            with pinned(self.core):
                res = time_executables(runnable, self.protocol, reference="default")
            d, r = res["default"], res["config"]
            if not d.ok:
                raise RuntimeError(f"{self.t.name}: the default config failed ({d.status}: "
                                   f"{d.error})")
            self.timed[key] = ((r.runtime_ns / d.runtime_ns, "ok", "") if r.ok
                               else (float("inf"), r.status, r.error))
        return (key, *self.timed[key])
