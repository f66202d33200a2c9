"""Training speed and peak memory of graphcost's ranker and the two winners, on one fold,
interleaved on one core.

    python peers/speed.py FOLD_DIR [--search default] [--epochs 2 5] [--rounds 3] [--core 1]
                          [--sides graphcost "1st place" "2nd place"] [--json FILE]

Each side trains on the fold's training graphs as a whole command, twice: for a few
epochs and for more. The cost of one epoch is the difference of the two wall times over
the difference of the epochs, so start-up, data loading and the final prediction, paid
once by both, cancel. An epoch is one pass over the training graphs in each side's own
recipe (graphcost: every config of a graph per step, validation each epoch; 1st place:
every config, no evaluation inside the run, as their own script evaluates every 2,000
steps; 2nd place: 10 configs a graph per step, so 32 iterations for 128 graphs).
Rounds rotate the order of the sides. Peak memory is the largest summed proportional set
size of a command's whole process tree (the 2nd place's loader runs two worker
processes), sampled every 50 ms. Run with graphcost's `.venv`; the winners' environment is $PEERS
(peers/README.md). Timings mean something only on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
GRAPHCOST = HERE.parent / ".venv/bin/graphcost"
CONFIGS_PER_STEP = {"graphcost": 24, "1st place": 24, "2nd place": 10}  # a graph's configs


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


def command(side: str, fold: Path, search: str, epochs: int, out: Path, core: int,
            train_graphs: int) -> tuple[list[str], dict]:
    env = {**os.environ, "SEARCH": search, "CORE": str(core)}
    if side == "graphcost":
        data = fold / "npz_all/npz/layout/xla" / search
        return (["taskset", "-c", str(core), str(GRAPHCOST), "train", str(data), "--out", str(out),
                 "--epochs", str(epochs)], env)
    if side == "1st place":
        env["FIRST_ARGS"] = ("--evaluation_strategy=no --save_strategy=no "
                             "--load_best_model_at_end=false")
        return [str(HERE / "first_fold.sh"), str(fold), str(out), str(epochs)], env
    iterations = epochs * -(-train_graphs // 4)  # their batch: 4 graphs
    return [str(HERE / "second_fold.sh"), str(fold), str(out), str(iterations)], env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fold", type=Path)
    parser.add_argument("--search", default="default", choices=["default", "random"])
    parser.add_argument("--epochs", type=int, nargs=2, default=[2, 5])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--core", type=int, default=1)
    parser.add_argument("--sides", nargs="+", default=list(CONFIGS_PER_STEP),
                        choices=list(CONFIGS_PER_STEP), help="graphcost alone needs no $PEERS")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    train = args.fold / "npz_all/npz/layout/xla" / args.search / "train"
    train_graphs = len(list(train.glob("*.npz")))
    if not train_graphs:
        parser.error(f"{train}: no training graphs (make the fold with peers/make_fold.py)")
    sides = args.sides
    wall = {s: {e: [] for e in args.epochs} for s in sides}
    peak = {s: 0 for s in sides}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for side in sides[r % len(sides):] + sides[:r % len(sides)]:
                for epochs in args.epochs:
                    out = Path(tmp) / f"{side[:3]}-{r}-{epochs}"
                    cmd, env = command(side, args.fold, args.search, epochs, out, args.core,
                                       train_graphs)
                    start = time.perf_counter()
                    with open(f"{out}.log", "w") as log:
                        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
                        peak[side] = max(peak[side], tree_peak(proc))
                    seconds = time.perf_counter() - start
                    if proc.returncode:
                        tail = Path(f"{out}.log").read_text().splitlines()[-15:]
                        raise SystemExit("\n".join([f"{side} failed ({proc.returncode}):", *tail]))
                    wall[side][epochs].append(seconds)
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
    mine = rows[sides[0]]
    print(f"{train_graphs} training graphs, layout:cpu:{args.search}, core {args.core}")
    for side, row in rows.items():
        ratio = mine["train_configs_per_s"] / row["train_configs_per_s"]
        print(f"  {side:10s} {row['s_per_epoch']:6.2f} s/epoch "
              f"(rounds {', '.join(f'{x:.2f}' for x in row['per_epoch_rounds'])}), "
              f"{row['train_configs_per_s']:6.0f} configs/s, ×{ratio:.2f} the first side's time "
              f"per config, peak {row['peak_pss_gb']:.2f} GB")
    if args.json:
        args.json.write_text(json.dumps({"train_graphs": train_graphs, "search": args.search,
                                         "epochs": args.epochs, "sides": rows}, indent=1))


if __name__ == "__main__":
    main()
