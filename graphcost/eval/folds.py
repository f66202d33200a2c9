"""Fold models: the models of `graphcost crossval` that never saw a program's family.

Benchmarks that tune every program of a collection (`bench families`, `bench search`)
need, for each program, a model trained without its family. One crossval result per
seed holds them (its folds' run folders), trained once under the benchmark's folder and
reused by every rerun.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from graphcost.data.collection import open_collection
from graphcost.errors import UserError
from graphcost.eval.compare import read_results
from graphcost.eval.crossval import crossvalidate
from graphcost.train.settings import TrainSettings


def fold_runs(data: str | Path, model: str, seeds: Sequence[int], out: Path,
              settings: TrainSettings, folds: int, log: Callable[[str], Any],
              model_settings: dict[str, Any] | None = None) -> list[dict]:
    """One crossval result per seed (`out/<model>-<seed>/crossval.json`), reused when
    already there: a rerun of the benchmark trains nothing twice."""
    runs = []
    collection = open_collection(data).name
    for seed in seeds:
        run_dir = out / f"{model}-{seed}"
        path = run_dir / "crossval.json"
        if path.exists():
            log(f"{model} seed {seed}: reusing {path}")
        else:
            log(f"{model} seed {seed}: training {folds} leave-family-out folds")
            crossvalidate(data, model, folds, dataclasses.replace(settings, seed=seed),
                          model_settings, out_dir=run_dir, seed=seed, log=log)
        run = read_results([path])[0]
        asked = dataclasses.asdict(dataclasses.replace(settings, seed=seed))
        wanted = {"collection": collection, "model": model, "folds": folds,
                  "model_settings": model_settings or {},
                  "settings": json.loads(json.dumps(asked))}  # as the file holds them
        differ = [key for key, v in wanted.items() if run.get(key) != v]
        if differ:
            raise UserError(f"{path} was made with another {', '.join(differ)} than this run "
                            "asks for; give another --out, or delete it to train again")
        if any("pred" not in g for g in run["graphs"].values()):
            raise UserError(f"{path} has no per-config predictions (written by an older "
                            "graphcost); delete it to train again")
        runs.append(run)
    return runs



def fold_model(run: dict[str, Any]) -> Callable[[str], Any]:
    """Program name -> the model of `run` (a crossval result) that never saw its family,
    each fold's loaded once."""
    from graphcost.models.model import Model

    dirs = {f["fold"]: f["run_dir"] for f in run["fold_results"]}
    cache: dict[int, Any] = {}

    def model(program: str) -> Any:
        fold = run["graphs"][program]["fold"]
        if fold not in cache:
            if not dirs.get(fold):
                raise UserError(f"fold {fold} of the {run['model']} seed {run['seed']} "
                                "result kept no model (crossval without --out)")
            cache[fold] = Model.load(Path(dirs[fold]) / "model.pt")
        return cache[fold]

    return model
