"""Build TpuGraphs-format collections by measuring JAX programs on this machine.

Programs x configuration kinds -> one `.npz` per (program, kind):

    OUT/npz/layout/cpu/{random,default}/{split}/NAME.npz   (layout:cpu:random, ...)
    OUT/npz/options/cpu/{split}/NAME.npz                    (options:cpu, tile format)

Splits are drawn per program family, so no family is in two splits. One worker
process per core (spawned, pinned to its core before JAX is imported) takes graphs
from a queue. Every graph is written atomically and logged to `OUT/log.jsonl`; a
restart skips graphs already written or logged as failed, so a killed run loses at
most the graphs in progress. A worker that dies (a crash inside XLA) fails its graph
and is replaced. `repeat` re-times some graphs in fresh processes: Kendall τ between
the two timings is the noise ceiling, written to `OUT/noise.json`. Each collection
folder gets a `manifest.json` (command, machine, JAX version, counts, noise ceiling).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import platform
import queue
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphcost.data.collection import SPLITS
from graphcost.xla.measure import Protocol
from graphcost.xla.plan import (
    DEFAULT_PROGRAMS,
    KINDS,
    CollectSpec,
    Task,
    collection_dir,
    collection_name,
    plan_tasks,
    program_table,
    spec_dict,
    take_shard,
)
from graphcost.xla.programs import family_of

# ------------------------------------------------------------------ one graph


def run_task(task: Task, spec: CollectSpec) -> dict[str, Any]:
    """Measure one graph and write it; a JSON-ready summary (status ok or failed)."""
    from graphcost.formats.npz import write_graph

    graph, report = measure_program(task.program, task.kind, task.source, spec.program_kwargs,
                                    spec.num_configs, spec.seed, spec.protocol)
    summary = report.summary()
    summary.update(task=asdict(task), path=str(task.path(spec.out)),
                   status="ok" if graph is not None else "failed")
    if graph is not None:
        write_graph(task.path(spec.out), graph)
        summary["nodes"] = graph.num_nodes
        summary["configurable"] = (int(graph.node_config_ids.size)
                                   if graph.kind == "layout" else 0)
    return summary


def _worker(core: int, spec_dict: dict, tasks: mp.Queue, results: mp.Queue, wid: int) -> None:
    """A worker process: pin to `core`, then measure tasks until a None arrives."""
    from graphcost.xla.measure import pin_to_core

    pin_to_core(core)
    spec = CollectSpec(**spec_dict)
    while True:
        item = tasks.get()
        if item is None:
            return
        index, task, repeat = item
        try:
            if repeat:
                summary = _retime(task, spec)
            else:
                summary = run_task(task, spec)
        except Exception as e:  # a whole-graph failure is data, not a reason to stop
            summary = {"task": asdict(task), "path": str(task.path(spec.out)),
                       "status": "failed", "error": f"{type(e).__name__}: {e}"[:500]}
        summary["core"] = core
        results.put(("done", wid, index, summary))


def _retime(task: Task, spec: CollectSpec) -> dict[str, Any]:
    """Re-measure a graph's configs (same seed, so the same configs) without writing."""
    _, report = measure_program(task.program, task.kind, task.source, spec.program_kwargs,
                                spec.num_configs, spec.seed, spec.protocol)
    return {"task": asdict(task), "path": str(task.path(spec.out)), "status": "repeat",
            "runtime_ns": report.summary()["runtime_ns"]}


# ------------------------------------------------------------------ the pool


