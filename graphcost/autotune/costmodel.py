"""A program's cost model that learns from what autotuning measures.

The interface a tuner needs to learn while it measures (TVM MetaSchedule's and Ansor's):
`predict(configs)` scores configurations (lower = faster), `update(configs, runtimes)`
adds measurements and fine-tunes on everything measured so far, `save`/`load` keep both
the fine-tuned model and the measurements, so tuning can stop and go on later.

A trained model ranks a program it never saw only loosely; a handful of the program's
own measurements says which of its differences matter here. `update` fine-tunes a
private copy of the model (the caller's model is never changed) through the one
training loop (`fit` with `warm_start`), on one graph: the program with the measured
configurations as its configs, ranked with the model's own loss.

The tuner's model strategies read a model here once: `tuning_model` (the model of the
space, or a clear refusal) and `model_scores` (its scores of the candidates).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from graphcost.autotune.program import Tunable
from graphcost.autotune.space import SAMPLES, Config
from graphcost.errors import UserError
from graphcost.kinds import collection_space, space_of
from graphcost.models.checkpoint import atomic_save, load_checkpoint, require_keys
from graphcost.models.model import Model, as_model
from graphcost.models.scorer import ConfigScorer
from graphcost.train import TrainSettings, fit

FORMAT = "graphcost-costmodel/1"


def finetune_settings(steps: int = 30, lr: float = 5e-4, seed: int = 0) -> TrainSettings:
    """One step per epoch on the one graph, every measured config in each step, no warm-up
    or early stopping: a few small steps that move the model towards the measured order
    without forgetting what it learned from the collection."""
    return TrainSettings(epochs=steps, steps_per_epoch=1, graphs_per_batch=1,
                         configs_per_graph=1024, lr=lr, warmup_steps=0, patience=steps,
                         seed=seed, progress=False, warm_start=True)


class CostModel:
    """`predict` / `update` / `save` / `load` for one program (`Tunable`).

    `reference` are the configs whose graph fixes what the model compares a candidate
    with (the ranker's reference set); autotuning passes its initial sample.
    """

    def __init__(self, model: Model, tunable: Tunable, reference: Sequence[Config],
                 settings: TrainSettings | None = None):
        if model.net is None:
            raise RuntimeError("the model is not fitted: train it or load() one")
        self.model = Model.from_state(model.state())  # a private copy: update changes it
        self.tunable = tunable
        self.reference = tunable.configs.encode(reference)
        self.settings = settings or finetune_settings()
        self.measured = np.zeros((0, *self.reference.shape[1:]), dtype=np.float32)
        self.runtime_ns = np.zeros(0)
        self.updates = 0
        self._score: Callable[[np.ndarray], np.ndarray] | None = None

    def scorer(self) -> Callable[[np.ndarray], np.ndarray]:
        """Scores of encoded configs (the graph encoded once per model state)."""
        if self._score is None:
            graph = self.tunable.graph_of(self.reference)
            self._score = ConfigScorer(self.model, graph).candidates()
        return self._score

    def predict(self, configs: Sequence[Config]) -> np.ndarray:
        """Model scores of `configs`, lower = predicted faster."""
        return np.asarray(self.scorer()(self.tunable.configs.encode(configs)), np.float64)

    def update(self, configs: Sequence[Config], runtime_ns: Sequence[float]) -> bool:
        """Add measurements (a failed one as NaN: left out) and fine-tune on all measured.

        Returns whether the model changed: fine-tuning needs two different runtimes.
        """
        rt = np.asarray(runtime_ns, dtype=np.float64)
        if len(rt) != len(configs):
            raise ValueError(f"{len(configs)} configs but {len(rt)} runtimes")
        ok = np.isfinite(rt) & (rt > 0)
        if ok.any():
            feat = self.tunable.configs.encode([c for c, o in zip(configs, ok, strict=True) if o])
            self.measured = np.concatenate([self.measured, feat])
            self.runtime_ns = np.concatenate([self.runtime_ns, rt[ok]])
        if len(np.unique(self.runtime_ns)) < 2:
            return False
        graph = self.tunable.graph_of(self.measured, self.runtime_ns)
        fit(self.model, [graph], None, dataclasses.replace(self.settings,
                                                            seed=self.settings.seed + self.updates))
        self.updates += 1
        self._score = None
        return True

    def save(self, path: str | Path) -> Path:
        """The fine-tuned model, the measurements and the settings, in one file."""
        return atomic_save({"format": FORMAT, "program": self.tunable.name,
                            "model": self.model.state(),
                            "reference": torch.from_numpy(self.reference),
                            "measured": torch.from_numpy(self.measured),
                            "runtime_ns": torch.from_numpy(self.runtime_ns),
                            "updates": self.updates,
                            "settings": dataclasses.asdict(self.settings)}, path)

    @classmethod
    def load(cls, path: str | Path, tunable: Tunable) -> CostModel:
        """A saved cost model, for the same program (`tunable`) it was saved for."""
        state: dict[str, Any] = load_checkpoint(path)
        if state.get("format") != FORMAT:
            raise UserError(f"{path}: not a graphcost cost model (format "
                            f"{state.get('format')!r}, expected {FORMAT!r})")
        try:
            require_keys(state, ("program", "model", "reference", "measured", "runtime_ns",
                                 "updates", "settings"), "a complete graphcost cost model")
        except UserError as e:
            raise UserError(f"{path}: {e}") from None
        if state["program"] != tunable.name:
            raise UserError(f"{path}: a cost model of {state['program']!r}, not of "
                            f"{tunable.name!r}")
        reference = state["reference"].numpy()
        shape = tunable.configs.encode([tunable.configs.default()]).shape[1:]
        if reference.shape[1:] != shape:
            raise UserError(f"{path}: its configs have shape {tuple(reference.shape[1:])}, "
                            f"this program's {tuple(shape)}: the program changed")
        cm = cls.__new__(cls)
        cm.model = Model.from_state(state["model"])
        cm.tunable, cm.reference = tunable, reference
        cm.settings = TrainSettings(**state["settings"])
        cm.measured = state["measured"].numpy()
        cm.runtime_ns = state["runtime_ns"].numpy()
        cm.updates, cm._score = int(state["updates"]), None
        return cm


def batch_sizes(k: int, batches: int) -> list[int]:
    """`k` measurements split into `batches` near-equal batches, the smaller ones first
    (the sooner the model learns, the more batches its update can help)."""
    if k < 1 or batches < 1:
        raise UserError(f"k and batches must be at least 1, got k={k}, batches={batches}")
    b = min(k, batches)
    return [k // b + (i >= b - k % b) for i in range(b)]


def learn_while_measuring(cm: CostModel, propose: Callable[[], Sequence[Config]],
                          measure: Callable[[list[Config]], np.ndarray], k: int,
                          batches: int, measured: Sequence[Config] = ()
                          ) -> list[tuple[int, Config, float]]:
    """Measure `k` configs in `batches` batches, updating `cm` after each.

    Each batch is the first configs of `propose()` (best predicted first, proposed anew
    with the model as updated so far) not measured yet; `measured` are configs already
    measured and given to `cm` (the default). Returns (batch, config, runtime_ns) in the
    order measured.
    """
    key = cm.tunable.configs.key
    seen = {key(c) for c in measured}
    out: list[tuple[int, Config, float]] = []
    for batch, size in enumerate(batch_sizes(k, batches)):
        picks: list[Config] = []
        for c in propose():
            if key(c) not in seen:
                seen.add(key(c))
                picks.append(c)
                if len(picks) == size:
                    break
        if not picks:
            break
        runtime = np.asarray(measure(picks), dtype=np.float64)
        out += [(batch, c, float(r)) for c, r in zip(picks, runtime, strict=True)]
        if batch < batches - 1:
            cm.update(picks, runtime)
    return out


def learn_picks(cm: CostModel, pool: Sequence[Any], runtime: np.ndarray, k: int,
                batches: int, default: int = 0) -> list[int]:
    """Pool indices that learning while measuring measures, in order: K in `batches`
    batches, `cm` told the default's runtime first and fine-tuned on each batch's
    (`runtime`, NaN where a config failed) before it picks the next."""
    key = cm.tunable.configs.key
    index = {key(c): i for i, c in enumerate(pool)}
    cm.update([pool[default]], runtime[[default]])  # the default: measured by every strategy

    def propose() -> list[Any]:
        return [pool[i] for i in np.argsort(cm.predict(pool), kind="stable")]

    learned = learn_while_measuring(cm, propose, lambda cs: runtime[[index[key(c)] for c in cs]],
                                    k, batches, measured=[pool[default]])
    return [index[key(c)] for _, c, _ in learned]


#: a collection of each space a model to tune it may be trained on
EXAMPLE_COLLECTION = {"layout": "layout:cpu:random", "options": "options:cpu"}


def model_space(m: Any, source: str) -> str:
    """The space model `m` tunes (a layout model layouts, a tile model compiler options),
    refused naming `source` when the collection it was trained on is of another space:
    a tile model of TPU tile sizes (`tile:xla`) would rank XLA:CPU options blindly."""
    space = space_of(m.kind)
    trained = collection_space(m.collection) if isinstance(m.collection, str) else None
    if trained not in (None, space):
        what = "TPU tile sizes" if trained == "tile" else f"{trained} configs"
        raise UserError(f"{source}: a model trained on {m.collection} ({what}) cannot rank "
                        f"the {space} configs of an XLA:CPU program: use a model trained on "
                        f"a collection of {space} (such as {EXAMPLE_COLLECTION[space]})")
    return space


def tuning_model(model: Any, space: str | None) -> Model | None:
    """The model (a `Model` or a saved model's path; None stays None), refused unless it
    ranks `space` (when given)."""
    if model is None:
        return None
    m = as_model(model)
    source = "the model" if m is model else str(model)
    tunes = model_space(m, source)
    if space not in (None, tunes):
        what = {"layout": "a layout model cannot rank compiler options",
                "options": "an options model cannot rank layouts"}[tunes]
        raise UserError(f"{source}: {what}; give a model trained on a collection of "
                        f"{space} (such as {EXAMPLE_COLLECTION[space]})")
    return m


def model_scores(m: Any, t: Tunable, configs: list[Any], seed: int) -> np.ndarray:
    """The cost model's score of every config (lower = faster), each compared with the
    same reference sample (the tuner's layout candidates, at its default samples)."""
    reference = t.configs.sample(SAMPLES, np.random.default_rng(seed))
    score = CostModel(m, t, reference).scorer()
    encoded = t.configs.encode(configs)
    return np.concatenate([score(encoded[i:i + 4096]) for i in range(0, len(encoded), 4096)])
