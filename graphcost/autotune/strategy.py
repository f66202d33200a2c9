"""Search strategies over compiler-option configs, all behind one ask/tell interface.

A strategy proposes configs (`ask`), a measurer times them, and the strategy is told the
runtimes (`tell`), as in Optuna's `study.ask()` / `study.tell()` and TVM MetaSchedule's
`SearchStrategy`. A config is a tuple of one choice index per knob (`xla.options.Choices`);
all zeros is the compiler's default, measured before any strategy asks. `RandomSearch` and
`ModelOrder` need no knobs: they take any configs by their keys (`space.key`), layout
plans too. The candidates are a finite list: the whole space, a sample of it, or the
configs a table measured (`bench search`), so a proposal is always something the
measurer can time.

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
- `TreeSearch`: TVM MetaSchedule's loop on one program: gradient-boosted trees
  (LightGBM) fitted to this program's measurements propose the next config among
  mutations of the best ones measured; with a cost model's scores (`model-trees`) the
  score is one more feature of the trees, and the model's order starts the search.
- `PriorSearch`: coordinate moves from the best config so far, taken in the order of
  their expected gain on other programs (`autotune.table.move_prior`, learned from a
  table); with `switch`, trees (`prior-trees`) or TPE (`prior-tpe`) take over after that
  many measurements, told everything measured before, or coordinate search after the
  first (`prior-coordinate`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from graphcost.errors import UserError
from graphcost.xla.options import Choices

Move = tuple[int, int]  # a single knob change: (knob, value)
#: every strategy by name; the ones starting "model" need a cost model's scores, the
#: "prior" ones a move prior
STRATEGIES = ("random", "coordinate", "tpe", "trees", "prior", "prior-trees", "prior-tpe",
              "prior-coordinate", "model", "model-online", "model-coordinate", "model-trees",
              "model-prior-trees")
#: measurements the prior's coordinate moves make before trees or TPE take over
PRIOR_MOVES = 5


class Strategy(Protocol):
    """What every search strategy answers to."""

    name: str

    def ask(self) -> Choices | None:
        """The next config to measure, never one told already; None when none is left."""

    def tell(self, config: Choices, runtime: float) -> None:
        """The measured runtime of `config` (the default is told first)."""

    @property
    def best(self) -> Choices:
        """The config told the lowest runtime (ties: the first told)."""


def onehot(configs: Sequence[Choices], choices: Sequence[int]) -> np.ndarray:
    """One column per knob value, 1 where a config takes that value."""
    offsets = np.concatenate([[0], np.cumsum(choices)])
    out = np.zeros((len(configs), int(offsets[-1])))
    if len(configs):
        np.put_along_axis(out, np.asarray(configs) + offsets[:-1], 1.0, axis=1)
    return out


class _Base:
    """Candidates, what was told, and the best so far: what every strategy keeps."""

    name = "base"

    def __init__(self, candidates: Sequence[Choices], seed: int = 0):
        self.candidates = [tuple(c) for c in candidates]
        self.rng = np.random.default_rng(seed)
        self.told: dict[Choices, float] = {}

    def tell(self, config: Choices, runtime: float) -> None:
        self.told[tuple(config)] = float(runtime)

    @property
    def best(self) -> Choices:
        return min(self.told, key=self.told.get)

    def untold(self) -> list[Choices]:
        return [c for c in self.candidates if c not in self.told]


class RandomSearch(_Base):
    name = "random"

    def __init__(self, candidates: Sequence[Choices], seed: int = 0):
        super().__init__(candidates, seed)
        self.order = [self.candidates[i] for i in self.rng.permutation(len(self.candidates))]

    def ask(self) -> Choices | None:
        return next((c for c in self.order if c not in self.told), None)


class CoordinateSearch(_Base):
    """Greedy coordinate descent from the default: each move changes one knob of the best
    config so far; after a whole pass over the knobs with no gain, random candidates."""

    name = "coordinate"

    def __init__(self, candidates: Sequence[Choices], choices: Sequence[int],
                 seed: int = 0):
        super().__init__(candidates, seed)
        self.choices = list(choices)
        self.known = set(self.candidates)
        self.knob = 0
        self.fallback = RandomSearch(candidates, seed)

    def _moves(self, base: Choices, knob: int) -> list[Choices]:
        return [m for v in range(self.choices[knob]) if v != base[knob]
                and (m := base[:knob] + (v,) + base[knob + 1:]) in self.known
                and m not in self.told]

    def ask(self) -> Choices | None:
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

    def __init__(self, candidates: Sequence[Choices], choices: Sequence[int],
                 seed: int = 0):
        import optuna

        super().__init__(candidates, seed)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        self.dists = {f"k{i}": optuna.distributions.CategoricalDistribution(list(range(n)))
                      for i, n in enumerate(choices)}
        self.study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
        self.pending: dict[Choices, object] = {}

    def ask(self) -> Choices | None:
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

    def tell(self, config: Choices, runtime: float) -> None:
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

    def __init__(self, candidates: Sequence[Choices], scores: Sequence[float],
                 seed: int = 0):
        super().__init__(candidates, seed)
        self.scores = np.asarray(scores, dtype=np.float64)
        self.order = [self.candidates[i] for i in np.argsort(self.scores, kind="stable")]

    def ask(self) -> Choices | None:
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

    def __init__(self, candidates: Sequence[Choices], scores: Sequence[float],
                 choices: Sequence[int], seed: int = 0, ridge: float = 1.0):
        super().__init__(candidates, seed)
        s = np.asarray(scores, dtype=np.float64)
        self.s = (s - s.mean()) / (s.std() or 1.0)
        self.index = {c: i for i, c in enumerate(self.candidates)}
        self.onehot = onehot(self.candidates, choices)
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

    def ask(self) -> Choices | None:
        score = self.corrected()
        for i in np.argsort(score, kind="stable"):
            if self.candidates[i] not in self.told:
                return self.candidates[i]
        return None


class ModelCoordinate(_Base):
    """The model's best candidate, then every one-knob change of the best measured config,
    best scored first; when none is left, the model's order."""

    name = "model-coordinate"

    def __init__(self, candidates: Sequence[Choices], scores: Sequence[float],
                 seed: int = 0):
        super().__init__(candidates, seed)
        self.score = dict(zip(self.candidates, np.asarray(scores, dtype=np.float64),
                              strict=True))
        self.fallback = ModelOrder(candidates, scores, seed)

    def ask(self) -> Choices | None:
        self.fallback.told = self.told
        if len(self.told) <= 1:  # only the default: the model's first pick
            return self.fallback.ask()
        best = self.best
        moves = [c for c in self.score if c not in self.told
                 and sum(a != b for a, b in zip(c, best, strict=True)) == 1]
        if moves:
            return min(moves, key=lambda c: (self.score[c], c))
        return self.fallback.ask()


