"""Search strategies over compiler-option configs, all behind one ask/tell interface.

A strategy proposes configs (`ask`), a measurer times them, and the strategy is told the
runtimes (`tell`), as in Optuna's `study.ask()` / `study.tell()` and TVM MetaSchedule's
`SearchStrategy`. A config is a tuple of one choice index per knob (`OptionsConfig`); all
zeros is the compiler's default, measured before any strategy asks. The candidates are a
finite list: the whole space, or the configs a table measured (`bench search`), so a
proposal is always something the measurer can time.

- `RandomSearch`: the candidates in a random order.
- `CoordinateSearch`: every other value of one knob of the best config so far, the
  knobs taken in turn; random candidates once no single change is left.
- `TpeSearch`: Optuna's TPE sampler over one categorical parameter per knob; a proposal
  outside the candidates, or measured already, becomes the nearest unmeasured candidate.
- `ModelOrder`: the candidates in the order a cost model ranks them, best first.
- `ModelOnline`: the model's scores plus a correction learned from this program's own
  measurements (ridge regression of the residual on one-hot knob values), the best
  unmeasured candidate by the corrected score next: the model is the prior, the
  measurements move it.
- `ModelCoordinate`: the model's best candidate first, then coordinate moves from the
  best config measured so far, the one the model scores best first: the model picks
  the start and orders the neighbours, the measurements pick the path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from graphcost.errors import UserError

OptionsConfig = tuple[int, ...]
#: every strategy by name; the ones starting "model" need a cost model's scores
STRATEGIES = ("random", "coordinate", "tpe", "model", "model-online", "model-coordinate")


class Strategy(Protocol):
    """What every search strategy answers to."""

    name: str

    def ask(self) -> OptionsConfig | None:
        """The next config to measure, never one told already; None when none is left."""

    def tell(self, config: OptionsConfig, runtime: float) -> None:
        """The measured runtime of `config` (the default is told first)."""


class _Base:
    """Candidates, what was told, and the best so far: what every strategy keeps."""

    name = "base"

    def __init__(self, candidates: Sequence[OptionsConfig], seed: int = 0):
        self.candidates = [tuple(c) for c in candidates]
        self.rng = np.random.default_rng(seed)
        self.told: dict[OptionsConfig, float] = {}

    def tell(self, config: OptionsConfig, runtime: float) -> None:
        self.told[tuple(config)] = float(runtime)

    @property
    def best(self) -> OptionsConfig:
        return min(self.told, key=self.told.get)

    def untold(self) -> list[OptionsConfig]:
        return [c for c in self.candidates if c not in self.told]


class RandomSearch(_Base):
    name = "random"

    def __init__(self, candidates: Sequence[OptionsConfig], seed: int = 0):
        super().__init__(candidates, seed)
        self.order = [self.candidates[i] for i in self.rng.permutation(len(self.candidates))]

    def ask(self) -> OptionsConfig | None:
        return next((c for c in self.order if c not in self.told), None)


class CoordinateSearch(_Base):
    """Greedy coordinate descent from the default: each move changes one knob of the best
    config so far; after a whole pass over the knobs with no gain, random candidates."""

    name = "coordinate"

    def __init__(self, candidates: Sequence[OptionsConfig], choices: Sequence[int],
                 seed: int = 0):
        super().__init__(candidates, seed)
        self.choices = list(choices)
        self.known = set(self.candidates)
        self.knob = 0
        self.fallback = RandomSearch(candidates, seed)

    def _moves(self, base: OptionsConfig, knob: int) -> list[OptionsConfig]:
        return [m for v in range(self.choices[knob]) if v != base[knob]
                and (m := base[:knob] + (v,) + base[knob + 1:]) in self.known
                and m not in self.told]

    def ask(self) -> OptionsConfig | None:
        base = self.best
        for step in range(len(self.choices)):
            knob = (self.knob + step) % len(self.choices)
            moves = self._moves(base, knob)
            if moves:
                self.knob = knob
                return moves[int(self.rng.integers(len(moves)))]
        self.fallback.told = self.told
        return self.fallback.ask()


class TpeSearch(_Base):
    """Optuna's TPE: one categorical parameter per knob, the objective the log runtime."""

    name = "tpe"

    def __init__(self, candidates: Sequence[OptionsConfig], choices: Sequence[int],
                 seed: int = 0):
        import optuna

        super().__init__(candidates, seed)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        self.dists = {f"k{i}": optuna.distributions.CategoricalDistribution(list(range(n)))
                      for i, n in enumerate(choices)}
        self.study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
        self.pending: dict[OptionsConfig, object] = {}

    def ask(self) -> OptionsConfig | None:
        untold = self.untold()
        if not untold:
            return None
        trial = self.study.ask(self.dists)
        proposed = tuple(trial.params[f"k{i}"] for i in range(len(self.dists)))
        if proposed in self.told or proposed not in set(untold):
            # told already, or not a candidate: the nearest untold candidate instead
            self.study.tell(trial, state=self.optuna.trial.TrialState.PRUNED)
            far = np.array([sum(a != b for a, b in zip(c, proposed, strict=True))
                            for c in untold])
            near = np.flatnonzero(far == far.min())
            return untold[int(near[self.rng.integers(len(near))])]
        self.pending[proposed] = trial
        return proposed

    def tell(self, config: OptionsConfig, runtime: float) -> None:
        super().tell(config, runtime)
        value = float(np.log(runtime))
        trial = self.pending.pop(tuple(config), None)
        if trial is not None:
            self.study.tell(trial, value)
        else:  # the default, or a nearest candidate: recorded as a finished trial
            params = {f"k{i}": int(v) for i, v in enumerate(config)}
            self.study.add_trial(self.optuna.trial.create_trial(
                params=params, distributions=self.dists, value=value))


