"""Measure one program: sample its configs, compile them, group them by executable,
time each executable once, and assemble the graph.

Compiling (`prepare_layout`, `prepare_options`) and timing (`time_prepared`) are two
steps so that a collection can compile on some cores while one pinned core only times
(graphcost.xla.workers): a `Prepared` travels between processes as bytes, its
executables serialized by XLA. Configs are sampled until the graph has `distinct`
different executables (by `fingerprint`) or the sampled candidates run out
(`exhausted`). Configs that share an executable share its one measurement, a true tie.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphcost.formats.records import Graph, LayoutGraph, TileGraph
from graphcost.xla.extract import compiled_graph
from graphcost.xla.fingerprint import fingerprint
from graphcost.xla.options import OPTION_KNOBS, Choices, Knob, OptionConfig, sample_option_configs
from graphcost.xla.timing import ConfigResult, Protocol, error_line, time_executables

#: candidates sampled per wanted distinct executable before a space counts as exhausted
ATTEMPTS_PER_DISTINCT = 3


@dataclass
class Prepared:
    """A graph's compiled configs, ready to be timed."""

    name: str
    kind: str  # a measure kind: "layout:random", "layout:default" or "options"
    hlo: dict[str, np.ndarray]  # node_feat, node_opcode, edge_index, node_splits
    config_ids: np.ndarray | None  # layout: the configurable nodes
    features: list[np.ndarray]  # per compiled config, in sample order
    fingerprints: list[int]  # per compiled config
    executables: dict[int, Any]  # fingerprint -> executable
    failed: list[tuple[int, str, str]] = field(default_factory=list)  # (sample, status, error)
    sampled: int = 0
    exhausted: bool = False  # the candidates ran out before `distinct` executables
    compile_s: float = 0.0

    def to_bytes(self) -> bytes:
        """Pickled, with each executable serialized by XLA (for another process)."""
        from jax.experimental.serialize_executable import serialize

        d = dict(vars(self))
        d["executables"] = {fp: serialize(exe) for fp, exe in self.executables.items()}
        return pickle.dumps(d)

    @classmethod
    def from_bytes(cls, data: bytes) -> Prepared:
        """The inverse of `to_bytes`: executables loaded onto this process's device."""
        from jax.experimental.serialize_executable import deserialize_and_load

        d = pickle.loads(data)
        d["executables"] = {fp: deserialize_and_load(*s) for fp, s in d["executables"].items()}
        return cls(**d)