class TreeSearch(_Base):
    """Gradient-boosted trees fitted to this program's measurements, as TVM
    MetaSchedule's cost model is (it uses XGBoost; LightGBM here, the same method).

    Each ask fits trees to the log runtimes told so far (features: one-hot knob values,
    and the cost model's score when given), then proposes the untold candidate the trees
    predict fastest among the *mutations* of the `elite` best configs measured (every
    config one or two knob changes away: MetaSchedule's evolutionary step, run to the end
    on a finite space); with probability `eps` a random untold candidate instead
    (MetaSchedule's ε-greedy). Until `warmup` configs are told the trees have nothing to
    learn from: the model's order, or random candidates without a model. Ties in the
    prediction go to the model's score, then to chance.
    """

    name = "trees"

    def __init__(self, candidates: Sequence[Choices], choices: Sequence[int],
                 seed: int = 0, scores: Sequence[float] | None = None, elite: int = 5,
                 eps: float = 0.05, warmup: int = 3):
        try:
            import lightgbm
        except ImportError:
            raise UserError("the trees strategies need LightGBM: "
                            "pip install 'graphcost[tune]'") from None
        super().__init__(candidates, seed)
        self.lightgbm = lightgbm
        self.array = np.asarray(self.candidates)
        self.index = {c: i for i, c in enumerate(self.candidates)}
        x = onehot(self.candidates, choices)
        self.tie = (self.rng.random(len(self.candidates)) if scores is None
                    else np.asarray(scores, dtype=np.float64))
        if scores is not None:
            self.name = "model-trees"
            s = self.tie
            x = np.column_stack([x, (s - s.mean()) / (s.std() or 1.0)])
        self.x = x
        self.elite, self.eps, self.warmup = elite, eps, warmup

    def predicted(self, rows: np.ndarray) -> np.ndarray:
        """The trees' predicted log runtime of candidate `rows`."""
        told = [(self.index[c], r) for c, r in self.told.items() if c in self.index]
        y = np.log([r for _, r in told])
        params = {"objective": "regression", "learning_rate": 0.2, "num_leaves": 8,
                  "min_data_in_leaf": 1, "min_sum_hessian_in_leaf": 0.0, "min_data_in_bin": 1,
                  "seed": int(self.rng.integers(2**31)), "num_threads": 1, "verbose": -1}
        data = self.lightgbm.Dataset(self.x[[i for i, _ in told]], y, params=params)
        trees = self.lightgbm.train(params, data, num_boost_round=50)
        return trees.predict(self.x[rows])

    def ask(self) -> Choices | None:
        untold = np.array([self.index[c] for c in self.untold()], dtype=np.int64)
        if not len(untold):
            return None
        if len(self.told) < self.warmup or self.rng.random() < self.eps:
            pick = (untold[np.argmin(self.tie[untold])] if len(self.told) < self.warmup
                    else untold[self.rng.integers(len(untold))])
            return self.candidates[pick]
        elite = np.asarray(sorted(self.told, key=self.told.get)[:self.elite])
        far = (self.array[untold][:, None, :] != elite[None]).sum(axis=2).min(axis=1)
        pool = untold[far <= 2] if (far <= 2).any() else untold
        guess = self.predicted(pool)
        return self.candidates[pool[np.lexsort((self.tie[pool], guess))[0]]]