def run_pool(spec: CollectSpec, todo: list[tuple[Task, bool]],
             on_done: Callable[[dict[str, Any]], None],
             progress: Callable[[int], Any] | None = None) -> None:
    """Run tasks on one pinned worker per core, handing each worker one task at a time;
    a worker that dies fails its task and is replaced. `on_done(summary)` is called in
    this process as each task ends."""
    if not todo:
        return
    cores = sorted(os.sched_getaffinity(0))
    n = min(spec.workers or len(cores), len(todo))
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    spec_d = spec_dict(spec)
    inboxes: dict[int, Any] = {}

    def start(wid: int):
        inboxes[wid] = ctx.Queue()
        p = ctx.Process(target=_worker, args=(cores[wid % len(cores)], spec_d, inboxes[wid],
                                              results, wid), daemon=True)
        p.start()
        return p

    procs = {w: start(w) for w in range(n)}
    holding: dict[int, int | None] = dict.fromkeys(procs)
    next_task = done = 0

    def finish(summary: dict[str, Any]) -> None:
        nonlocal done
        on_done(summary)
        done += 1
        if progress:
            progress(1)

    try:
        while done < len(todo):
            for w in procs:
                if holding[w] is None and next_task < len(todo):
                    inboxes[w].put((next_task, *todo[next_task]))
                    holding[w], next_task = next_task, next_task + 1
            try:
                msg = results.get(timeout=0.5)
            except queue.Empty:
                msg = None
            if msg is not None and msg[0] == "done" and holding.get(msg[1]) == msg[2]:
                holding[msg[1]] = None
                finish(msg[3])
            for w, p in list(procs.items()):
                if p.is_alive() or holding[w] is None:
                    continue
                task = todo[holding[w]][0]
                holding[w] = None
                finish({"task": asdict(task), "path": str(task.path(spec.out)),
                        "status": "crashed", "error": f"worker died (exit code {p.exitcode})"})
                procs[w] = start(w)
    finally:
        for w in procs:
            inboxes[w].put(None)
        for p in procs.values():
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


# ------------------------------------------------------------------ the whole run


def read_log(out: str | Path) -> dict[str, dict[str, Any]]:
    """The last logged summary of each graph path (repeats are kept apart)."""
    log = Path(out) / "log.jsonl"
    entries: dict[str, dict[str, Any]] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            try:
                e = json.loads(line)
            except json.JSONDecodeError:  # a line cut off by a kill
                continue
            if e.get("status") != "repeat":
                entries[e["path"]] = e
    return entries


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


def pending_tasks(spec: CollectSpec, tasks: list[Task]) -> list[Task]:
    """Tasks with no written graph (and, unless retrying, no logged failure)."""
    logged = read_log(spec.out)
    out = []
    for t in tasks:
        p = t.path(spec.out)
        if p.exists():
            continue
        if not spec.retry_failed and logged.get(str(p), {}).get("status") in ("failed",
                                                                             "crashed"):
            continue
        out.append(t)
    return out


@dataclass
class CollectResult:
    """What a run did, plus the state of the whole collection after it."""

    written: int
    failed: int
    skipped: int
    remaining: int
    manifests: dict[str, dict[str, Any]]  # collection name -> its manifest


def collect(spec: CollectSpec, progress: Callable[[int, int], Callable[[int], Any]] | None = None,
            repeat: int = 0, command: str | None = None) -> CollectResult:
    """Measure every pending graph of `spec` (up to `spec.limit`), then write the manifest.

    `progress(total, initial)` may return a callback taking a count of finished graphs
    (the CLI passes a tqdm bar). `repeat` re-times that many graphs per kind.
    """
    out = Path(spec.out)
    out.mkdir(parents=True, exist_ok=True)
    tasks = plan_tasks(spec)
    if spec.shard:  # this machine's part of the whole plan, recorded in OUT/shard.json
        tasks = take_shard(spec, tasks)
    todo = pending_tasks(spec, tasks)
    skipped = len(tasks) - len(todo)
    if spec.limit:
        todo = todo[:spec.limit]
    counts = {"ok": 0, "failed": 0}

    def on_done(summary: dict[str, Any]) -> None:
        _append_log(out, summary)
        counts["ok" if summary["status"] == "ok" else "failed"] += 1

    tick = progress(len(tasks), skipped) if progress else None
    run_pool(spec, [(t, False) for t in todo], on_done, tick)
    noise = measure_noise(spec, repeat, progress) if repeat else None
    manifests = write_manifest(spec, tasks, noise, command)
    remaining = len(pending_tasks(spec, tasks))
    return CollectResult(counts["ok"], counts["failed"], skipped, remaining, manifests)


