"""The winners' scores paired per graph with graphcost's leave-family-out results on the
same folds: each side's mean Kendall τ and the differences, with bootstrap 95% intervals.

    python peers/pair.py DATA RANKER_JSON RULE_JSON NAME=SCORES_GLOB ...

DATA is the collection (graphcost/sample/npz/layout/cpu/default); RANKER_JSON and
RULE_JSON are `graphcost crossval DATA --json` results (the ranker's, a rule's);
each NAME=SCORES_GLOB names JSON files of a winner's per-config scores ({file: scores},
config order, higher = slower, as both winners rank).
"""

from __future__ import annotations

import glob
import json
import sys
from pathlib import Path

import numpy as np

from graphcost.stats import bootstrap_ci, kendall_tau


def interval(values: list[float]) -> str:
    mean, lo, hi = bootstrap_ci(np.asarray(values))
    return f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}]"


def main(data: str, ranker_json: str, rule_json: str, winners: list[str]) -> None:
    runtime = {f.stem: np.load(f)["config_runtime"] for f in Path(data).glob("*/*.npz")}
    taus = {}
    for label, path in (("graphcost ranker", ranker_json), ("rule", rule_json)):
        result = json.loads(Path(path).read_text())
        taus[label] = {n: g["kendall_tau"] for n, g in result["graphs"].items()}
    for spec in winners:
        label, pattern = spec.split("=", 1)
        taus[label] = {}
        for f in glob.glob(pattern):
            for name, scores in json.loads(Path(f).read_text()).items():
                stem = Path(name).stem
                taus[label][stem] = kendall_tau(np.asarray(scores), runtime[stem])
    names = sorted(set.intersection(*(set(t) for t in taus.values())))
    names = [n for n in names if not any(np.isnan(t[n]) for t in taus.values())]
    print(f"{len(names)} graphs scored by every side")
    for label, t in taus.items():
        print(f"  {label}: τ {np.mean([t[n] for n in names]):.3f}")
    for label in list(taus)[2:]:
        for mine in ("graphcost ranker", "rule"):
            diff = [taus[mine][n] - taus[label][n] for n in names]
            print(f"  {mine} − {label}: {interval(diff)}")


if __name__ == "__main__":
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
