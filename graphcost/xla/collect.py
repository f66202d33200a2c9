"""Build TpuGraphs-format collections by measuring JAX programs on this machine.

Programs x measure kinds -> one `.npz` per (program, kind):

    OUT/npz/layout/cpu/{random,default}/{split}/NAME.npz   (layout:cpu:random, ...)
    OUT/npz/options/cpu/{split}/NAME.npz                    (options:cpu, tile format)

Splits are drawn per program family, so no family is in two splits. Each graph's
configs are sampled until it has `num_configs` distinct executables, compiled, and
each executable is timed once in `protocol.rounds` interleaved rounds
(graphcost.xla.prepare), either by one pinned worker per core that compiles and times
its own graphs, or pipelined: every core compiles, one core times (graphcost.xla.workers);
or on a Ray cluster, by one pinned timing slot per core of every node
(graphcost.xla.ray_pool). The task functions here run in those workers, named by this
module's path; `measure_program` runs one in this process (the `measure` command).
Whichever process measured it, every graph comes back to this one, which writes it and
logs it (graphcost.xla.restart_log), so a restart skips graphs already written or logged
as failed. Each collection folder then gets a `manifest.json` and OUT a `summary.json`
(graphcost.xla.manifest).
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphcost.atomic import one_writer
from graphcost.errors import UserError
from graphcost.formats.records import Graph
from graphcost.kinds import MEASURE_KINDS
from graphcost.stats import random_pick_score
from graphcost.xla.manifest import write_manifest
from graphcost.xla.plan import (
    DEFAULT_PROGRAMS,
    CollectSpec,
    Task,
    check_num_configs,
    find_program,
    plan_tasks,
    spec_dict,
    take_shard,
)
from graphcost.xla.restart_log import log_unlogged, logged_failures, pending_tasks, record
from graphcost.xla.timing import Protocol, pin_to_core
from graphcost.xla.workers import run_workers, sigterm_raises

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
    return prepare(task.program, fn, args, task.kind, spec.num_configs, spec.seed,
                   spec.cover), args


def _error(e: Exception) -> str:
    """A failed graph's error as its log line says it: a user error's message speaks for
    itself; anything else keeps its type, the first word of a bug report."""
    return str(e) if isinstance(e, UserError) else f"{type(e).__name__}: {e}"


def compile_task(task: Task, spec_d: dict[str, Any]) -> bytes | dict[str, Any]:
    """Pipeline stage 1 (a compile worker): the compiled graph as bytes, or a failure."""
    spec = CollectSpec(**spec_d)
    try:
        return _prepare(task, spec)[0].to_bytes()
    except Exception as e:  # a whole-graph failure is data, not a reason to stop
        return _failure(task, spec, "failed", _error(e))


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
        return _failure(task, spec, "failed", _error(e))


def measure_task(task: Task, spec_d: dict[str, Any]) -> dict[str, Any]:
    """Both stages in one worker (the pipeline off): compile, time, write."""
    from graphcost.xla.prepare import time_prepared

    spec = CollectSpec(**spec_d)
    try:
        prep, args = _prepare(task, spec)
        return _finish(task, spec, *time_prepared(prep, args, spec.protocol, spec.seed))
    except Exception as e:
        return _failure(task, spec, "failed", _error(e))


# ------------------------------------------------------------------ the whole run


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
    summary (the CLI passes one that updates a progress bar). OUT has one writer: while
    another run holds it (`one_writer`), this one is refused before any work.
    """
    with one_writer(spec.out, "collect run"):
        return _collect(spec, progress, command)


def _collect(spec: CollectSpec, progress: Callable[[int, int], Callable[[dict], Any]] | None,
             command: str | None) -> CollectResult:
    """`collect` in its held OUT."""
    out = Path(spec.out)
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
            run_workers(todo, compile_task, spec_d, on_done, on_crash, time_task, spec.workers,
                        out / ".spool", spec.quiet_timing)
        else:
            run_workers(todo, measure_task, spec_d, on_done, on_crash, None, spec.workers)
    wall = time.perf_counter() - start
    manifests = write_manifest(spec, tasks, command)
    remaining = len(pending_tasks(spec, tasks))
    failures = [(t, ((e.get("error") or "").strip() or e["status"]).splitlines()[0])
                for t, e in logged_failures(spec, tasks).items()]
    return CollectResult(counts["ok"], counts["failed"], skipped, remaining, counts["samples"],
                         wall, manifests, failures)


def measure_program(program: str, kind: str, source: str = DEFAULT_PROGRAMS,
                    program_kwargs: dict[str, Any] | None = None, num_configs: int = 16,
                    seed: int = 0, protocol: Protocol | None = None, core: int | None = None
                    ) -> tuple[Graph | None, MeasureReport]:
    """Measure one named program in this process: (graph or None, MeasureReport)."""
    from graphcost.xla.prepare import prepare, time_prepared

    if kind not in MEASURE_KINDS:
        raise UserError(f"unknown kind {kind!r}; choose from {list(MEASURE_KINDS)}")
    check_num_configs(num_configs)
    if core is not None:
        pin_to_core(core)
    fn, args = find_program(source, program_kwargs or {}, program)
    return time_prepared(prepare(program, fn, args, kind, num_configs, seed), args,
                         protocol or Protocol(), seed)