class ModelOrder(_Base):
    """The cost model's ranking of the candidates (lower score = faster), best first."""

    name = "model"

    def __init__(self, candidates: Sequence[OptionsConfig], scores: Sequence[float],
                 seed: int = 0):
        super().__init__(candidates, seed)
        self.scores = np.asarray(scores, dtype=np.float64)
        self.order = [self.candidates[i] for i in np.argsort(self.scores, kind="stable")]

    def ask(self) -> OptionsConfig | None:
        return next((c for c in self.order if c not in self.told), None)


class ModelOnline(_Base):
    """The model's scores corrected by this program's measurements.

    With the scores s standardised and y = log runtime standardised over what was told,
    the corrected score is a·s + b + w·onehot(config), fitted by ridge regression on
    the told configs (a and b unpenalised, w with `ridge`), so one measurement that
    contradicts the model moves every candidate sharing its knob values. The next
    proposal is the untold candidate with the lowest corrected score.
    """

    name = "model-online"

    def __init__(self, candidates: Sequence[OptionsConfig], scores: Sequence[float],
                 choices: Sequence[int], seed: int = 0, ridge: float = 1.0):
        super().__init__(candidates, seed)
        s = np.asarray(scores, dtype=np.float64)
        self.s = (s - s.mean()) / (s.std() or 1.0)
        self.index = {c: i for i, c in enumerate(self.candidates)}
        offsets = np.concatenate([[0], np.cumsum(choices)])
        cols = np.array([[offsets[k] + v for k, v in enumerate(c)] for c in self.candidates])
        self.onehot = np.zeros((len(self.candidates), int(offsets[-1])))
        np.put_along_axis(self.onehot, cols, 1.0, axis=1)
        self.ridge = ridge

    def corrected(self) -> np.ndarray:
        """The corrected score of every candidate (the model's alone before two are told)."""
        told = [(self.index[c], r) for c, r in self.told.items() if c in self.index]
        if len(told) < 2:
            return self.s
        rows = np.array([i for i, _ in told])
        y = np.log([r for _, r in told])
        y = (y - y.mean()) / (y.std() or 1.0)
        x = np.column_stack([self.s[rows], np.ones(len(rows)), self.onehot[rows]])
        penalty = np.diag([0.0, 0.0] + [self.ridge] * self.onehot.shape[1])
        coef = np.linalg.solve(x.T @ x + penalty + 1e-9 * np.eye(x.shape[1]), x.T @ y)
        return np.column_stack([self.s, np.ones(len(self.s)), self.onehot]) @ coef

    def ask(self) -> OptionsConfig | None:
        score = self.corrected()
        for i in np.argsort(score, kind="stable"):
            if self.candidates[i] not in self.told:
                return self.candidates[i]
        return None


class ModelCoordinate(_Base):
    """The model's best candidate, then every one-knob change of the best measured config,
    best scored first; when none is left, the model's order."""

    name = "model-coordinate"

    def __init__(self, candidates: Sequence[OptionsConfig], scores: Sequence[float],
                 seed: int = 0):
        super().__init__(candidates, seed)
        self.score = dict(zip(self.candidates, np.asarray(scores, dtype=np.float64),
                              strict=True))
        self.fallback = ModelOrder(candidates, scores, seed)

    def ask(self) -> OptionsConfig | None:
        self.fallback.told = self.told
        if len(self.told) <= 1:  # only the default: the model's first pick
            return self.fallback.ask()
        best = self.best
        moves = [c for c in self.score if c not in self.told
                 and sum(a != b for a, b in zip(c, best, strict=True)) == 1]
        if moves:
            return min(moves, key=lambda c: (self.score[c], c))
        return self.fallback.ask()


def make_strategy(name: str, candidates: Sequence[OptionsConfig], choices: Sequence[int],
                  seed: int = 0, scores: Sequence[float] | None = None) -> Strategy:
    """The strategy `name` of STRATEGIES over `candidates` (`choices`: values per knob;
    `scores`: a cost model's score of each candidate, for the model strategies)."""
    if name == "random":
        return RandomSearch(candidates, seed)
    if name == "coordinate":
        return CoordinateSearch(candidates, choices, seed)
    if name == "tpe":
        return TpeSearch(candidates, choices, seed)
    if name not in STRATEGIES:
        raise UserError(f"unknown strategy {name!r}; expected one of {', '.join(STRATEGIES)}")
    if scores is None:
        raise UserError(f"strategy {name!r} needs a cost model's scores: give a model")
    if name == "model":
        return ModelOrder(candidates, scores, seed)
    if name == "model-online":
        return ModelOnline(candidates, scores, choices, seed)
    return ModelCoordinate(candidates, scores, seed)
