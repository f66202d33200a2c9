"""Build TpuGraphs-format collections by measuring JAX programs on this machine.

Programs x configuration kinds -> one `.npz` per (program, kind):

    OUT/npz/layout/cpu/{random,default}/{split}/NAME.npz   (layout:cpu:random, ...)
    OUT/npz/options/cpu/{split}/NAME.npz                    (options:cpu, tile format)

Splits are drawn per program family, so no family is in two splits. Each graph's
configs are sampled until it has `num_configs` distinct executables, compiled, and
each executable is timed once in `protocol.rounds` interleaved rounds
(graphcost.xla.prepare), either by one pinned worker per core that compiles and times
its own graphs, or pipelined: every core compiles, one core times (graphcost.xla.pool);
or on a Ray cluster, by one pinned timing slot per core of every node
(graphcost.xla.ray_pool). Whichever process measured it, every graph comes back to this
one, which writes it atomically and logs it to `OUT/log.jsonl` (`record`);
a restart skips graphs already written or logged as failed, so a killed run loses at
most the graphs in progress. Each collection folder gets a `manifest.json` (command,
machine, JAX version, counts, spread, the noise ceiling: mean per-graph τ between two
timing rounds, with a 95% interval) and OUT gets `summary.json`, every manifest's
headline figures.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from graphcost.atomic import atomic_open, write_json
from graphcost.data.collection import SPLITS
from graphcost.errors import UserError
from graphcost.formats.records import Graph
from graphcost.stats import random_pick_score
from graphcost.xla.measure import Protocol, pin_to_core
from graphcost.xla.plan import (
    DEFAULT_PROGRAMS,
    KINDS,
    CollectSpec,
    Task,
    check_num_configs,
    collection_dir,
    collection_name,
    find_program,
    plan_tasks,
    spec_dict,
    take_shard,
)
from graphcost.xla.pool import run_pool, sigterm_raises
from graphcost.xla.programs import family_of

if TYPE_CHECKING:
    from graphcost.xla.prepare import MeasureReport, Prepared

# ------------------------------------------------------------------ one graph


def _failure(task: Task, spec: CollectSpec, status: str, error: str) -> dict[str, Any]:
    return {"task": asdict(task), "path": str(task.path(spec.out)), "status": status,
            "error": error[:500]}


def _finish(task: Task, spec: CollectSpec, graph: Graph | None, report: MeasureReport
            ) -> dict[str, Any]:
    """Summarise a measured graph for the log, with the graph itself as `npz` bytes
    (when there is one): the process that keeps the log writes it (`record`), so a
    graph measured on another machine lands in the same collection."""
    from graphcost.formats.npz import graph_bytes

    summary = report.summary()
    summary.update(task=asdict(task), path=str(task.path(spec.out)), finished=time.time(),
                   status="ok" if graph is not None else "failed",
                   host=platform.node(), core=sorted(os.sched_getaffinity(0)))
    if graph is None:
        summary["error"] = _why_no_graph(report)
    else:
        summary["npz"] = graph_bytes(graph, report.extra, str(task.path(spec.out)))
        summary["random_top5_score"] = random_pick_score(graph.config_runtime)
        summary["nodes"] = graph.num_nodes
        summary["configurable"] = (int(graph.node_config_ids.size)
                                   if graph.kind == "layout" else 0)
    return summary


def _why_no_graph(report: MeasureReport) -> str:
    """Why a measured program gave no graph: too few configs ran, and the first failure."""
    causes = [f"config {i} {status}: {error}" for i, status, error in report.failed]
    causes += [f"{r.status}: {r.error}" for r in report.timings.values() if not r.ok]
    return (f"{report.kept} configs ran (a graph needs 2, an options graph its default)"
            + (f"; first failure: {causes[0]}" if causes else ""))


def _prepare(task: Task, spec: CollectSpec) -> tuple[Prepared, tuple]:
    from graphcost.xla.prepare import prepare

    fn, args = find_program(task.source, spec.program_kwargs, task.program)
    return prepare(task.kind, task.program, fn, args, spec.num_configs, spec.seed), args


def compile_task(task: Task, spec_d: dict[str, Any]) -> bytes | dict[str, Any]:
    """Pipeline stage 1 (a compile worker): the compiled graph as bytes, or a failure."""
    spec = CollectSpec(**spec_d)
    try:
        return _prepare(task, spec)[0].to_bytes()
    except Exception as e:  # a whole-graph failure is data, not a reason to stop
        return _failure(task, spec, "failed", f"{type(e).__name__}: {e}")


def time_task(task: Task, spec_d: dict[str, Any], compiled: bytes) -> dict[str, Any]:
    """Pipeline stage 2 (the timer): time a compiled graph and write it."""
    from graphcost.xla.prepare import Prepared, time_prepared

    spec = CollectSpec(**spec_d)
    try:
        _, args = find_program(task.source, spec.program_kwargs, task.program)
        graph, report = time_prepared(Prepared.from_bytes(compiled), args, spec.protocol,
                                      spec.seed)
        return _finish(task, spec, graph, report)
    except Exception as e:
        return _failure(task, spec, "failed", f"{type(e).__name__}: {e}")


def measure_task(task: Task, spec_d: dict[str, Any]) -> dict[str, Any]:
    """Both stages in one worker (the pipeline off): compile, time, write."""
    from graphcost.xla.prepare import time_prepared

    spec = CollectSpec(**spec_d)
    try:
        prep, args = _prepare(task, spec)
        return _finish(task, spec, *time_prepared(prep, args, spec.protocol, spec.seed))
    except Exception as e:
        return _failure(task, spec, "failed", f"{type(e).__name__}: {e}")


# ------------------------------------------------------------------ the whole run


def read_log(out: str | Path) -> dict[str, dict[str, Any]]:
    """The last logged summary of each graph path."""
    log = Path(out) / "log.jsonl"
    entries: dict[str, dict[str, Any]] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            try:
                e = json.loads(line)
            except json.JSONDecodeError:  # a line cut off by a kill
                continue
            entries[e["path"]] = e
    return entries


def record(out: Path, summary: dict[str, Any]) -> dict[str, Any]:
    """Write a finished graph's file (its `npz` bytes, atomically), then its log line:
    the one place a collection's files are written, whichever process or machine
    measured them. The summary without the bytes is returned."""
    summary = dict(summary)
    data = summary.pop("npz", None)
    if data is not None:
        with atomic_open(summary["path"]) as f:
            f.write(data)
    _append_log(out, summary)
    return summary


def _append_log(out: Path, summary: dict[str, Any]) -> None:
    """One JSON line per finished graph; a line cut off by a kill is left on its own."""
    path = out / "log.jsonl"
    torn = False
    if path.exists() and path.stat().st_size:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            torn = f.read(1) != b"\n"
    with open(path, "a") as f:
        f.write(("\n" if torn else "") + json.dumps(summary) + "\n")


def recovered_summary(task: Task, spec: CollectSpec) -> dict[str, Any]:
    """The log entry of a graph whose file was written but whose log line a kill cut
    off (`record` writes the file, then its line): what the file tells,
    marked `recovered`; its compile and timing seconds are lost (0)."""
    from graphcost.data.noise import file_noise_tau
    from graphcost.formats import read_graph
    from graphcost.formats.npz import read_extra

    path = task.path(spec.out)
    g = read_graph(path)
    runtime = np.asarray(g.config_runtime, dtype=np.float64)
    prints = read_extra(path).get("config_fingerprint")
    return {"task": asdict(task), "path": str(path), "status": "ok", "recovered": True,
            "name": task.program, "kind": task.kind, "kept": g.num_configs,
            "distinct": int(np.unique(prints).size) if prints is not None else g.num_configs,
            "compile_s": 0.0, "time_s": 0.0, "finished": path.stat().st_mtime,
            "runtime_max_over_min": float(runtime.max() / runtime.min()),
            "median_runtime_ms": float(np.median(runtime) / 1e6),
            "noise_tau": file_noise_tau(path), "nodes": g.num_nodes,
            "random_top5_score": random_pick_score(g.config_runtime)}


def log_unlogged(spec: CollectSpec, tasks: list[Task]) -> int:
    """Log every written graph the log does not hold as ok (`recovered_summary`), so
    that after a kill the log again lists each written graph once; how many."""
    logged = read_log(spec.out)
    missing = [t for t in tasks if t.path(spec.out).exists()
               and logged.get(str(t.path(spec.out)), {}).get("status") != "ok"]
    for t in missing:
        _append_log(Path(spec.out), recovered_summary(t, spec))
    return len(missing)


def logged_failures(spec: CollectSpec, tasks: list[Task]) -> dict[Task, dict[str, Any]]:
    """The last log entry of each task with no written graph whose log says it failed
    or crashed: what a rerun skips unless retrying, and what `collect` reports."""
    logged = read_log(spec.out)
    return {t: e for t in tasks if not t.path(spec.out).exists()
            and (e := logged.get(str(t.path(spec.out)), {})).get("status") in ("failed",
                                                                               "crashed")}


def pending_tasks(spec: CollectSpec, tasks: list[Task]) -> list[Task]:
    """Tasks with no written graph (and, unless retrying, no logged failure)."""
    failed = {} if spec.retry_failed else logged_failures(spec, tasks)
    return [t for t in tasks if not t.path(spec.out).exists() and t not in failed]


@dataclass
class CollectResult:
    """What a run did, plus the state of the whole collection after it."""

    written: int
    failed: int
    skipped: int
    remaining: int
    samples: int  # configs written by this run
    wall_s: float  # this run's measuring time
    manifests: dict[str, dict[str, Any]]  # collection name -> its manifest
    # every graph of the plan that failed, in this run or logged by an earlier one and
    # not retried: (task, the first line of its error)
    failures: list[tuple[Task, str]] = field(default_factory=list)

    @property
    def samples_per_minute(self) -> float:
        return 60 * self.samples / self.wall_s if self.wall_s else 0.0


def collect(spec: CollectSpec, progress: Callable[[int, int], Callable[[dict], Any]] | None = None,
            command: str | None = None) -> CollectResult:
    """Measure every pending graph of `spec` (up to `spec.limit`), then write the manifests.

    `progress(total, initial)` may return a callback called with each finished graph's
    summary (the CLI passes one that updates a tqdm bar).
    """
    out = Path(spec.out)
    out.mkdir(parents=True, exist_ok=True)
    tasks = plan_tasks(spec)
    if spec.shard:  # this machine's part of the whole plan, recorded in OUT/shard.json
        tasks = take_shard(spec, tasks)
    log_unlogged(spec, tasks)
    todo = pending_tasks(spec, tasks)
    skipped = len(tasks) - len(todo)
    if spec.limit:
        todo = todo[:spec.limit]
    counts = {"ok": 0, "failed": 0, "samples": 0}
    tick = progress(len(tasks), skipped) if progress else None

    def on_done(summary: dict[str, Any]) -> None:
        summary = record(out, summary)
        ok = summary["status"] == "ok"
        counts["ok" if ok else "failed"] += 1
        counts["samples"] += summary["kept"] if ok else 0
        if tick:
            tick(summary)

    def on_crash(task: Task, error: str) -> dict[str, Any]:
        return _failure(task, spec, "crashed", error)

    start = time.perf_counter()
    spec_d = spec_dict(spec)
    with sigterm_raises():  # a `kill` ends the workers and keeps what they finished
        if spec.ray is not None:
            from graphcost.xla.ray_pool import run_ray

            run_ray(todo, measure_task, spec_d, on_done, on_crash, spec.ray, spec.workers)
        elif spec.pipeline:
            run_pool(todo, compile_task, spec_d, on_done, on_crash, time_task, spec.workers,
                     out / ".spool", spec.quiet_timing)
        else:
            run_pool(todo, measure_task, spec_d, on_done, on_crash, None, spec.workers)
    wall = time.perf_counter() - start
    manifests = write_manifest(spec, tasks, command)
    remaining = len(pending_tasks(spec, tasks))
    failures = [(t, ((e.get("error") or "").strip() or e["status"]).splitlines()[0])
                for t, e in logged_failures(spec, tasks).items()]
    return CollectResult(counts["ok"], counts["failed"], skipped, remaining, counts["samples"],
                         wall, manifests, failures)


def _machine() -> dict[str, Any]:
    """Where the graphs were timed. The CPU model comes from /proc/cpuinfo: neither
    psutil nor `platform` reports it (`platform.processor()` is empty or the arch)."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"node": platform.node(), "cpu": cpu, "cores": len(os.sched_getaffinity(0)),
            "python": platform.python_version(), "platform": platform.platform()}


