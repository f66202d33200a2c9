"""`graphcost bench replica`: a published TpuGraphs collection at full size
(`data.replica`), and the user's whole path on it, each step in its own process with
its own peak memory. `--graphs K` writes K graphs of the train and valid splits (each
split's largest included) instead of all, and the whole test split.

The path (`run_path`): `info`, `validate`, one epoch of `train` for the default ranker
and for the official baseline, `evaluate` on the validation split with 1,000 configs per
graph (`--eval-indices`, as the official evaluation) and `submit` on the test split. The
ranker trains full graphs where the memory check lets it, otherwise GST, as `train`'s
refusal advises; the official baseline trains full graphs only (its own
back-propagation window bounds its memory). Each step runs as `graphcost …` in a child
process that reports its own VmHWM at exit (ru_maxrss would carry the parent's peak
through fork and exec). Whole-collection figures are projected from the replica's
graphs: each step's time by what its work grows with (`SCALES_WITH`), the read cache
exactly from the shapes.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import runpy
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphcost import children
from graphcost.atomic import write_json
from graphcost.bench import BenchResult
from graphcost.data.replica import (
    PUBLISHED,
    SPLITS,
    Shape,
    chosen,
    collection_dir,
    collection_shapes,
    published,
    write_replica,
)
from graphcost.errors import UserError

# --------------------------------------------------------------------------- the path


@dataclass
class StepResult:
    step: str
    seconds: float
    peak_rss_mb: float
    returncode: int
    note: str = ""  # a failed step: the end of its output
    epoch_s: float | None = None  # a training: seconds of its last epoch's steps
    peak_gpu_mb: float | None = None  # a step that ran on CUDA: torch's peak allocation
    cache: str = "compact"  # the read cache's form (`CACHES`)


def run_step(step: str, args: Sequence[str], env: dict[str, str], log_dir: Path) -> StepResult:
    """`graphcost ARGS` in a child process; its wall time, its own peak RSS and its exit
    status (negative: killed by that signal), and its peak CUDA allocation where it used
    a GPU. Its output goes to LOG_DIR/STEP.log."""
    log_dir.mkdir(parents=True, exist_ok=True)
    peak_file = log_dir / f"{step}.peak"
    peak_file.unlink(missing_ok=True)
    t = time.perf_counter()
    with open(log_dir / f"{step}.log", "w") as log:
        log.write("$ graphcost " + " ".join(args) + "\n")
        log.flush()
        rc = children.run("graphcost.bench.replica", [str(peak_file), *args], env=env,
                          stdout=log, stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - t
    peaks = json.loads(peak_file.read_text()) if peak_file.exists() else {}
    gpu = peaks.get("gpu")
    return StepResult(step, seconds, peaks.get("rss", math.nan) / 2**20, rc,
                      peak_gpu_mb=None if gpu is None else gpu / 2**20)


def log_tail(log_dir: Path, step: str, lines: int = 3) -> str:
    text = (log_dir / f"{step}.log").read_text(errors="replace").strip().splitlines()
    return " | ".join(text[-lines:])


def write_eval_indices(coll_dir: Path, kind: str, path: Path, per_graph: int = 1000,
                       seed: int = 0) -> Path:
    """{graph: sorted config ids} for every validation graph, `per_graph` of them, in the
    form of the official `baselines/layout/eval_indices/*.json`."""
    from graphcost.formats.npz import member_header

    rng = np.random.default_rng(seed)
    indices = {}
    for f in sorted((coll_dir / "valid").glob("*.npz")):
        c = member_header(f, "node_config_feat" if kind == "layout" else "config_feat")[0][0]
        indices[f.stem] = sorted(rng.choice(c, min(per_graph, c), replace=False).tolist())
    path.write_text(json.dumps(indices))
    return path


#: the read cache's forms: graphcost's compact one, and the plain one it replaced (every
#: layout file's configs uncompressed; GRAPHCOST_COMPACT_CACHE=0), kept to compare
CACHES = ("compact", "plain")


def run_path(root: Path, name: str, work: Path, epochs: int = 1, sets: Sequence[str] = (),
             on_step: Callable[[StepResult], None] = lambda _: None,
             device: str = "cpu", caches: Sequence[str] = ("compact",)
             ) -> dict[str, list[StepResult]]:
    """Every step of the user's path on the collection at `root`, once per read-cache
    form of `caches`, interleaved step by step; the forms take turns going first, so
    neither always finds the files in the page cache. Form F's read cache lives in
    WORK/F/cache, its logs in WORK/F/logs, its trained models in WORK/F/runs. `sets` are
    `--set KEY=VALUE` training settings given to both trainings; trainings, evaluations
    and the submission run on `device`."""
    paths = {c: _path(root, name, work / c, epochs, sets, device) for c in caches}
    pending = {c: next(p) for c, p in paths.items()}
    results: dict[str, list[StepResult]] = {c: [] for c in caches}
    turn = 0
    while pending:
        for cache in (list(pending)[::-1] if turn % 2 else list(pending)):
            label, args, run = pending[cache]
            logs = work / cache / "logs"
            env = {**os.environ, "GRAPHCOST_CACHE": str(work / cache / "cache"),
                   "GRAPHCOST_COMPACT_CACHE": "1" if cache == "compact" else "0"}
            r = run_step(label, args, env, logs)
            r.cache = cache
            if r.returncode != 0:
                r.note = log_tail(logs, label)
            elif run is not None:
                r.epoch_s = last_epoch_seconds(run)
            results[cache].append(r)
            on_step(r)
            try:
                pending[cache] = paths[cache].send(r)
            except StopIteration:
                del pending[cache]
        turn += 1
    return results


def _path(root: Path, name: str, work: Path, epochs: int, sets: Sequence[str], device: str
          ) -> Generator[tuple[str, list[str], Path | None], StepResult, None]:
    """The path's steps one at a time, as (label, `graphcost` arguments, the run folder of
    a training or None); each is sent back its result."""
    from graphcost.models.registry import official_baseline

    kind = name.split(":")[0]
    coll = collection_dir(root, name)
    runs = work / "runs"
    yield "info", ["info", str(coll)], None
    yield "validate", ["validate", str(coll)], None
    models = {}
    for model in ("ranker", official_baseline(kind)):
        label = f"train {model}"
        args = ["train", str(coll), "--model", model, "--out", str(runs / model),
                "--overwrite", "--epochs", str(epochs), "--device", device]
        args += [a for kv in sets for a in ("--set", kv)]
        r = yield label, args, runs / model
        if r.returncode != 0 and "memory budget" in r.note and model == "ranker":
            # as the refusal advises; the baselines have no segment training
            r = yield label + " (gst)", [*args, "--set", "mode=gst"], runs / model
        if r.returncode == 0:
            models[model] = runs / model / "model.pt"
    indices = write_eval_indices(coll, kind, work / "eval_indices.json")
    for model, path in models.items():
        yield (f"evaluate {model}",
               ["evaluate", str(path), str(coll), "--split", "valid", "--eval-indices",
                str(indices), "--json", str(work / f"eval_{model}.json"), "--device", device],
               None)
    if "ranker" in models:
        yield ("submit ranker", ["submit", str(root), "-m", f"{name}={models['ranker']}",
                                 "--out", str(work / "submission.csv"), "--device", device],
               None)


def last_epoch_seconds(run: Path) -> float | None:
    """Seconds of the last epoch's training steps, from the run's metrics.jsonl: with two
    epochs or more, a warm one (a GPU's first steps also build its kernels)."""
    from graphcost.eval.report import read_history

    history = read_history(run)
    return float(history[-1]["seconds"]) if history else None


def disk_bytes(path: Path) -> int:
    """Bytes the files under `path` take."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


@dataclass
class ReplicaResult(BenchResult):
    """`bench replica`'s figures: a `summarise` row per collection, this run's and those
    an earlier run in the same OUT measured."""

    rows: dict[str, dict[str, Any]]  # collection name -> its row

    def to_json(self) -> dict[str, dict[str, Any]]:
        """The rows by collection name: what OUT/replica.json holds."""
        return self.rows


def bench_replica(names: Sequence[str], out: str | Path, per_split: int = 2, epochs: int = 1,
                  sets: Sequence[str] = (), seed: int = 0, keep: bool = False,
                  log: Callable[[str], None] = print, device: str = "cpu",
                  max_configs: int = 0, caches: Sequence[str] = ("compact",)
                  ) -> ReplicaResult:
    """Write each collection's replica (default: all five) under OUT/data and run the path
    on it (`device`: where it trains and scores) once per read-cache form of `caches`,
    interleaved (`run_path`), logging each step as it ends; its files and read caches
    (the largest things on disk) are removed after each collection unless `keep`. The
    rows go to OUT/replica.json as each collection ends, beside those of collections an
    earlier run there measured. `max_configs`: as `chosen`."""
    from graphcost.models.model import check_device

    out = Path(out)
    names = names or tuple(PUBLISHED)
    for name in names:
        published(name)  # refuse an unknown name before any work
    check_device(device)  # no GPU: refused before a replica is written
    shapes = {name: collection_shapes(name, seed) for name in names}
    subsets = {name: chosen(shapes[name], per_split, seed, max_configs) for name in names}
    check_disk(out, subsets, keep, caches)  # every collection, before the first is written
    log(f"{'collection':<20} {HEADER}")
    report = out / "replica.json"  # rows of collections run before stay, others are added
    rows = json.loads(report.read_text()) if report.exists() else {}
    for name in names:
        subset = subsets[name]
        root, work = out / "data", out / "work" / name.replace(":", "_")
        t = time.perf_counter()
        write_replica(root, name, subset, seed, progress=True)
        written = time.perf_counter() - t
        log(f"{name}: wrote {len(subset)} graphs in {written:.0f} s")
        steps = run_path(root, name, work, epochs, sets,
                         lambda r, n=name: log(f"{n:<20} {format_step(r)}"), device, caches)
        cache_bytes = {c: disk_bytes(work / c / "cache") for c in caches}
        rows[name] = summarise(name, shapes[name], subset, steps, cache_bytes,
                               disk_bytes(collection_dir(root, name)), written, max_configs)
        rows[name]["device"] = device
        write_json(rows, report)
        if not keep:  # all can be made again; the next collection needs the disk
            for c in caches:
                shutil.rmtree(work / c / "cache", ignore_errors=True)
            shutil.rmtree(collection_dir(root, name), ignore_errors=True)
    return ReplicaResult(rows)


def replica_bytes(name: str, subset: Sequence[Shape], caches: Sequence[str] = ("compact",)
                  ) -> int:
    """About the disk a replica's files and read caches take. The files hold a layout
    file's configs in about a tenth of their bytes (deflate packs random configs ~27×);
    the plain cache holds them uncompressed, the compact one in 2 bytes of 72. Tile files
    are read whole, never cached; deflate packs their arrays 12–16× (measured), so an
    eighth of them is counted, with a 4 KiB block per file."""
    if name.startswith("layout"):
        cached = {"compact": sum(s.compact_bytes for s in subset),
                  "plain": sum(s.config_bytes for s in subset)}
        return round(sum(s.config_bytes for s in subset) * 0.1 +
                     sum(cached[c] for c in caches))
    return sum(s.tile_bytes // 8 + 4096 for s in subset)


def check_disk(out: Path, subsets: dict[str, Sequence[Shape]], keep: bool = False,
               caches: Sequence[str] = ("compact",)) -> None:
    """Refuse, before writing anything, replicas that would not fit the free disk at
    `out`: each collection's files and cache are removed before the next is written, so
    the largest must fit, or with `keep` all of them together."""
    need = {name: replica_bytes(name, subset, caches) for name, subset in subsets.items()}
    total = sum(need.values()) if keep else max(need.values())
    where = out
    while not where.exists():  # the folder may not exist yet: nothing is made to ask
        where = where.parent
    free = shutil.disk_usage(where).free
    if total > free:
        largest = max(need, key=need.__getitem__)
        what = (f"the {len(need)} replicas kept (--keep) need" if keep and len(need) > 1
                else f"the {largest} replica ({len(subsets[largest])} graphs) needs")
        raise UserError(f"{what} about {_size(total)} at {out} for files and read cache; "
                        f"{_size(free)} are free there. Write fewer graphs per split "
                        "(--graphs) or choose another --out.")


def _size(n: float) -> str:
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.0f} {unit}"
    return f"{n:,.0f} bytes"


def summarise(name: str, shapes: Sequence[Shape], subset: Sequence[Shape],
              steps: dict[str, Sequence[StepResult]], cache_bytes: dict[str, int],
              file_bytes: int, write_seconds: float, max_configs: int = 0) -> dict:
    """The collection's row: its graphs and files, and per read-cache form (`caches`) its
    steps, its cache, and projections to the whole collection: an epoch
    (`projected_epoch_s`) and each step's wall time (`projected_s`), scaled by what the
    step's work grows with (`SCALES_WITH`) over the whole collection against the
    replica's graphs; none from graphs whose configs were capped (`max_configs`)."""
    kind = name.split(":")[0]

    def ratio(step: str) -> float:
        splits, attr = SCALES_WITH[step.split()[0]]
        if attr == "config_bytes" and kind == "tile":
            attr = "configs"
        whole, part = ([sum(1 if attr == "graphs" else getattr(s, attr)
                            for s in of if s.split in splits) for of in (shapes, subset)])
        return whole / max(1, part)

    def form(cache: str) -> dict:
        done = [r for r in steps[cache] if r.returncode == 0 and not max_configs]
        out = {"steps": [asdict(r) for r in steps[cache]],
               "cache_mb": cache_bytes[cache] / 2**20,
               "projected_epoch_s": {r.step: r.epoch_s * ratio(r.step) for r in done
                                     if r.epoch_s is not None},
               "projected_s": {r.step: r.seconds * ratio(r.step) for r in done}}
        if kind == "layout":
            attr = "compact_bytes" if cache == "compact" else "config_bytes"
            out["cache_mb_expected"] = sum(getattr(s, attr) for s in subset) / 2**20
            out["projected_cache_gb"] = sum(getattr(s, attr) for s in shapes) / 2**30
        return out

    return {
        "graphs": {s: sum(1 for x in subset if x.split == s) for s in SPLITS},
        "graphs_published": {s: sum(1 for x in shapes if x.split == s) for s in SPLITS},
        "largest": {"nodes": max(s.nodes for s in subset),
                    "configs": max(s.configs for s in subset)},
        "files_mb": file_bytes / 2**20, "write_s": write_seconds,
        # the download, compressed as published: its configs dominate, so it scales as
        # validate's work does
        "projected_files_gb": file_bytes * ratio("validate") / 2**30,
        "max_configs": max_configs,
        "caches": {c: form(c) for c in steps},
    }


#: what each step's work grows with: (splits, Shape attribute summed over them)
SCALES_WITH = {"info": (SPLITS, "graphs"), "validate": (SPLITS, "config_bytes"),
               "train": (("train",), "nodes"), "evaluate": (("valid",), "nodes"),
               "submit": (("test",), "nodes")}


HEADER = (f"{'step':<28} {'cache':<8} {'wall s':>8} {'peak RSS MB':>12} {'peak GPU MB':>12}"
          "  note")


def format_step(r: StepResult) -> str:
    note = (f"FAILED ({r.returncode}) {r.note}" if r.returncode else
            f"epoch's steps {r.epoch_s:.1f} s" if r.epoch_s is not None else "")
    gpu = "" if r.peak_gpu_mb is None else f"{r.peak_gpu_mb:.0f}"
    return (f"{r.step:<28} {r.cache:<8} {r.seconds:>8.1f} {r.peak_rss_mb:>12.0f} {gpu:>12}"
            f"  {note}")


def format_summary(result: ReplicaResult) -> str:
    """Per collection: what was written, each cache form's worst peak and cache, and the
    whole-collection projections, the forms side by side."""
    lines = []
    for name, row in result.rows.items():
        g, p = row["graphs"], row["graphs_published"]
        forms = row["caches"]
        lines.append(f"{name}: {sum(g.values())} of {sum(p.values())} graphs "
                     f"(largest {row['largest']['nodes']:,} nodes, "
                     f"{row['largest']['configs']:,} configs); files {row['files_mb']:,.0f} MB")
        for cache, f in forms.items():
            worst = max((s["peak_rss_mb"] for s in f["steps"]), default=float("nan"))
            lines.append(f"  {cache} cache {f['cache_mb']:,.0f} MB; worst peak RSS "
                         f"{worst:,.0f} MB")
        if row.get("max_configs"):
            lines.append(f"  configs capped at {row['max_configs']:,}: not projected")
            continue
        lines.append("  whole collection, projected (" + " / ".join(forms) + "):")
        lines.append(f"    {'download':<26} {row['projected_files_gb']:>8.1f} GB")
        if all("projected_cache_gb" in f for f in forms.values()):
            lines.append(f"    {'read cache':<26} " + " / ".join(
                f"{f['projected_cache_gb']:.1f} GB" for f in forms.values()))
        first = next(iter(forms.values()))
        for step in first["projected_s"]:
            times = [f["projected_s"].get(step) for f in forms.values()]
            epochs = [f["projected_epoch_s"].get(step) for f in forms.values()]
            lines.append(f"    {step:<26} " + " / ".join(
                "-" if t is None else duration(t) for t in times) +
                ("" if epochs[0] is None else "  (epoch's steps " + " / ".join(
                    "-" if e is None else duration(e) for e in epochs) + ")"))
    return "\n".join(lines)


def duration(seconds: float) -> str:
    """'45 s', '12.5 min', '3.2 h'."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def _child() -> None:
    """`python -m graphcost.bench.replica PEAK_FILE ARGS…`: `graphcost ARGS…`, writing
    this process's VmHWM, and its peak CUDA allocation if it used a GPU, to PEAK_FILE
    at exit (clean or not, short of SIGKILL)."""
    from graphcost.bench import peak_bytes

    def peaks() -> str:
        torch = sys.modules.get("torch")  # imported by the step if it used one
        used = torch is not None and torch.cuda.is_initialized()
        gpu = torch.cuda.max_memory_allocated() if used else 0
        return json.dumps({"rss": peak_bytes(), "gpu": gpu or None})

    peak_file = sys.argv[1]
    atexit.register(lambda: Path(peak_file).write_text(peaks()))
    sys.argv = ["graphcost", *sys.argv[2:]]
    runpy.run_module("graphcost", run_name="__main__")  # `python -m graphcost ARGS…`


if __name__ == "__main__":
    _child()
