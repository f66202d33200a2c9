"""A model for programs it never saw, and the programs to tune with it (`bench pool`).

The model comes from one of three places, and the report says which:
- `model`: a saved model; its training families are unknown here, so the programs to
  tune must be named (their families should be ones it was not trained on);
- `data`: a collection (e.g. `build/sample/npz/layout/cpu/random`): a small ranker is
  trained on its train split (early-stopped on valid); the families of both splits are
  kept out of the tuned programs (test-split families may be tuned);
- neither: a small training set is measured on the spot (`train_families`, few configs
  and runs, on `core`) and a small ranker trained on it.
Every tuned program is of a zoo family not used for training, unless named explicitly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from graphcost.autotune.measure import pinned
from graphcost.kinds import graph_kind_of
from graphcost.xla.programs import FAMILIES, family_of, make_program
from graphcost.xla.timing import COLLECTING, Protocol

TRAIN_FAMILIES = ("mlp", "cnn_nchw", "depthwise", "transformer")
SMALL_RANKER = {"hidden": 32, "opcode_dim": 16, "layers": 2, "ref_configs": 16}
UNKNOWN = "(unknown)"  # the training families of a loaded model


def _train(kind: str, train: list, valid: list | None, epochs: int, seed: int):
    from graphcost.models.model import Model
    from graphcost.train import TrainSettings, fit

    model = Model("ranker", kind, **SMALL_RANKER)
    fit(model, train, valid or None, TrainSettings(epochs=epochs, seed=seed, progress=False,
                                                   configs_per_graph=16, patience=epochs))
    return model


def model_from_collection(data: str, epochs: int = 30, seed: int = 0) -> tuple[Any, dict]:
    """A small ranker trained on a collection's train split; the families it holds."""
    from graphcost.data.collection import open_collection
    from graphcost.train.run import training_splits

    coll = open_collection(data)
    train, valid = training_splits(coll)  # refused without a train split, as `train` is
    model = _train(coll.kind, train, valid, epochs, seed)
    model.collection = coll.name  # autotune refuses a model of another space
    seen = sorted({family_of(g.name) for g in train + (valid or [])})
    return model, {"source": f"trained on {coll.name} ({data}): {len(train)} train graphs, "
                   f"{len(valid or [])} valid graphs for early stopping", "families_seen": seen,
                   "train_families": sorted({family_of(g.name) for g in train})}


def model_from_measurements(kind: str, families: Sequence[str], per_family: int = 3,
                            configs: int = 16, protocol: Protocol | None = None,
                            epochs: int = 30, seed: int = 0, core: int | None = None,
                            log: Callable[[str], Any] | None = None) -> tuple[Any, dict]:
    """Measure a few programs of `families` now and train a small ranker on them."""
    from graphcost.xla.prepare import measure_layout, measure_options

    say = log or (lambda _msg: None)
    protocol = protocol or COLLECTING
    graphs = []
    t0 = time.perf_counter()
    with pinned(core):
        for fam in families:
            for i in range(per_family):
                name, fn, args = make_program(fam, i)
                if kind == "layout":
                    g, _ = measure_layout(name, fn, args, "random", configs, seed, protocol)
                else:
                    g, _ = measure_options(name, fn, args, configs, seed, protocol)
                if g is not None:
                    graphs.append(g)
                say(f"measured {name} for training ({time.perf_counter() - t0:.0f}s)")
    if len(graphs) < 2:
        raise RuntimeError("fewer than two training graphs could be measured")
    model = _train(graph_kind_of(kind), graphs, None, epochs, seed)
    return model, {"source": f"trained on {len(graphs)} graphs measured now "
                   f"({configs} {kind} configs each, {protocol.runs} runs)",
                   "families_seen": sorted(set(families)), "train_families": sorted(set(families)),
                   "measure_train_s": round(time.perf_counter() - t0, 1)}


def model_from_file(path: str) -> tuple[Any, dict]:
    """A saved model; the families it was trained on are unknown here."""
    from graphcost.models.model import Model

    return Model.load(path), {"source": f"loaded from {path}", "families_seen": [UNKNOWN]}


def choose_model(model_path: str | None = None, data: str | None = None, kind: str = "layout",
                 train_families: Sequence[str] = TRAIN_FAMILIES, epochs: int = 30,
                 seed: int = 0, log: Callable[[str], Any] | None = None) -> tuple[Any, dict]:
    """The model to tune with and where it came from (see the module docstring): a saved
    one, else a small ranker trained on `data`, else on `train_families` measured now."""
    if model_path:
        return model_from_file(model_path)
    if data:
        return model_from_collection(data, epochs, seed)
    return model_from_measurements(kind, train_families, epochs=epochs, seed=seed, log=log)


def held_out_programs(seen: Sequence[str], per_family: int,
                      families: Sequence[str] | None = None) -> list[str]:
    """Zoo program names of `families` (default: every family not in `seen`)."""
    fams = list(families) if families else [f for f in FAMILIES if f not in set(seen)]
    return [f"{f}.{i:03d}" for f in fams for i in range(per_family)]


def programs_to_tune(model_info: dict[str, Any], per_family: int = 1,
                     families: Sequence[str] | None = None,
                     programs: Sequence[str] | None = None) -> list[str]:
    """The `programs` named, else `per_family` of each of `families`, by default of every
    family the model was not trained on (every family, for a loaded model)."""
    if programs:
        return list(programs)
    seen = [f for f in model_info["families_seen"] if f != UNKNOWN]
    return held_out_programs(seen, per_family, families or None)