def collection_figures(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The headline figures of one collection's logged graphs: counts, distinct
    executables, runtime spread, samples per core-minute and the noise ceiling (mean
    per-graph τ between two timing rounds, with a 95% bootstrap interval)."""
    from graphcost.stats import bootstrap_ci

    ok = [e for e in entries if e["status"] == "ok"]
    if not ok:
        return {"graphs": 0}

    def median(key: str) -> float | None:
        values = [e[key] for e in ok if e.get(key) is not None]
        return float(np.median(values)) if values else None

    seconds = sum(e["compile_s"] + e["time_s"] for e in ok)
    noise = np.array([e["noise_tau"] for e in ok if e.get("noise_tau") is not None], dtype=float)
    tau, low, high = bootstrap_ci(noise) if noise.size else (None, None, None)
    spreads = np.array([e["runtime_max_over_min"] for e in ok])
    picks = [e["random_top5_score"] for e in ok if e.get("random_top5_score") is not None]
    return {
        "graphs": len(ok), "families_measured": len({family_of(e["name"]) for e in ok}),
        "configs": int(sum(e["kept"] for e in ok)),
        "configs_failed": int(sum(len(e.get("failed", [])) for e in ok)),
        "distinct_executables_median": median("distinct"),
        "graphs_exhausted": int(sum(bool(e.get("exhausted")) for e in ok)),
        "median_runtime_ms": median("median_runtime_ms"),
        "runtime_max_over_min_median": median("runtime_max_over_min"),
        "runtime_max_over_min_quartiles": [float(q) for q in np.percentile(spreads, [25, 75])],
        "median_spread": median("median_spread"),
        "random_top5_score": float(np.mean(picks)) if picks else None,
        "samples_per_minute_per_core": round(60 * sum(e["kept"] for e in ok) / seconds, 1)
        if seconds else None,
        "noise_ceiling_tau": tau,
        "noise_ceiling_ci": [low, high] if tau is not None else None,
    }


def write_manifest(spec: CollectSpec, tasks: list[Task], command: str | None = None
                   ) -> dict[str, dict[str, Any]]:
    """`manifest.json` in each collection's folder (how it was made, what it holds) and
    `OUT/summary.json` (every collection's figures)."""
    import jax
    import jaxlib

    logged = read_log(spec.out)
    common = {
        "what": "XLA:CPU measurements of JAX programs (graphcost.xla.collect)",
        "command": command or " ".join(sys.argv), "spec": spec_dict(spec),
        "machine": _machine(), "jax": jax.__version__, "jaxlib": jaxlib.__version__,
    }
    manifests = {}
    for kind in spec.kinds:
        mine = [t for t in tasks if t.kind == kind]
        splits: dict[str, int] = {}
        for t in mine:
            if t.path(spec.out).exists():
                splits[t.split] = splits.get(t.split, 0) + 1
        entries = [logged[str(t.path(spec.out))] for t in mine if str(t.path(spec.out)) in logged]
        m = dict(common, collection=collection_name(kind), splits=splits,
                 families={s: sorted({family_of(t.program) for t in mine if t.split == s})
                           for s in SPLITS},
                 graphs_failed=sorted(e["path"] for e in entries if e["status"] != "ok"),
                 **collection_figures(entries))
        folder = collection_dir(spec.out, kind)
        folder.mkdir(parents=True, exist_ok=True)
        write_json(m, folder / "manifest.json")
        manifests[m["collection"]] = m
    keep = ("graphs", "families_measured", "splits", "distinct_executables_median",
            "graphs_exhausted", "median_runtime_ms", "runtime_max_over_min_median",
            "runtime_max_over_min_quartiles", "median_spread", "random_top5_score",
            "samples_per_minute_per_core", "noise_ceiling_tau", "noise_ceiling_ci")
    write_json({name: {k: m.get(k) for k in keep} for name, m in manifests.items()},
               Path(spec.out) / "summary.json")
    return manifests


def measure_program(program: str, kind: str, source: str = DEFAULT_PROGRAMS,
                    program_kwargs: dict[str, Any] | None = None, num_configs: int = 16,
                    seed: int = 0, protocol: Protocol | None = None, core: int | None = None
                    ) -> tuple[Graph | None, MeasureReport]:
    """Measure one named program in this process: (graph or None, MeasureReport)."""
    from graphcost.xla.prepare import prepare, time_prepared

    if kind not in KINDS:
        raise UserError(f"unknown kind {kind!r}; choose from {list(KINDS)}")
    check_num_configs(num_configs)
    if core is not None:
        pin_to_core(core)
    fn, args = find_program(source, program_kwargs or {}, program)
    return time_prepared(prepare(kind, program, fn, args, num_configs, seed), args,
                         protocol or Protocol(), seed)
