"""Sharded collection: N machines measure disjoint parts of one program set, then merge.

`graphcost collect OUT_I --shard I/N …` (the same options on every machine, I = 0..N−1)
plans the whole collection exactly as an unsharded run would (same programs, same family
splits), then measures only the graphs of shard I. A graph's shard comes from a stable
hash of its identity (kind, source, program): the graphs are ordered by that hash and
dealt round-robin, so the N shards differ in size by at most one, mix kinds and families,
and depend only on the planned set, never on the machine. `OUT_I/shard.json` records the
whole plan and every graph's shard.

`graphcost merge OUT OUT_0 … OUT_{N−1}` then checks that the shards come from one plan,
that every planned graph was written (or logged as failed) by its shard and that no graph
was written twice, and only then copies the graphs into one collection with one
`log.jsonl`, per-collection `manifest.json` and `summary.json` (listing each shard's
machine). Each graph is timed whole on one machine, so its configs stay comparable.
Every file is written whole or not at all, and a merge killed midway is finished by the
same command run again (`MERGING`).

The dealing (`assign_shards`, `take_shard`) lives in `graphcost.xla.plan`, below
`collect`, which applies it; this module is the merge, which builds on the run log
(`restart_log`) and the manifests (`manifest`) as `collect` does.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphcost.atomic import atomic_open, one_writer, remove_dead_writers_parts, write_json
from graphcost.errors import UserError
from graphcost.xla.manifest import write_manifest
from graphcost.xla.plan import (
    FORMAT,
    PLAN_FILE,
    CollectSpec,
    Task,
    collection_dir,
    collection_name,
)
from graphcost.xla.restart_log import read_log

#: in OUT while a merge is under way: the shard folders it merges
MERGING = ".merging"


class MergeError(UserError):
    """Shards that do not add up to one collection; lists every offending graph."""

    def __init__(self, problems: dict[str, list[str]]):
        self.problems = problems
        lines = []
        for what, items in problems.items():
            if items:
                lines.append(f"{len(items)} {what}:")
                lines += [f"  {x}" for x in items]
        super().__init__("\n".join(lines))

    @property
    def missing(self) -> list[str]:
        return self.problems.get("graphs missing", [])

    @property
    def duplicated(self) -> list[str]:
        return self.problems.get("graphs written by more than one shard", [])


@dataclass
class MergeResult:
    graphs: int  # graphs in the merged collection
    failed: int  # planned graphs that their shard logged as failed
    shards: list[str]
    manifests: dict[str, dict[str, Any]]


def _relative(task: Task) -> str:
    return task.path("").as_posix()


def _read_plan(folder: Path) -> dict[str, Any]:
    path = folder / PLAN_FILE
    if not path.exists():
        raise MergeError({"folders that are not shards (no shard.json; collect with --shard)":
                          [str(folder)]})
    plan = json.loads(path.read_text())
    if plan.get("format") != FORMAT:
        raise MergeError({"folders with an unknown shard format": [str(folder)]})
    return plan


def check_shards(folders: Sequence[str | Path]) -> tuple[list[dict[str, Any]], list[Task]]:
    """The shards' plans and the full task list; MergeError unless they add up exactly:
    one plan, every planned graph written or logged as failed by its own shard, none
    written twice, none outside the plan."""
    folders = [Path(f) for f in folders]
    if not folders:
        raise UserError("no shard folders given")
    plans = [_read_plan(f) for f in folders]
    first = plans[0]
    other = [str(f) for f, p in zip(folders, plans, strict=True)
             if (p["count"], p["spec"], p["plan"]) != (first["count"], first["spec"],
                                                       first["plan"])]
    if other:
        raise MergeError({f"shards of another plan than {folders[0]} (different options, "
                          "programs or shard count)": other})
    tasks = [Task(**e["task"]) for e in first["plan"]]
    owner = {_relative(t): e["shard"] for t, e in zip(tasks, first["plan"], strict=True)}
    given = sorted(p["index"] for p in plans)

    written: dict[str, list[str]] = {}
    failed: set[str] = set()
    for folder, plan in zip(folders, plans, strict=True):
        for f in sorted((folder / "npz").rglob("*.npz")):
            written.setdefault(f.relative_to(folder).as_posix(), []).append(
                f"{folder} (shard {plan['shard']})")
        for e in read_log(folder).values():
            rel = _relative(Task(**e["task"]))
            if e["status"] in ("failed", "crashed") and owner.get(rel) == plan["index"]:
                failed.add(rel)
    missing = [f"{rel} (shard {owner[rel]}/{first['count']}"
               + ("" if owner[rel] in given else ", whose folder was not given") + ")"
               for rel in owner if rel not in written and rel not in failed]
    problems = {
        "graphs missing": missing,
        "graphs written by more than one shard": [f"{rel}: {', '.join(where)}"
                                                  for rel, where in sorted(written.items())
                                                  if len(where) > 1],
        "graphs outside the plan": sorted(rel for rel in written if rel not in owner),
    }
    if any(problems.values()):
        raise MergeError(problems)
    return plans, tasks


def merge(out: str | Path, folders: Sequence[str | Path], command: str | None = None
          ) -> MergeResult:
    """Combine shard folders into the collection OUT (a new folder), after `check_shards`.

    OUT is then what one unsharded `collect` would have written: the graphs, one
    `log.jsonl` (each line tagged with its shard, paths under OUT), and a
    `manifest.json` per collection whose `shards` lists each shard's machine and command.
    OUT has one writer (`one_writer`); a merge into it that was killed is finished.
    """
    out, folders = Path(out), [Path(f) for f in folders]
    plans, tasks = check_shards(folders)
    with one_writer(out, "merge"):
        _begin(out, folders)
        result = _merge(out, folders, plans, tasks, command)
        (out / MERGING).unlink()
    return result


def _begin(out: Path, folders: list[Path]) -> None:
    """Mark a merge into OUT under way (`MERGING`, naming the shard folders). OUT must be
    new, or hold the unfinished merge of the same shards: then the graphs a killed merge
    copied are kept (`_copy` skips them) and its temporary files removed."""
    shards = [str(f.resolve()) for f in folders]
    marker = out / MERGING
    if marker.exists():
        before = json.loads(marker.read_text())
        if sorted(before) != sorted(shards):
            raise UserError(f"{out} holds an unfinished merge of other shard folders "
                            f"({' '.join(before)}); finish it with `graphcost merge {out} "
                            f"{' '.join(before)}`, or merge into a new folder")
        for folder in [out, *(d for d in out.rglob("*") if d.is_dir())]:
            remove_dead_writers_parts(folder)
    elif (out / "log.jsonl").exists() or (out / "npz").exists():
        raise UserError(f"{out} already holds a collection; merge into a new folder")
    write_json(shards, marker)


def _copy(src: Path, dest: Path) -> None:
    """Copy a graph file whole or not at all, with its times, unless `dest` already is
    that copy (the same size and modification time: written by a killed merge)."""
    s = src.stat()
    if dest.exists():
        d = dest.stat()
        if (d.st_size, d.st_mtime_ns) == (s.st_size, s.st_mtime_ns):
            return
    with open(src, "rb") as f, atomic_open(dest) as g:
        shutil.copyfileobj(f, g)
    shutil.copystat(src, dest)


def _merge(out: Path, folders: list[Path], plans: list[dict[str, Any]], tasks: list[Task],
           command: str | None) -> MergeResult:
    """`merge` into the held OUT."""
    count = 0
    with atomic_open(out / "log.jsonl", "w") as log:
        for folder, plan in sorted(zip(folders, plans, strict=True), key=lambda x: x[1]["index"]):
            for f in sorted((folder / "npz").rglob("*.npz")):
                _copy(f, out / f.relative_to(folder))
                count += 1
            path = folder / "log.jsonl"
            for line in (path.read_text().splitlines() if path.exists() else []):
                try:
                    e = json.loads(line)
                except json.JSONDecodeError:  # a line cut off by a kill
                    continue
                e.update(path=str(Task(**e["task"]).path(out)), shard=plan["shard"])
                log.write(json.dumps(e) + "\n")
    spec = CollectSpec(**{**plans[0]["spec"], "out": str(out)})
    manifests = write_manifest(spec, tasks, command)
    for kind in spec.kinds:  # the machines that measured, not the one that merged
        shards = []
        for folder, plan in zip(folders, plans, strict=True):
            path = collection_dir(folder, kind) / "manifest.json"
            m = json.loads(path.read_text()) if path.exists() else {}
            shards.append({"shard": plan["shard"], "folder": str(folder),
                           **{k: m.get(k) for k in ("command", "machine", "jax", "jaxlib",
                                                     "splits", "samples_per_minute_per_core")}})
        m = manifests[collection_name(kind)]
        m["shards"] = sorted(shards, key=lambda s: s["shard"])
        measured = [s["machine"] or {} for s in shards]
        m["machine"] = {"merged_on": m["machine"]["node"],
                        "nodes": sorted({str(x.get("node")) for x in measured}),
                        "cpus": sorted({str(x.get("cpu")) for x in measured})}
        write_json(m, collection_dir(out, kind) / "manifest.json")
    failed = sum(1 for e in read_log(out).values() if e["status"] != "ok")
    return MergeResult(count, failed, [p["shard"] for p in plans], manifests)
