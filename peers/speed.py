"""Training speed and peak memory of graphcost's ranker and the two winners, on one fold,
interleaved on one core.

    python peers/speed.py FOLD_DIR [--search default] [--epochs 2 5] [--rounds 3] [--core 1]
                          [--sides graphcost "1st place" "2nd place" "graphcost+trim"
                                   "graphcost+tcache"]
                          [--trim-every N] [--json FILE]

Each side trains on the fold's training graphs as a whole command, twice: for a few
epochs and for more. The cost of one epoch is the difference of the two wall times over
the difference of the epochs, so start-up, data loading and the final prediction, paid
once by both, cancel. An epoch is one pass over the training graphs in each side's own
recipe, with no evaluation inside the run (graphcost: every config of a graph per step,
given the training split alone, so it validates nothing; 1st place: every config, as their
own script evaluates every 2,000 steps; 2nd place: 10 configs a graph per step, so 32
iterations for 128 graphs, and it validates nothing at this budget). With `--validate`
graphcost validates after each epoch and the 1st place evaluates after each epoch, as
each does in its recipe, and prediction speed is read from both: configs scored a second
on the fold's early-stopping graphs (graphcost's `valid_configs / valid_seconds` in
metrics.jsonl; the 1st place's `eval_runtime` on every config of those graphs).
Rounds rotate the order of the sides. Peak memory is the largest summed proportional set
size of a command's whole process tree (the 2nd place's loader runs two worker
processes), sampled every 50 ms. Run with graphcost's `.venv`; the winners' environment is $PEERS
(peers/README.md). Timings mean something only on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

HERE = Path(__file__).resolve().parent
GRAPHCOST = HERE.parent / ".venv/bin/graphcost"
PYTHON = HERE.parent / ".venv/bin/python"
#: a graph's configs per step; "graphcost+trim" is graphcost with glibc's malloc_trim after
#: every --trim-every steps (peers/trim_run.py), to measure what glibc keeps;
#: "graphcost+tcache" is graphcost with glibc's per-thread cache of freed blocks back at
#: glibc's default (the `graphcost` command turns it off: graphcost/launch.py)
CONFIGS_PER_STEP = {"graphcost": 24, "1st place": 24, "2nd place": 10, "graphcost+trim": 24,
                    "graphcost+tcache": 24}
#: glibc's own default of the cache the `graphcost` command turns off
GLIBC_DEFAULT_TCACHE = "glibc.malloc.tcache_count=7"
DEFAULT_SIDES = ["graphcost", "1st place", "2nd place"]


def tree_peak(proc: subprocess.Popen) -> int:
    """Wait for `proc`; the peak of its process tree's summed proportional set size (a
    page shared by k processes counts 1/k in each, so forked workers are not counted
    twice), in bytes."""
    root, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            procs = [root, *root.children(recursive=True)]
            peak = max(peak, sum(p.memory_full_info().pss for p in procs))
        except psutil.Error:
            pass  # a process ended between listing and reading
        time.sleep(0.05)
    return peak


def train_only(fold: Path, search: str, tmp: Path) -> Path:
    """A collection holding the fold's training split alone (a link to it)."""
    data = tmp / "train-only/npz/layout/xla" / search
    data.mkdir(parents=True, exist_ok=True)
    (data / "train").symlink_to(fold / "npz_all/npz/layout/xla" / search / "train")
    return data