@dataclass
class MeasureReport:
    """What happened to every sampled config of one graph."""

    name: str
    kind: str
    sampled: int = 0
    distinct: int = 0
    exhausted: bool = False
    failed: list[tuple[int, str, str]] = field(default_factory=list)
    timings: dict[int, ConfigResult] = field(default_factory=dict)  # per executable
    kept: int = 0  # configs in the graph
    compile_s: float = 0.0
    time_s: float = 0.0
    extra: dict[str, np.ndarray] = field(default_factory=dict)  # npz EXTRA_KEYS

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary: counts, seconds, spread and the round-to-round τ."""
        from graphcost.data.noise import rounds_tau

        ok = [t for t in self.timings.values() if t.ok]
        med = np.array([t.runtime_ns for t in ok])
        noise = rounds_tau(np.array([t.rounds_ns for t in ok])) if ok else None
        return {
            "name": self.name, "kind": self.kind, "sampled": self.sampled,
            "distinct": self.distinct, "timed": len(ok), "kept": self.kept,
            "exhausted": self.exhausted, "failed": [list(f) for f in self.failed],
            "compile_s": round(self.compile_s, 3), "time_s": round(self.time_s, 3),
            "median_spread": float(np.median([t.spread for t in ok])) if ok else None,
            "runtime_max_over_min": float(med.max() / med.min()) if ok else None,
            "median_runtime_ms": float(np.median(med) / 1e6) if ok else None,
            "noise_tau": noise,
        }


# ------------------------------------------------------------------ compiling


def opcode_names(node_opcode: np.ndarray) -> list[str]:
    """The HLO opcode name of each node id ("" for ids with no name)."""
    from graphcost.formats.hlo import OPCODE_IDS

    names = {v: k for k, v in OPCODE_IDS.items()}
    return [names.get(int(o), "") for o in node_opcode]


def config_rng(name: str, kind: str, seed: int) -> np.random.Generator:
    """Config sampling depends only on (name, kind, seed): a re-run samples the same."""
    return np.random.default_rng([seed, *map(ord, f"{kind}:{name}")])


def cover_option_configs(count: int, rng: np.random.Generator,
                         knobs: Sequence[Knob] = OPTION_KNOBS) -> list[Choices]:
    """`count` distinct configs that cover the space, for a table to search on: the
    default, then every change of one knob, then every change of two knobs (each group in
    a random order), then random configs (`sample_option_configs`)."""
    default = OptionConfig.default(knobs).choices
    moves = [(k, v) for k, knob in enumerate(knobs) for v in range(1, len(knob.choices))]

    def setting(*changes: tuple[int, int]) -> Choices:
        c = list(default)
        for k, v in changes:
            c[k] = v
        return tuple(c)

    singles = [setting(m) for m in moves]
    pairs = [setting(a, b) for i, a in enumerate(moves) for b in moves[i + 1:] if a[0] != b[0]]
    configs = [default] + [singles[i] for i in rng.permutation(len(singles))] \
        + [pairs[i] for i in rng.permutation(len(pairs))]
    seen = set(configs)
    configs += [c for c in sample_option_configs(count + len(seen), rng, knobs=knobs)
                if c not in seen]
    return configs[:count]


def _compile_distinct(prep: Prepared, candidates: Sequence[Any], distinct: int,
                      compile_one: Callable[[Any], tuple[Any, dict[str, Any]]],
                      features: Callable[[Any], np.ndarray]) -> None:
    """Compile candidates in order until `distinct` executables are found."""
    start = time.perf_counter()
    for i, config in enumerate(candidates):
        if len(prep.executables) >= distinct:
            break
        prep.sampled = i + 1
        try:
            exe, options = compile_one(config)
        except Exception as e:  # XLA's errors have no common base class worth naming
            prep.failed.append((i, "compile", error_line(e)))
            continue
        fp = fingerprint(exe.as_text(), options)
        prep.executables.setdefault(fp, exe)
        prep.fingerprints.append(fp)
        prep.features.append(features(config))
    prep.exhausted = len(prep.executables) < distinct
    prep.compile_s = time.perf_counter() - start


def prepare_layout(name: str, fn: Callable, args: Sequence[Any], mode: str = "random",
                   distinct: int = 16, seed: int = 0) -> Prepared:
    """Compile sampled layout plans of `fn(*args)` (the default plan first)."""
    from graphcost.xla.configs import LayoutSpace, locate_points, sample_layout_plans

    kind = f"layout:{mode}"
    space = LayoutSpace(fn, tuple(args))
    default = space.compile({})
    hlo = compiled_graph(default)
    located = locate_points(space, default.as_text(), hlo.node_names,
                            opcode_names(hlo.node_opcode))
    space.restrict(list(located))
    points = sorted({p for p, _ in space.slots}, key=lambda p: located[p])
    plans = sample_layout_plans(space, distinct * ATTEMPTS_PER_DISTINCT, mode,
                                config_rng(name, mode, seed))
    prep = Prepared(name, kind, _hlo_arrays(hlo),
                    np.asarray([located[p] for p in points], dtype=np.int64), [], [], {})
    _compile_distinct(prep, plans, distinct,
                      lambda plan: (default if not plan else space.compile(plan), {}),
                      lambda plan: space.features(plan, points))
    return prep


def prepare_options(name: str, fn: Callable, args: Sequence[Any], distinct: int = 16,
                    seed: int = 0, configs: Sequence[tuple[int, ...]] | None = None
                    ) -> Prepared:
    """Compile sampled compiler-option configs of `fn(*args)` (the default first)."""

    from graphcost.xla.configs import LayoutSpace

    if configs is None:
        configs = sample_option_configs(distinct * ATTEMPTS_PER_DISTINCT,
                                        config_rng(name, "options", seed))
    lowered = LayoutSpace(fn, tuple(args)).lower({})  # once: each config only compiles

    def compile_one(config):
        opts = OptionConfig(config).compiler_options()
        return lowered.compile(opts or None), opts

    prep = Prepared(name, "options", {}, None, [], [], {})
    _compile_distinct(prep, configs, distinct, compile_one,
                      lambda config: OptionConfig(config).features())
    if not prep.fingerprints or prep.failed and prep.failed[0][0] == 0:
        raise RuntimeError(f"{name}: the default options config did not compile")
    prep.hlo = _hlo_arrays(compiled_graph(prep.executables[prep.fingerprints[0]]))
    return prep


def prepare(name: str, fn: Callable, args: Sequence[Any], kind: str, distinct: int = 16,
            seed: int = 0, cover: bool = False) -> Prepared:
    """Compile the sampled configs of one measure kind: "options", "layout:random" or
    "layout:default". With `cover`, options configs come in cover order
    (`cover_option_configs`: every one- and two-knob change first), for a table."""
    if kind == "options":
        configs = (cover_option_configs(distinct * ATTEMPTS_PER_DISTINCT,
                                        config_rng(name, "options", seed)) if cover else None)
        return prepare_options(name, fn, args, distinct, seed, configs)
    return prepare_layout(name, fn, args, kind.split(":")[1], distinct, seed)


def _hlo_arrays(hlo) -> dict[str, np.ndarray]:
    return {"node_feat": hlo.node_feat, "node_opcode": hlo.node_opcode,
            "edge_index": hlo.edge_index, "node_splits": hlo.node_splits}


# ------------------------------------------------------------------ timing


def input_maker(args: Sequence[Any]) -> Callable[[Any], Callable[[], list]]:
    """exe -> a function giving fresh input buffers in that executable's layouts."""
    import jax

    host = [np.asarray(x) for x in jax.tree.leaves(tuple(args))]

    def for_exe(exe) -> Callable[[], list]:
        formats = exe.input_formats[0]
        return lambda: [jax.device_put(h, f) for h, f in zip(host, formats, strict=True)]

    return for_exe


