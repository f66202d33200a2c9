"""One leave-family-out fold of a bundled layout collection as the Kaggle directory tree
the winners' loaders read, made of symlinks: train = the fold's training families,
valid = its early-stopping families, test = the held-out families. The folds are exactly
those of `graphcost crossval DATA --seed SEED` (5 folds, 0.15 kept for early stopping).

    python peers/make_fold.py --fold 1 --out $PEERS/data/fold1 [--seed 0]

Run with graphcost's own environment (.venv): it reads the fold plan from graphcost.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from graphcost.data.collection import open_collection
from graphcost.eval.crossval import plan_folds

SAMPLE = Path(__file__).resolve().parent.parent / "graphcost/sample/npz/layout/cpu"

parser = argparse.ArgumentParser()
parser.add_argument("--fold", type=int, required=True)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--out", type=Path, required=True)
args = parser.parse_args()
info = {}
for search in ("default", "random"):
    fold = plan_folds(open_collection(SAMPLE / search), 5, args.seed, 0.15, "family")[args.fold - 1]
    info[search] = {"held_out": fold.held_out, "valid": fold.valid, "train": fold.train}
    for split, files in fold.collection.splits.items():
        folder = args.out / "npz_all/npz/layout/xla" / search / split
        folder.mkdir(parents=True, exist_ok=True)
        for path in files:
            os.symlink(path.resolve(), folder / path.name)
# the 2nd place's test step writes into a sample submission: one row per test graph
rows = [f"layout:xla:{s}:{p.stem},0;1;2;3;4" for s in ("default", "random")
        for p in sorted((args.out / "npz_all/npz/layout/xla" / s / "test").glob("*.npz"))]
(args.out / "sample_submission.csv").write_text("\n".join(["ID,TopConfigs", *rows]) + "\n")
(args.out / "fold.json").write_text(json.dumps(info, indent=1))
print(json.dumps(info["default"]))