def command(side: str, fold: Path, search: str, epochs: int, out: Path, core: int,
            train_graphs: int, data: Path, validate: bool,
            trim_every: int = 1) -> tuple[list[str], dict]:
    """The side's training command on the fold; graphcost trains on collection `data`."""
    env = {**os.environ, "SEARCH": search, "CORE": str(core)}
    if side.startswith("graphcost"):
        cli = ([str(PYTHON), str(HERE / "trim_run.py"), str(trim_every)]
               if side == "graphcost+trim" else [str(GRAPHCOST)])
        if side == "graphcost+tcache":
            env["GLIBC_TUNABLES"] = GLIBC_DEFAULT_TCACHE
        return (["taskset", "-c", str(core), *cli, "train", str(data), "--out", str(out),
                 "--epochs", str(epochs)], env)
    if side == "1st place":
        if not validate:
            env["FIRST_ARGS"] = ("--evaluation_strategy=no --save_strategy=no "
                                 "--load_best_model_at_end=false")
        return [str(HERE / "first_fold.sh"), str(fold), str(out), str(epochs)], env
    iterations = epochs * -(-train_graphs // 4)  # their batch: 4 graphs
    return [str(HERE / "second_fold.sh"), str(fold), str(out), str(iterations)], env


def prediction_speed(side: str, out: Path, valid_configs: int) -> list[float]:
    """Configs scored a second in each evaluation of a `--validate` run (none for the 2nd
    place, which validates every 2,000 iterations)."""
    if side.startswith("graphcost"):
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        return [r["valid_configs"] / r["valid_seconds"] for r in rows]
    if side == "1st place":
        runtimes = re.findall(r"'eval_runtime': ([0-9.]+)", Path(f"{out}.log").read_text())
        return [valid_configs / float(t) for t in runtimes]
    return []


def slug(side: str) -> str:
    """A side's name as a file name: "1st place" → "1stplace"."""
    return re.sub(r"\W", "", side)


def split_configs(split: Path) -> int:
    """Configs in a split's graphs."""
    total = 0
    for f in split.glob("*.npz"):
        with np.load(f) as arrays:
            total += int(arrays["config_runtime"].size)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fold", type=Path)
    parser.add_argument("--search", default="default", choices=["default", "random"])
    parser.add_argument("--epochs", type=int, nargs=2, default=[2, 5])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--core", type=int, default=1)
    parser.add_argument("--sides", nargs="+", default=DEFAULT_SIDES,
                        choices=list(CONFIGS_PER_STEP),
                        help="the graphcost sides alone need no $PEERS")
    parser.add_argument("--trim-every", type=int, default=1,
                        help="graphcost+trim: optimiser steps between malloc_trim calls")
    parser.add_argument("--validate", action="store_true",
                        help="graphcost validates and the 1st place evaluates after each "
                             "epoch, as their recipes do; prediction speed is read from both")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.trim_every < 1:
        parser.error(f"--trim-every {args.trim_every}: give 1 or more steps between trims")
    train = args.fold / "npz_all/npz/layout/xla" / args.search / "train"
    train_graphs = len(list(train.glob("*.npz")))
    if not train_graphs:
        parser.error(f"{train}: no training graphs (make the fold with peers/make_fold.py)")
    sides = args.sides
    wall = {s: {e: [] for e in args.epochs} for s in sides}
    predict = {s: [] for s in sides}
    valid_configs = split_configs(train.parent / "valid") if args.validate else 0
    peak = {s: 0 for s in sides}
    with tempfile.TemporaryDirectory() as tmp:
        data = (args.fold / "npz_all/npz/layout/xla" / args.search if args.validate
                else train_only(args.fold, args.search, Path(tmp)))
        for r in range(args.rounds):
            for side in sides[r % len(sides):] + sides[:r % len(sides)]:
                for epochs in args.epochs:
                    out = Path(tmp) / f"{slug(side)}-{r}-{epochs}"
                    cmd, env = command(side, args.fold, args.search, epochs, out, args.core,
                                       train_graphs, data, args.validate, args.trim_every)
                    start = time.perf_counter()
                    with open(f"{out}.log", "w") as log:
                        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
                        peak[side] = max(peak[side], tree_peak(proc))
                    seconds = time.perf_counter() - start
                    if proc.returncode:
                        tail = Path(f"{out}.log").read_text().splitlines()[-15:]
                        raise SystemExit("\n".join([f"{side} failed ({proc.returncode}):", *tail]))
                    wall[side][epochs].append(seconds)
                    if args.validate:
                        predict[side] += prediction_speed(side, out, valid_configs)
                    print(f"round {r + 1}: {side}, {epochs} epochs, {seconds:.1f} s", flush=True)
    lo, hi = args.epochs
    rows = {}
    for side in sides:
        pairs = zip(wall[side][lo], wall[side][hi], strict=True)
        per_epoch = [(b - a) / (hi - lo) for a, b in pairs]
        configs = train_graphs * CONFIGS_PER_STEP[side]
        rows[side] = {"s_per_epoch": statistics.median(per_epoch), "per_epoch_rounds": per_epoch,
                      "configs_per_epoch": configs, "peak_pss_gb": peak[side] / 1e9}
        rows[side]["train_configs_per_s"] = configs / rows[side]["s_per_epoch"]
        if predict[side]:
            rows[side]["predict_configs_per_s"] = statistics.median(predict[side])
    mine = rows[sides[0]]
    print(f"{train_graphs} training graphs, layout:cpu:{args.search}, core {args.core}")
    for side, row in rows.items():
        # the first side's configs/s over this side's, of medians and round by round (the
        # sides of a round ran back to back, so a busier round slows both)
        ratio = mine["train_configs_per_s"] / row["train_configs_per_s"]
        row["ratio_rounds"] = [(mine["configs_per_epoch"] / a) / (row["configs_per_epoch"] / b)
                               for a, b in zip(mine["per_epoch_rounds"], row["per_epoch_rounds"],
                                               strict=True)]
        print(f"  {side:14s} {row['s_per_epoch']:6.2f} s/epoch "
              f"(rounds {', '.join(f'{x:.2f}' for x in row['per_epoch_rounds'])}), "
              f"{row['train_configs_per_s']:6.0f} configs/s, ×{ratio:.2f} the first side's time "
              f"per config (rounds {', '.join(f'{x:.2f}' for x in row['ratio_rounds'])}), "
              f"peak {row['peak_pss_gb']:.2f} GB"
              + (f", predicts {row['predict_configs_per_s']:.0f} configs/s"
                 if "predict_configs_per_s" in row else ""))
    if args.json:
        args.json.write_text(json.dumps({"train_graphs": train_graphs, "search": args.search,
                                         "epochs": args.epochs, "validate": args.validate,
                                         "sides": rows}, indent=1))


if __name__ == "__main__":
    main()