def time_prepared(prep: Prepared, args: Sequence[Any], protocol: Protocol, seed: int = 0
                  ) -> tuple[Graph | None, MeasureReport]:
    """Time each distinct executable, then assemble the graph (None when fewer than two
    configs ran, or an options graph whose default config failed)."""
    start = time.perf_counter()
    inputs = input_maker(args)
    runnables = {fp: (exe, inputs(exe)) for fp, exe in prep.executables.items()}
    timings = time_executables(runnables, protocol, reference=prep.fingerprints[0], seed=seed)
    report = MeasureReport(prep.name, prep.kind, prep.sampled, len(prep.executables),
                           prep.exhausted, list(prep.failed), timings,
                           compile_s=prep.compile_s)
    keep = [j for j, fp in enumerate(prep.fingerprints) if timings[fp].ok]
    report.kept = len(keep)
    report.time_s = time.perf_counter() - start
    if len(keep) < 2 or (prep.kind == "options" and keep[0] != 0):
        return None, report
    rows = [timings[prep.fingerprints[j]] for j in keep]
    report.extra = {
        "config_fingerprint": np.asarray([prep.fingerprints[j] for j in keep], dtype=np.int64),
        "config_runtime_rounds": np.asarray([r.rounds_ns for r in rows], dtype=np.float64)}
    runtime = np.asarray([r.runtime_ns for r in rows])
    h = prep.hlo
    if prep.kind == "options":
        ns = np.round(runtime).astype(np.int64)
        return TileGraph(prep.name, h["node_feat"], h["node_opcode"], h["edge_index"],
                         config_feat=np.stack([prep.features[j] for j in keep]),
                         config_runtime=ns,
                         config_runtime_normalizers=np.full(len(ns), ns[0], dtype=np.int64)
                         ), report
    return LayoutGraph(prep.name, h["node_feat"], h["node_opcode"], h["edge_index"],
                       node_config_ids=prep.config_ids,
                       node_config_feat=np.stack([prep.features[j] for j in keep]),
                       config_runtime=runtime, node_splits=h["node_splits"]), report


# ------------------------------------------------------------------ in one process


def measure_layout(name: str, fn: Callable, args: Sequence[Any], mode: str = "random",
                   num_configs: int = 16, seed: int = 0, protocol: Protocol | None = None
                   ) -> tuple[LayoutGraph | None, MeasureReport]:
    """Compile and time up to `num_configs` distinct layout executables of `fn(*args)`."""
    prep = prepare_layout(name, fn, args, mode, num_configs, seed)
    return time_prepared(prep, args, protocol or Protocol(), seed)  # type: ignore[return-value]


def measure_options(name: str, fn: Callable, args: Sequence[Any], num_configs: int = 16,
                    seed: int = 0, protocol: Protocol | None = None,
                    configs: Sequence[tuple[int, ...]] | None = None,
                    ) -> tuple[TileGraph | None, MeasureReport]:
    """Compile and time up to `num_configs` distinct option executables; the default
    config's runtime is the normaliser."""
    prep = prepare_options(name, fn, args, num_configs, seed, configs)
    return time_prepared(prep, args, protocol or Protocol(), seed)  # type: ignore[return-value]
