"""The log of a collection run, `OUT/log.jsonl`, and what a restart reads from it.

Every finished graph, whichever process or machine measured it, is written and logged
here by the one process that keeps the log (`record`), so a killed run loses at most
the graphs in progress: a restart logs graphs whose line a kill cut off
(`log_unlogged`) and skips every graph written or logged as failed (`pending_tasks`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from graphcost.atomic import atomic_open
from graphcost.stats import random_pick_score
from graphcost.xla.plan import CollectSpec, Task


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
    marked `recovered`; its compile and timing seconds are lost (0). A file cannot tell
    running out of distinct plans from failed configs, so a graph with fewer distinct
    executables than asked for counts as `exhausted`."""
    from graphcost.data.noise import file_noise_tau
    from graphcost.formats import read_graph
    from graphcost.formats.npz import read_extra

    path = task.path(spec.out)
    g = read_graph(path)
    runtime = np.asarray(g.config_runtime, dtype=np.float64)
    prints = read_extra(path).get("config_fingerprint")
    distinct = int(np.unique(prints).size) if prints is not None else g.num_configs
    return {"task": asdict(task), "path": str(path), "status": "ok", "recovered": True,
            "name": task.program, "kind": task.kind, "kept": g.num_configs,
            "distinct": distinct, "exhausted": distinct < spec.num_configs,
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
