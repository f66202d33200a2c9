"""Time the configurations of one program on this machine (the protocol of DESIGN §7).

Pinned to one core, every config is compiled first; the executables are then run
round-robin (a rotating start, so no config always follows the same one): warm-up
rounds, then `runs` timed rounds with `block_until_ready`. Per config we keep the
median, the min and the spread (inter-quartile range / median). A config that fails
to compile, raises when run, is slower than `max_run_s` per call, or whose outputs
disagree with the default config's is recorded as failed and left out of the graph.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from graphcost.formats.npz import LayoutGraph, TileGraph


@dataclass
class Protocol:
    """How hard to time: rounds, limits and output checks."""

    warmup: int = 3
    runs: int = 20
    max_run_s: float = 0.25  # a single call slower than this fails the config
    check_outputs: bool = True


@dataclass
class ConfigResult:
    """One config's outcome: `status` is ok, compile, run, timeout or mismatch."""

    status: str = "ok"
    error: str = ""
    median_ns: float = float("nan")
    min_ns: float = float("nan")
    spread: float = float("nan")  # (p75 - p25) / median

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class MeasureReport:
    """What happened to every sampled config of one graph."""

    name: str
    kind: str  # "layout" or "options"
    results: list[ConfigResult] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)  # sampled config ids written, in order
    compile_s: float = 0.0
    time_s: float = 0.0

    @property
    def failed(self) -> list[tuple[int, str, str]]:
        return [(i, r.status, r.error) for i, r in enumerate(self.results) if not r.ok]

    def summary(self) -> dict[str, Any]:
        ok = [r for r in self.results if r.ok]
        med = np.array([r.median_ns for r in ok]) if ok else np.array([np.nan])
        return {
            "name": self.name, "kind": self.kind, "sampled": len(self.results),
            "kept": self.kept, "failed": [list(f) for f in self.failed],
            "compile_s": round(self.compile_s, 3), "time_s": round(self.time_s, 3),
            "median_spread": float(np.nanmedian([r.spread for r in ok])) if ok else None,
            "runtime_max_over_min": float(med.max() / med.min()) if ok else None,
            "runtime_ns": [r.median_ns for r in self.results],
        }


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


def time_configs(build: Callable[[int], tuple[Callable, Sequence[Any]]], count: int,
                 protocol: Protocol, reference: int = 0) -> tuple[list[ConfigResult], float]:
    """Compile configs 0..count-1 with `build(i) -> (executable, inputs)`, then time them.

    Returns the results and the seconds spent compiling. Outputs are compared with
    those of config `reference` (or the first that runs, if it fails).
    """
    import jax

    results = [ConfigResult() for _ in range(count)]
    runnable: dict[int, tuple[Callable, Sequence[Any]]] = {}
    t0 = time.perf_counter()
    for i in range(count):
        try:
            runnable[i] = build(i)
        except Exception as e:  # XLA's errors have no common base class worth naming
            results[i] = ConfigResult("compile", _first_line(e))
    compile_s = time.perf_counter() - t0

    ref_out = None
    for i in sorted(runnable, key=lambda i: i != reference):
        exe, inputs = runnable[i]
        try:
            start = time.perf_counter()
            out = jax.block_until_ready(exe(*inputs))
            took = time.perf_counter() - start
        except Exception as e:
            results[i] = ConfigResult("run", _first_line(e))
            del runnable[i]
            continue
        flat = [np.asarray(x) for x in jax.tree.leaves(out)]
        if took > protocol.max_run_s * 20:  # the first call may include one-time setup
            results[i] = ConfigResult("timeout", f"first call took {took:.3f}s")
            del runnable[i]
        elif ref_out is None:
            ref_out = flat
        elif protocol.check_outputs and not outputs_agree(flat, ref_out):
            results[i] = ConfigResult("mismatch", "outputs differ from the reference config")
            del runnable[i]

    samples: dict[int, list[int]] = {i: [] for i in runnable}
    order = sorted(runnable)
    for r in range(protocol.warmup + protocol.runs):
        shift = r % len(order) if order else 0
        for i in order[shift:] + order[:shift]:
            if i not in runnable:
                continue
            exe, inputs = runnable[i]
            start = time.perf_counter_ns()
            jax.block_until_ready(exe(*inputs))
            took = time.perf_counter_ns() - start
            if took > protocol.max_run_s * 1e9:
                results[i] = ConfigResult("timeout", f"a run took {took / 1e9:.3f}s "
                                          f"> max_run_s={protocol.max_run_s}")
                del runnable[i]
            elif r >= protocol.warmup:
                samples[i].append(took)
    for i in runnable:
        t = np.asarray(samples[i], dtype=np.float64)
        med = float(np.median(t))
        q75, q25 = np.percentile(t, [75, 25])
        results[i] = ConfigResult("ok", "", med, float(t.min()), float((q75 - q25) / med))
    return results, compile_s


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:300]