class PriorSearch(_Base):
    """Coordinate search whose moves come in the order of what they gained elsewhere.

    Each ask takes the best config so far and changes one knob of it: the untold change
    with the highest `prior` (a move's expected gain, `autotune.table.move_prior`; moves
    the prior lacks come last, in knob order), so the first measurements go to the knob
    changes that paid most often and most on other programs. With `switch`, after that
    many configs beyond the default `after` proposes, told everything measured so far:
    "trees" (`TreeSearch`, with the model's `scores` as a feature when given), "tpe" or
    "coordinate" (`prior-coordinate`: the prior's first pick, then coordinate search from
    the best so far); without, random candidates once no move is left.
    """

    name = "prior"

    def __init__(self, candidates: Sequence[Choices], choices: Sequence[int],
                 prior: Mapping[Move, float], seed: int = 0, switch: int | None = None,
                 scores: Sequence[float] | None = None, after: str = "trees"):
        super().__init__(candidates, seed)
        every = [(k, v) for k, n in enumerate(choices) for v in range(1, n)]
        self.order = sorted(every, key=lambda m: (-prior.get(m, -np.inf), m))
        self.known = set(self.candidates)
        self.switch = switch
        self.after: Strategy = RandomSearch(candidates, seed)
        if switch is not None:
            self.after = (TpeSearch(candidates, choices, seed) if after == "tpe" else
                          CoordinateSearch(candidates, choices, seed) if after == "coordinate"
                          else TreeSearch(candidates, choices, seed, scores, eps=0.0, warmup=0))
            self.name = ("model-" if scores is not None else "") + f"prior-{after}"

    def tell(self, config: Choices, runtime: float) -> None:
        super().tell(config, runtime)
        self.after.tell(config, runtime)

    def ask(self) -> Choices | None:
        if self.switch is None or len(self.told) <= self.switch:
            best = self.best
            for k, v in self.order:
                move = best[:k] + (v,) + best[k + 1:]
                if best[k] != v and move in self.known and move not in self.told:
                    return move
        return self.after.ask()


def make_strategy(name: str, candidates: Sequence[Choices], choices: Sequence[int],
                  seed: int = 0, scores: Sequence[float] | None = None,
                  prior: Mapping[Move, float] | None = None) -> Strategy:
    """The strategy `name` of STRATEGIES over `candidates` (`choices`: values per knob;
    `scores`: a cost model's score of each candidate, for the model strategies; `prior`:
    each single knob change's expected gain, for the prior strategies)."""
    if name == "random":
        return RandomSearch(candidates, seed)
    if name == "coordinate":
        return CoordinateSearch(candidates, choices, seed)
    if name == "tpe":
        return TpeSearch(candidates, choices, seed)
    if name == "trees":
        return TreeSearch(candidates, choices, seed)
    if name not in STRATEGIES:
        raise UserError(f"unknown strategy {name!r}; expected one of {', '.join(STRATEGIES)}")
    if "prior" in name and prior is None:
        raise UserError(f"strategy {name!r} needs a move prior: a table of measured configs")
    if name == "prior":
        return PriorSearch(candidates, choices, prior, seed)
    if name in ("prior-trees", "prior-tpe"):
        return PriorSearch(candidates, choices, prior, seed, PRIOR_MOVES,
                           after=name.removeprefix("prior-"))
    if name == "prior-coordinate":
        return PriorSearch(candidates, choices, prior, seed, 1, after="coordinate")
    if scores is None:
        raise UserError(f"strategy {name!r} needs a cost model's scores: give a model")
    if name == "model":
        return ModelOrder(candidates, scores, seed)
    if name == "model-online":
        return ModelOnline(candidates, scores, choices, seed)
    if name == "model-trees":
        return TreeSearch(candidates, choices, seed, scores)
    if name == "model-prior-trees":
        return PriorSearch(candidates, choices, prior, seed, PRIOR_MOVES, scores)
    return ModelCoordinate(candidates, scores, seed)
