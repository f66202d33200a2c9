"""The winners' scores paired per graph with graphcost's leave-family-out results on the
same folds: each side's mean Kendall τ, and the first side minus each other side, with
bootstrap 95% intervals over graphs.

    python peers/pair.py DATA NAME=GLOB NAME=GLOB ...

DATA is the collection (graphcost/sample/npz/layout/cpu/default). Each NAME=GLOB is one
side and the JSON files of its results: `graphcost crossval --json` results, or a
winner's per-config scores ({file: scores}, config order, higher = slower, as both
winners rank). With several seeds, a glob matches every seed's files: a graph's τ is its
mean over the seeds, and only graphs every side scored in every one of its files count.
"""

from __future__ import annotations

import glob
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from graphcost.stats import bootstrap_ci, kendall_tau


def side_taus(pattern: str, runtime: dict[str, np.ndarray]) -> tuple[dict[str, float], int]:
    """{graph: mean τ over the seeds} and how many seeds the files of `pattern` hold."""
    files = sorted(glob.glob(pattern))
    taus: dict[str, list[float]] = defaultdict(list)
    seeds = defaultdict(set)
    for f in files:
        result = json.loads(Path(f).read_text())
        if "graphs" in result:  # a crossval result
            seed = result["seed"]
            scored = {n: g["kendall_tau"] for n, g in result["graphs"].items()}
        else:  # a winner's scores: one seed's folds share the path up to foldN
            seed = f.split("/fold")[0]
            scored = {Path(n).stem: kendall_tau(np.asarray(s), runtime[Path(n).stem])
                      for n, s in result.items()}
        for name, tau in scored.items():
            taus[name].append(tau)
            seeds[name].add(seed)
    runs = len({s for v in seeds.values() for s in v})
    return {n: float(np.mean(t)) for n, t in taus.items() if len(seeds[n]) == runs}, runs


def main(data: str, sides: list[str]) -> None:
    runtime = {f.stem: np.load(f)["config_runtime"] for f in Path(data).glob("*/*.npz")}
    taus, runs = {}, {}
    for spec in sides:
        label, pattern = spec.split("=", 1)
        taus[label], runs[label] = side_taus(pattern, runtime)
        if not taus[label]:
            sys.exit(f"{label}: no scored graph in {pattern}")
    names = sorted(set.intersection(*(set(t) for t in taus.values())))
    names = [n for n in names if not any(np.isnan(t[n]) for t in taus.values())]
    print(f"{len(names)} graphs scored by every side")
    for label, t in taus.items():
        print(f"  {label}: τ {np.mean([t[n] for n in names]):.3f} ({runs[label]} seeds)")
    first, *others = taus
    for label in others:
        mean, lo, hi = bootstrap_ci(np.asarray([taus[first][n] - taus[label][n] for n in names]))
        print(f"  {first} − {label}: {mean:+.3f} [{lo:+.3f}, {hi:+.3f}]")


if __name__ == "__main__":
    if len(sys.argv) < 4 or not all("=" in a for a in sys.argv[2:]):
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
