"""One leave-family-out fold of a bundled collection as the Kaggle directory tree the
winners' loaders read, made of symlinks: train = the fold's training families, valid =
its early-stopping families, test = the held-out families. The folds are exactly those
of `graphcost crossval DATA --seed SEED` (5 folds, 0.15 kept for early stopping).

    python peers/make_fold.py --fold 1 --out $PEERS/data/fold1 [--seed 0]
    python peers/make_fold.py --collection options --fold 1 --out $PEERS/opt/data/fold1

`layout` (the default) builds `npz_all/npz/layout/xla/{default,random}/{train,valid,test}`
from layout/cpu/{default,random}; `options` builds `npz_all/npz/tile/xla/{train,valid,
test}` from options/cpu, the tree both winners' tile code reads. Either way it writes
`sample_submission.csv` (one row per held-out graph), which the 2nd place's test step fills.

Run with graphcost's own environment (.venv): it reads the fold plan from graphcost.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from graphcost.data.collection import open_collection
from graphcost.eval.crossval import plan_folds

SAMPLE = Path(__file__).resolve().parent.parent / "graphcost/sample/npz"


def link_fold(data: Path, fold: int, seed: int, folder: Path) -> dict[str, list[str]]:
    """Symlinks of fold `fold` of `data` into folder/{train,valid,test}; its families."""
    plan = plan_folds(open_collection(data), 5, seed, 0.15, "family")[fold - 1]
    for split, files in plan.collection.splits.items():
        (folder / split).mkdir(parents=True, exist_ok=True)
        for path in files:
            os.symlink(path.resolve(), folder / split / path.name)
    return {"held_out": plan.held_out, "valid": plan.valid, "train": plan.train}


parser = argparse.ArgumentParser()
parser.add_argument("--fold", type=int, required=True)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--out", type=Path, required=True)
parser.add_argument("--collection", choices=("layout", "options"), default="layout")
args = parser.parse_args()
info = {}
if args.collection == "options":
    info["options"] = link_fold(SAMPLE / "options/cpu", args.fold, args.seed,
                                args.out / "npz_all/npz/tile/xla")
    tests = {"tile:xla": args.out / "npz_all/npz/tile/xla/test"}
else:
    for search in ("default", "random"):
        info[search] = link_fold(SAMPLE / "layout/cpu" / search, args.fold, args.seed,
                                 args.out / "npz_all/npz/layout/xla" / search)
    tests = {f"layout:xla:{s}": args.out / "npz_all/npz/layout/xla" / s / "test"
             for s in ("default", "random")}
# the 2nd place's test step writes into a sample submission: one row per test graph
rows = [f"{c}:{p.stem},0;1;2;3;4" for c, d in tests.items() for p in sorted(d.glob("*.npz"))]
(args.out / "sample_submission.csv").write_text("\n".join(["ID,TopConfigs", *rows]) + "\n")
(args.out / "fold.json").write_text(json.dumps(info, indent=1))
print(json.dumps(next(iter(info.values()))))