# ------------------------------------------------------------------ whole graphs


def _hlo_graph(compiled):
    from graphcost.formats.hlo import hlo_bytes_to_graph

    module = compiled.runtime_executable().hlo_modules()[0]
    return hlo_bytes_to_graph(module.as_serialized_hlo_module_proto())


def _opcode_names(node_opcode: np.ndarray) -> list[str]:
    from graphcost.formats.hlo import OPCODE_IDS

    names = {v: k for k, v in OPCODE_IDS.items()}
    return [names.get(int(o), "") for o in node_opcode]


def _config_rng(name: str, kind: str, seed: int) -> np.random.Generator:
    """Config sampling depends only on (name, kind, seed): a re-run samples the same."""
    return np.random.default_rng([seed, *map(ord, f"{kind}:{name}")])


def measure_layout(name: str, fn: Callable, args: Sequence[Any], mode: str = "random",
                   num_configs: int = 16, seed: int = 0,
                   protocol: Protocol | None = None) -> tuple[LayoutGraph | None, MeasureReport]:
    """Sample and time layout configs of `fn(*args)`; the graph is None when < 2 ran."""
    import jax

    from graphcost.xla.configs import LayoutSpace, locate_points, sample_layout_plans

    protocol = protocol or Protocol()
    start = time.perf_counter()
    report = MeasureReport(name, f"layout:{mode}")
    space = LayoutSpace(fn, tuple(args))
    default = space.compile({})
    hlo = _hlo_graph(default)
    located = locate_points(space, default.as_text(), hlo.node_names,
                            _opcode_names(hlo.node_opcode))
    space.restrict(list(located))
    points = sorted({p for p, _ in space.slots}, key=lambda p: located[p])
    plans = sample_layout_plans(space, num_configs, mode, _config_rng(name, mode, seed))

    def build(i: int):
        exe = default if i == 0 else space.compile(plans[i])
        formats = exe.input_formats[0]
        return exe, [jax.device_put(x, f) for x, f in zip(space.leaves, formats, strict=False)]

    report.results, report.compile_s = time_configs(build, len(plans), protocol)
    report.kept = [i for i, r in enumerate(report.results) if r.ok]
    report.time_s = time.perf_counter() - start
    if len(report.kept) < 2:
        return None, report
    graph = LayoutGraph(
        name=name, node_feat=hlo.node_feat, node_opcode=hlo.node_opcode,
        edge_index=hlo.edge_index,
        node_config_ids=np.asarray([located[p] for p in points], dtype=np.int64),
        node_config_feat=np.stack([space.features(plans[i], points) for i in report.kept]),
        config_runtime=np.asarray([report.results[i].median_ns for i in report.kept]),
        node_splits=hlo.node_splits)
    return graph, report


def measure_options(name: str, fn: Callable, args: Sequence[Any], num_configs: int = 16,
                    seed: int = 0, protocol: Protocol | None = None,
                    configs: Sequence[tuple[int, ...]] | None = None,
                    ) -> tuple[TileGraph | None, MeasureReport]:
    """Sample and time compiler-option configs; the default config is the normaliser.

    The graph is None when the default or every other config failed.
    """
    import jax

    from graphcost.xla.configs import (
        compiler_options,
        option_features,
        sample_option_configs,
    )

    protocol = protocol or Protocol()
    start = time.perf_counter()
    report = MeasureReport(name, "options")
    if configs is None:
        configs = sample_option_configs(num_configs, _config_rng(name, "options", seed))
    leaves = jax.tree.leaves(tuple(args))

    def flat(*xs):
        return fn(*jax.tree.unflatten(jax.tree.structure(tuple(args)), xs))

    lowered = jax.jit(flat, keep_unused=True).lower(*leaves)
    compiled: dict[int, Any] = {}

    def build(i: int):
        opts = compiler_options(configs[i])
        compiled[i] = lowered.compile(opts) if opts else lowered.compile()
        return compiled[i], leaves

    report.results, report.compile_s = time_configs(build, len(configs), protocol)
    report.kept = [i for i, r in enumerate(report.results) if r.ok]
    report.time_s = time.perf_counter() - start
    if not report.results[0].ok or len(report.kept) < 2:
        return None, report
    hlo = _hlo_graph(compiled[0])
    runtime = np.asarray([round(report.results[i].median_ns) for i in report.kept],
                         dtype=np.int64)
    graph = TileGraph(
        name=name, node_feat=hlo.node_feat, node_opcode=hlo.node_opcode,
        edge_index=hlo.edge_index,
        config_feat=np.stack([option_features(configs[i]) for i in report.kept]),
        config_runtime=runtime,
        config_runtime_normalizers=np.full(len(runtime), runtime[0], dtype=np.int64))
    return graph, report


def report_dict(report: MeasureReport) -> dict[str, Any]:
    """A JSON-ready form of a report, per-config results included."""
    d = report.summary()
    d["results"] = [asdict(r) for r in report.results]
    return d