def measure_noise(spec: CollectSpec, per_kind: int,
                  progress: Callable[[int, int], Callable[[int], Any]] | None = None
                  ) -> dict[str, Any]:
    """Re-time `per_kind` written graphs of each kind in fresh processes; τ per graph."""
    from graphcost.eval.metrics import kendall_tau

    logged = read_log(spec.out)
    chosen: list[Task] = []
    for kind in spec.kinds:
        done = [e for e in logged.values() if e["status"] == "ok" and e["task"]["kind"] == kind]
        chosen += [Task(**e["task"]) for e in sorted(done, key=lambda e: e["path"])[:per_kind]]
    repeats: list[dict[str, Any]] = []
    tick = progress(len(chosen), 0) if progress else None
    run_pool(spec, [(t, True) for t in chosen], repeats.append, tick)
    graphs = []
    for r in repeats:
        first = logged.get(r["path"])
        if r.get("status") != "repeat" or first is None:
            continue
        a = np.asarray(first["runtime_ns"], dtype=np.float64)
        b = np.asarray(r["runtime_ns"], dtype=np.float64)
        both = np.isfinite(a) & np.isfinite(b)
        if both.sum() >= 2:
            graphs.append({"path": r["path"], "kind": r["task"]["kind"], "configs": int(both.sum()),
                           "tau": kendall_tau(a[both], b[both])})
    by_kind = {k: float(np.nanmean([g["tau"] for g in graphs if g["kind"] == k]))
               for k in spec.kinds if any(g["kind"] == k for g in graphs)}
    noise = {"graphs": graphs, "mean_tau_by_kind": by_kind,
             "mean_tau": float(np.nanmean([g["tau"] for g in graphs])) if graphs else None}
    (Path(spec.out) / "noise.json").write_text(json.dumps(noise, indent=1))
    return noise


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


def write_manifest(spec: CollectSpec, tasks: list[Task], noise: dict[str, Any] | None,
                   command: str | None = None) -> dict[str, dict[str, Any]]:
    """`manifest.json` in each collection's folder: how it was made and what it holds."""
    import jax
    import jaxlib

    logged = read_log(spec.out)
    if noise is None and (Path(spec.out) / "noise.json").exists():
        noise = json.loads((Path(spec.out) / "noise.json").read_text())
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
        ok = [e for e in entries if e["status"] == "ok"]
        samples = sum(len(e["kept"]) for e in ok)
        seconds = sum(e["time_s"] for e in ok)
        m = dict(common, collection=collection_name(kind), splits=splits,
                 families={s: sorted({family_of(t.program) for t in mine if t.split == s})
                           for s in SPLITS},
                 graphs_failed=sorted(e["path"] for e in entries if e["status"] != "ok"),
                 configs_measured=samples,
                 configs_failed=sum(len(e.get("failed", [])) for e in ok),
                 samples_per_minute_per_core=round(60 * samples / seconds, 1) if seconds else None,
                 median_spread=float(np.median([e["median_spread"] for e in ok])) if ok else None,
                 runtime_max_over_min_median=(float(np.median([e["runtime_max_over_min"]
                                                               for e in ok])) if ok else None))
        if noise is not None and kind in noise["mean_tau_by_kind"]:
            m["noise_ceiling_tau"] = noise["mean_tau_by_kind"][kind]
        folder = collection_dir(spec.out, kind)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "manifest.json").write_text(json.dumps(m, indent=1))
        manifests[m["collection"]] = m
    return manifests


def measure_program(program: str, kind: str, source: str = DEFAULT_PROGRAMS,
                    program_kwargs: dict[str, Any] | None = None, num_configs: int = 16,
                    seed: int = 0, protocol: Protocol | None = None, core: int | None = None):
    """Measure one named program in this process: (graph or None, MeasureReport)."""
    from graphcost.xla.measure import measure_layout, measure_options, pin_to_core

    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose from {list(KINDS)}")
    if core is not None:
        pin_to_core(core)
    programs = program_table(source, program_kwargs or {})
    if program not in programs:
        raise ValueError(f"no program {program!r} in {source}; e.g. {sorted(programs)[:5]}")
    fn, args = programs[program]
    if kind == "options":
        return measure_options(program, fn, args, num_configs, seed, protocol)
    return measure_layout(program, fn, args, kind.split(":")[1], num_configs, seed, protocol)
