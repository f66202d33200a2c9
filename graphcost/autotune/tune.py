"""Autotune one JAX program with a trained model: search, measure the winners, report.

    program ─► optimized HLO graph ─► config space (layouts or compiler options)
            ─► the model ranks a fresh sample of configs (graph encoded once)
            ─► measure the model's top K and the default together (and, when asked,
               K random configs: `compare_random`)
            ─► chosen config (JSON) + speed-ups + Kendall τ on what was measured

The model ranks `SAMPLES` configs, as many as a collection measures per program, and
by default searches no further: the more candidates it ranks, the more its top K are
its errors rather than fast configs. On the 24 options:cpu programs of the six families
with most headroom, each tuned by a model that never saw its family, the best of the
model's top 5 ran at 1.03× [0.90, 1.18] random-5's speed from 48 sampled configs, and at
0.92× [0.84, 1.00] after the old default search (1,024 sampled, 4,096 scored), confirmed
in fresh rounds (`graphcost bench families`, `docs/notebook/2026-11.md`). `evaluations` >
`samples` still searches beyond the sample (`search`).

A layout model scores layout plans, a tile model option configs. Tile sizes and options
are both 24 graph-level floats, so a model trained on TPU tile sizes (`tile:xla`) would
rank options blindly: it is refused (`model_space`); a model that does not say what it
was trained on (written by an older graphcost) is taken to be of its kind's space.

What is measured and reported (docs/design.md §7 protocol: compile every config first, then
time in rounds of fresh random order, each config's runtime the protocol's statistic,
the minimum by default; pinned to `core` when given):
- selection round: the default, the K best configs by model score, the default excluded
  (the *model arm*) and, only with `compare_random` (the benchmarks and `--compare
  random`: checking the tuner is an evaluation, not tuning, and would double the user's
  measurements), K configs drawn at random from the sampled pool, the default excluded
  (the *random arm*: random search with the same measurement budget). A config in both
  arms is timed once. Learning while measuring (`batches` > 1, `costmodel`):
  the model arm is measured in batches, the first with the default and the random arm;
  before each later batch the cost model is fine-tuned on the model arm's runtimes and
  the default's (never the random arm's) and the search runs again.
  chosen = the fastest of the model arm's configs `clearly_faster` than the default
  (`autotune.choice`: a gain above `MIN_GAIN` and the rounds' own disagreement), else the default:
  a config that only ties the default within the noise risks a slowdown for nothing.
  The random arm gets the same rule: its best = the fastest of the random arm's
  clearly faster configs, else the default.
- confirmation round: the default, the chosen config and (with a random arm) the random
  arm's best are compiled and timed again, together, in `confirm_rounds` fresh rounds. The reported
  speed-ups come from it alone, with 95% intervals over its rounds: the selection round
  picked the winner partly by its luck in that round, so its figures flatter the winner
  (selection figures stay in `selection`, labelled as such).
- `selection["top1_speedup"]` = default / the model's first pick (the first batch's
  best scored, the default included), in the selection round: the model alone, no
  choice among measured configs.
- Kendall τ between model scores and runtimes over every config measured ok.
Configs that fail to compile or run, or whose outputs differ from the default's, are
reported and left out of every minimum.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from graphcost.autotune.choice import clearly_faster, confirm
from graphcost.autotune.costmodel import SAMPLES, model_space
from graphcost.autotune.measure import measure
from graphcost.autotune.program import Tunable, prepare
from graphcost.autotune.search import SearchResult, search
from graphcost.autotune.space import Config
from graphcost.errors import UserError
from graphcost.stats import kendall_tau, ratio_interval
from graphcost.xla.timing import AUTOTUNING, Protocol


@dataclass
class Measured:
    """One measured config: which arms chose it, its model score and its timing."""

    arms: list[str]  # "default", "model", "random"
    model_rank: int  # 0 = the model's best of everything scored
    score: float
    config: dict[str, Any]  # the config as `apply` takes it
    status: str = "ok"
    error: str = ""
    runtime_ns: float = float("nan")  # the protocol's statistic: what the choice compares
    median_ns: float = float("nan")
    min_ns: float = float("nan")
    spread: float = float("nan")
    batch: int = 0  # the measurement batch that timed it (learning while measuring)
    rounds_ns: list[float] = field(default_factory=list)  # the statistic of each round

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class AutotuneResult:
    """The chosen config and every measurement behind the reported figures."""

    program: str
    kind: str  # "layout" or "options"
    config: dict[str, Any]  # the chosen config, as `apply` and `save_config` take it
    chosen: int  # index into `measured`
    measured: list[Measured]
    k: int
    # the confirmation round's: geometric means over its rounds, and speed-ups with their
    # 95% intervals (t over the rounds' log ratios)
    default_ns: float
    chosen_ns: float
    # the random arm's best (the fastest of it and the default); NaN (index −1) when no
    # random arm was measured (`compare_random`)
    random_best_ns: float
    speedup_vs_default: float
    speedup_vs_random: float
    speedup_vs_default_ci: tuple[float, float]
    speedup_vs_random_ci: tuple[float, float]
    confirm_rounds: int
    random_best: int  # index into `measured`
    selection: dict[str, float]  # the selection round's figures: they picked the winner
    tau: float  # Kendall τ, model score vs runtime, over the configs measured ok
    search: dict[str, Any] = field(default_factory=dict)
    scoring: dict[str, Any] = field(default_factory=dict)
    space: dict[str, Any] = field(default_factory=dict)
    protocol: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def arm(self, name: str) -> list[Measured]:
        return [m for m in self.measured if name in m.arms]


# ------------------------------------------------------------------ the whole run


def autotune(fn: Callable, args: Sequence[Any], model: Any = None, *, name: str | None = None,
             k: int = 5, samples: int | None = None, evaluations: int | None = None,
             population: int = 16,
             round_size: int = 256, protocol: Protocol | None = None, seed: int = 0,
             core: int | None = None, compare_cache: bool = True, confirm_rounds: int = 5,
             batches: int = 1, compare_random: bool = False,
             log: Callable[[str], Any] | None = None) -> AutotuneResult:
    """Autotune `fn(*args)` with `model` (a `Model` or a saved model's path; None: the
    packaged layout model, `models.packaged`).

    The model ranks `samples` sampled configs (default `SAMPLES`) and, when
    `evaluations` > `samples`, searches on up to that many model scores; it then
    measures the model's top `k` and the default, and `k` random configs beside them only
    with `compare_random` (pinned to `core` if given; the protocol wants a pinned core).
    With `batches` > 1 the model's `k` are measured in that many batches, the cost model
    fine-tuned on what was measured before each later batch searches again. See the
    module docstring for exactly what the figures mean.
    """
    if k < 1 or batches < 1:
        raise UserError(f"k and batches must be at least 1, got k={k}, batches={batches}")
    if confirm_rounds < 2:
        raise UserError(f"confirm_rounds must be at least 2 (an interval needs two rounds), "
                        f"got {confirm_rounds}")
    samples = samples or SAMPLES
    evaluations = evaluations or samples
    protocol = protocol or AUTOTUNING
    protocol.check()  # before the search, not when the first measurement fails
    say = log or (lambda _msg: None)
    from graphcost.autotune.costmodel import CostModel, learn_while_measuring  # torch
    from graphcost.models.model import as_model

    if model is None:
        from graphcost.models.packaged import packaged_model

        model = packaged_model("layout")
        say(f"no model given: the packaged layout model ({model})")
    m = as_model(model)
    space = model_space(m, "the model" if m is model else str(model))
    name = name or getattr(fn, "__name__", "program")
    secs: dict[str, float] = {}

    t0 = time.perf_counter()
    t = prepare(name, fn, args, space)
    secs["prepare_s"] = time.perf_counter() - t0
    rng = np.random.default_rng(seed)
    initial = t.configs.sample(samples, rng)
    cm = CostModel(m, t, initial)  # the initial sample fixes the model's reference set
    t0 = time.perf_counter()
    score_fn = cm.scorer()
    secs["scorer_s"] = time.perf_counter() - t0
    say(f"{name}: {space} space of {t.configs.size():.3g} configs over "
        f"{len(t.configs.units)} units; searching with {evaluations} model scores")
    search_kw = {"evaluations": evaluations, "population": population,
                 "round_size": round_size}
    res = search(t.configs, score_fn, initial, rng, **search_kw)
    secs["search_s"] = res.total_s
    scoring = {"search_candidates_per_s": res.summary()["candidates_per_s"]}
    if compare_cache:
        probe = t.configs.encode(res.configs[:min(len(res.configs), 4 * round_size)])
        scoring.update(cm.scoring_rates(probe, round_size))

    say(f"measuring the default{f', {k} random configs' if compare_random else ''} and the "
        f"model's best {k}" + (f" in {batches} batches, learning from each" if batches > 1
                               else ""))
    t0 = time.perf_counter()
    random_arm = _random_arm(t, res, initial, k, rng) if compare_random else []
    arms = Arms(t, cm, res, initial, random_arm, protocol, core,
                lambda known: search(t.configs, cm.scorer(), known, rng, **search_kw))
    learn_while_measuring(cm, arms.propose, arms.measure, k, batches,
                          measured=[t.configs.default()])
    measured, configs = arms.measured(), arms.configs()
    secs["measure_s"] = time.perf_counter() - t0
    picks = choose(t, measured, compare_random)
    say(f"confirming: default and chosen #{picks['chosen']}"
        + (f" and the random arm's best #{picks['random_best']}" if compare_random else "")
        + f" timed again in {confirm_rounds} fresh rounds")
    t0 = time.perf_counter()
    confirmed = confirm(t, {arm: configs[i] for arm, i in picks.items()},
                        dataclasses.replace(protocol, rounds=confirm_rounds), core)
    secs["confirm_s"] = time.perf_counter() - t0
    return summarize(t, measured, k, res, scoring, protocol, secs, picks, confirmed)


def choose(t: Tunable, measured: list[Measured], random_arm: bool = True) -> dict[str, int]:
    """The selection round's picks (indices into `measured`): the default, the chosen
    config (the model arm's fastest of those `clearly_faster` than the default, else the
    default) and, when a random arm was measured, its best, chosen the same way."""
    if not measured[0].ok:
        raise RuntimeError(f"{t.name}: the default config failed ({measured[0].status}: "
                           f"{measured[0].error})")
    base = measured[0].rounds_ns or [measured[0].runtime_ns]

    def fastest(names: tuple[str, ...]) -> int:
        ok = [i for i, m in enumerate(measured) if m.ok and set(m.arms) & set(names)
              and clearly_faster(base, m.rounds_ns or [m.runtime_ns])]
        return min(ok, key=lambda i: (measured[i].runtime_ns, i), default=0)

    picks = {"default": 0, "chosen": fastest(("model", "default"))}
    return picks | ({"random_best": fastest(("random", "default"))} if random_arm else {})


def _random_arm(t: Tunable, res: SearchResult, initial: Sequence[Config], k: int,
                rng: np.random.Generator) -> list[Config]:
    """K configs drawn at random from the scored initial sample, the default excluded."""
    key, scored = t.configs.key, {t.configs.key(c) for c in res.configs}
    default = key(t.configs.default())
    pool = [c for c in initial if key(c) in scored and key(c) != default]
    return [pool[j] for j in rng.choice(len(pool), min(k, len(pool)), replace=False)]


class Arms:
    """What autotuning measures, batch by batch, for `learn_while_measuring`.

    The first batch times the default, the random arm and the model's first picks in one
    session (with one batch: everything, as a single selection round); each later batch
    searches again with the updated cost model and times its picks with the default (the
    outputs' reference; its first runtime is the one kept). A config in two arms is
    timed once; the model never learns from the random arm's runtimes.
    """

    def __init__(self, t: Tunable, cm: Any, first: SearchResult, initial: Sequence[Config],
                 random_arm: list[Config], protocol: Protocol, core: int | None,
                 research: Callable[[list[Config]], SearchResult]):
        self.t, self.cm, self.res, self.initial = t, cm, first, list(initial)
        self.random_arm, self.protocol, self.core = random_arm, protocol, core
        self.research, self.batch = research, 0
        self._measured: dict[Any, Measured] = {}
        self._configs: dict[Any, Config] = {}

    def measured(self) -> list[Measured]:
        return list(self._measured.values())

    def configs(self) -> list[Config]:
        return list(self._configs.values())

    def propose(self) -> list[Config]:
        """Every config the latest search scored, best first (a fresh search after the
        first batch, from the initial sample and everything measured)."""
        if self.batch:
            self.res = self.research(self.initial + self.configs())
        return [self.res.configs[i] for i in self.res.order()]

    def measure(self, picks: list[Config]) -> np.ndarray:
        key, default = self.t.configs.key, self.t.configs.default()
        arms: dict[Any, list[str]] = {key(default): ["default"]}
        for c in picks:
            arms.setdefault(key(c), []).append("model")
        for c in self.random_arm if self.batch == 0 else []:
            arms.setdefault(key(c), []).append("random")
        todo = {key(c): c for c in [default, *picks, *self.random_arm] if key(c) in arms}
        fresh = [k_ for k_ in todo if k_ not in self._measured]
        if fresh:
            keys = [key(default), *[k_ for k_ in fresh if k_ != key(default)]]
            rank = np.empty(len(self.res.scores), dtype=np.int64)
            rank[self.res.order()] = np.arange(len(self.res.scores))
            index = {key(c): i for i, c in enumerate(self.res.configs)}
            results = measure(self.t, [todo[k_] for k_ in keys], self.protocol, self.core)
            for k_, r in zip(keys, results, strict=True):
                if k_ in self._measured:
                    continue  # the default again: the outputs' reference only
                i = index[k_]
                self._measured[k_] = Measured(arms[k_], int(rank[i]), float(self.res.scores[i]),
                                              self.t.config_json(todo[k_]), r.status, r.error,
                                              r.runtime_ns, r.median_ns, r.min_ns, r.spread,
                                              batch=self.batch, rounds_ns=list(r.rounds_ns))
                self._configs[k_] = todo[k_]
        for c in picks:  # a pick the random arm measured already
            if "model" not in self._measured[key(c)].arms:
                self._measured[key(c)].arms.append("model")
        if self.batch == 0:
            d = self._measured[key(default)]
            self.cm.update([default], [d.runtime_ns if d.ok else np.nan])
        self.batch += 1
        return np.array([m.runtime_ns if m.ok else np.nan
                         for m in (self._measured[key(c)] for c in picks)])


def summarize(t: Tunable, measured: list[Measured], k: int, res: SearchResult,
              scoring: dict[str, Any], protocol: Protocol, seconds: dict[str, float],
              picks: dict[str, int], confirmed: dict[str, list[float]]) -> AutotuneResult:
    """The figures, computed from `measured` and the confirmation rounds alone (so they
    can be checked against them)."""
    top1 = next(m for m in measured if m.model_rank == 0 and m.batch == 0)  # first pick
    ok = [m for m in measured if m.ok]
    ns = {arm: float(np.exp(np.mean(np.log(v)))) for arm, v in confirmed.items()}
    nan = float("nan")
    vs_default = ratio_interval(confirmed["default"], confirmed["chosen"])
    vs_random = (ratio_interval(confirmed["random_best"], confirmed["chosen"])
                 if "random_best" in confirmed else (nan, nan, nan))
    sel = {arm: measured[i].runtime_ns for arm, i in picks.items()}
    return AutotuneResult(
        program=t.name, kind=t.configs.kind, config=measured[picks["chosen"]].config,
        chosen=picks["chosen"], measured=measured, k=k, default_ns=ns["default"],
        chosen_ns=ns["chosen"], random_best_ns=ns.get("random_best", nan),
        speedup_vs_default=vs_default[0], speedup_vs_random=vs_random[0],
        speedup_vs_default_ci=vs_default[1:], speedup_vs_random_ci=vs_random[1:],
        confirm_rounds=len(confirmed["default"]), random_best=picks.get("random_best", -1),
        selection={"speedup_vs_default": sel["default"] / sel["chosen"],
                   "speedup_vs_random": sel.get("random_best", nan) / sel["chosen"],
                   "top1_speedup": (sel["default"] / top1.runtime_ns if top1.ok
                                    else float("nan"))},
        tau=kendall_tau(np.array([m.score for m in ok]), np.array([m.runtime_ns for m in ok])),
        search=res.summary(), scoring=scoring,
        space={"kind": t.configs.kind, "units": len(t.configs.units),
               "size": float(t.configs.size()), "graph_nodes": int(t.hlo.node_feat.shape[0]),
               "configurable_nodes": len(t.node_ids)},
        protocol=asdict(protocol), seconds={k_: round(v, 3) for k_, v in seconds.items()})


def headroom_note(r: AutotuneResult) -> str:
    """What the confirmation rounds say to a user: a speed-up worth keeping, or no
    headroom worth tuning (the chosen config is within the rounds' noise of the default,
    or is the default)."""
    lo, hi = r.speedup_vs_default_ci
    x = f"{r.speedup_vs_default:.3f}x [{lo:.3f}, {hi:.3f}]"
    if r.chosen == 0:
        return ("no headroom found: nothing the model chose beat the default when measured; "
                "plain jax.jit is the best known here")
    if lo > 1:
        return f"confirmed speed-up over the default: {x} (95% interval over the rounds)"
    if hi < 1:
        return (f"the chosen config was slower than the default when timed again ({x}); "
                "keep plain jax.jit")
    return (f"no headroom worth tuning: the chosen config runs within the timing noise of "
            f"the default ({x}); plain jax.jit is as good as anything found")


def format_result(r: AutotuneResult) -> str:
    """The measurement table and the headline figures."""
    s, sc = r.search, r.scoring
    lines = [f"{r.program} ({r.kind}): {r.space['units']} units, {r.space['size']:.3g} configs; "
             f"graph {r.space['graph_nodes']} nodes, {r.space['configurable_nodes']} configurable",
             f"search: {s['sampled']} sampled, {s['evaluations']} scored in {s['rounds']} rounds"
             f"{' (exhaustive)' if s['exhaustive'] else ''}; best score sampled "
             f"{s['best_sampled_score']:.4f} -> searched {s['best_score']:.4f}"]
    if "cached_per_s" in sc:
        lines.append(f"scoring: {sc['cached_per_s']:.0f} candidates/s with the graph cache, "
                     f"{sc['uncached_per_s']:.0f}/s without ({sc['speedup']}x; batches of "
                     f"{sc['batch']}, max score difference {sc['max_abs_diff']:.2g})")
    lines.append(f"selection round: {'#':>3} {'arms':16} {'rank':>6} {'score':>9} "
                 f"{'runtime us':>10} {'median us':>10} {'spread':>7} {'vs default':>10}")
    default = r.measured[0].runtime_ns
    for i, m in enumerate(r.measured):
        mark = "*" if i == r.chosen else " "
        head = f"{'':16} {i:>3}{mark}{'+'.join(m.arms):16} {m.model_rank:>6} {m.score:>9.4f}"
        if m.ok:
            lines.append(f"{head} {m.runtime_ns / 1e3:>10.1f} {m.median_ns / 1e3:>10.1f} "
                         f"{m.spread:>7.3f} {default / m.runtime_ns:>9.3f}x")
        else:
            lines.append(f"{head} FAILED {m.status}: {m.error[:60]}")
    lo, hi = r.speedup_vs_default_ci
    rlo, rhi = r.speedup_vs_random_ci
    against = (f"{r.speedup_vs_random:.3f}x [{rlo:.3f}, {rhi:.3f}] vs the best of {r.k} "
               f"random (#{r.random_best})" if r.random_best >= 0 else
               "no random arm measured (compare_random, `--compare random`)")
    lines.append(f"confirmed in {r.confirm_rounds} fresh rounds: chosen #{r.chosen} "
                 f"{r.speedup_vs_default:.3f}x [{lo:.3f}, {hi:.3f}] vs default, {against}; "
                 "95% intervals over the rounds")
    lines.append(f"selection round (picked the winner, so it flatters it): "
                 f"{r.selection['speedup_vs_default']:.3f}x vs default, model top-1 "
                 f"{r.selection['top1_speedup']:.3f}x; Kendall tau on "
                 f"{sum(m.ok for m in r.measured)} measured: {r.tau:.3f}")
    lines.append(headroom_note(r))
    return "\n".join(lines)
