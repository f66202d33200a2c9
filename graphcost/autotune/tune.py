"""Tune a program by searching while measuring, within a budget of measurements.

    program ─► its space: compiler options, or (with a layout model) layouts
            ─► loop: strategy.ask() ─► compile ─► same executable as one timed? reuse
                     : else time it beside the default ─► strategy.tell(config, ratio)
                 until `budget` new executables were timed
            ─► confirmation: the default and the best found, timed again together in
               fresh rounds; the best is chosen only if it is clearly faster there

This is the tuner `graphcost bench search` judges offline on a table, run on a live
program: the same strategies (`autotune.strategy`), the same count (the default is
free; the budget K counts distinct executables timed after it), with measurement in
place of lookup. Each config is timed in the same rounds as the default, so what a
strategy is told is its runtime relative to the default's, free of the drift between
measurements minutes apart. A strategy sees a config by its key (`space.key`), a
tuple of either space.

The candidates: every option config (6,144), or `samples` layout plans sampled with
the default (a program's layout space is too large to list). On layouts a cost
model's order (`model`, the default there) or random search; the other strategies
move knob by knob, which layouts do not have. Ranking more layout plans finds more of
the model's errors than fast plans: on the 24 options:cpu programs of the six families
with most headroom, each tuned by a model that never saw its family, the best of the
model's top 5 of 4,096 scored ran at 0.92× [0.84, 1.00] random-5's speed, of 48 at
1.03× [0.90, 1.18] (`graphcost bench families`, `docs/notebook/2026-11.md`).

`compare` runs other strategies on the same budget beside the first, taking turns
measurement by measurement (so drift favours none), an executable timed for one arm
reused by another; all bests are confirmed in the same fresh rounds. It checks the
tuner against the searches a user would try first (random, Optuna's TPE) and doubles
or triples the measuring, so it is off by default.

The default strategy on options is coordinate search: on the table
(`docs/notebook/2026-11.md`, "Search strategies on a table of the options space") it
found the most from K = 2 to 20 and needs no model.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from graphcost.autotune.choice import confirm, confirmed_faster
from graphcost.autotune.costmodel import model_scores, tuning_model
from graphcost.autotune.measure import Measurer
from graphcost.autotune.program import Tunable, prepare
from graphcost.autotune.space import SAMPLES
from graphcost.autotune.strategy import STRATEGIES, Strategy, make_strategy
from graphcost.autotune.table import bundled_prior
from graphcost.errors import UserError
from graphcost.kinds import SPACES, space_of
from graphcost.stats import ratio_interval
from graphcost.xla.options import OptionConfig
from graphcost.xla.timing import AUTOTUNING, Protocol

#: each space's default strategy
DEFAULT_STRATEGY = {"options": "coordinate", "layout": "model"}
#: the strategies a layout space offers: the others move knob by knob
LAYOUT_STRATEGIES = ("model", "random")
#: proposals an arm may make in a row that reuse an executable already timed: past this,
#: the arm is taken to have nothing new to offer (its remaining space is all duplicates)
MAX_REPEATS = 200


@dataclass
class Step:
    """One proposal an arm measured (or reused): the default is step 0 of every arm."""

    arm: str
    k: int  # executables this arm has timed after the default, this one included
    config: list  # the config as its space writes it (`to_json`): knob choices, or layouts
    ratio: float  # runtime / the default's runtime, timed together; inf when it failed
    best: float  # the lowest ratio this arm has seen so far
    status: str = "ok"  # ok, or why it failed: compile, run, mismatch, timeout
    error: str = ""


@dataclass
class AutotuneResult:
    """The chosen config, each arm's path and the confirmation behind the figures."""

    program: str
    kind: str  # the space tuned: "options" or "layout" (graphcost.kinds)
    budget: int
    strategy: str
    arms: list[str]  # the strategy first, then the compared ones
    config: dict[str, Any]  # the chosen config, as `apply` and `save_config` take it
    chosen: list  # the chosen config as its space writes it (`to_json`)
    kept_default: bool  # nothing found was confirmed faster than the default
    steps: list[Step]
    bests: dict[str, list]  # arm -> the best config it found (by the search's ratios)
    confirmed: dict[str, list[float]]  # "default" and each arm -> runtime per fresh round (ns)
    # arm -> [its best's speed-up over the default, 95% low, high] in the confirmation
    found: dict[str, list[float]]
    # the same for each arm's choice: its best only if `confirmed_faster`, else the default
    speedup: dict[str, list[float]]
    # compared arm -> [the chosen config's speed-up over that arm's choice, low, high]
    versus: dict[str, list[float]]
    candidates: int = 0  # configs the strategies choose among
    protocol: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def curve(self, arm: str) -> list[float]:
        """Best speed-up over the default found after k = 1..budget executables (by the
        search's own timings)."""
        best = {s.k: 1 / s.best for s in self.steps if s.arm == arm}
        out, last = [], 1.0
        for k in range(1, self.budget + 1):
            last = best.get(k, last)
            out.append(last)
        return out


def run_arms(strategies: dict[str, Strategy], measurer: Measurer, budget: int,
             log: Callable[[str], Any]) -> list[Step]:
    """The arms take turns: each asks until it gets a config of an executable it has
    not seen, which is measured (or reused from another arm: it still counts, as that
    arm alone would have timed it) and told; until each has `budget` or nothing new."""
    space = measurer.t.configs
    default = space.key(space.default())
    steps, seen, best = [], {}, {}
    for arm, s in strategies.items():
        s.tell(default, 1.0)
        steps.append(Step(arm, 0, space.to_json(space.config(default)), 1.0, 1.0))
        seen[arm], best[arm] = {measurer.default_key}, 1.0
    live = dict(strategies)
    while live:
        for arm, s in list(live.items()):
            for _ in range(MAX_REPEATS):
                config = s.ask()
                if config is None:
                    break
                key, ratio, status, error = measurer.measure(space.config(config))
                s.tell(config, ratio)
                if key is not None and key in seen[arm]:
                    continue  # an executable this arm has timed: free, ask again
                seen[arm].add(key if key is not None else ("failed", config))
                best[arm] = min(best[arm], ratio)
                k = len(seen[arm]) - 1
                steps.append(Step(arm, k, space.to_json(space.config(config)), ratio,
                                  best[arm], status, error))
                log(f"  {arm:>16} {k:>3}/{budget}: "
                    + (f"{1 / ratio:.3f}x the default" if status == "ok"
                       else f"failed ({status})") + f"; best so far {1 / best[arm]:.3f}x")
                break
            else:
                config = None  # only executables it has seen: nothing new to offer
            if config is None or len(seen[arm]) - 1 >= budget:
                del live[arm]
    return steps


def autotune(fn: Callable, args: Sequence[Any], model: Any = None, *,
             space: str | None = None, budget: int = 10, strategy: str | None = None,
             compare: Sequence[str] = (), samples: int = SAMPLES, name: str | None = None,
             protocol: Protocol | None = None, confirm_rounds: int = 5,
             core: int | None = None, seed: int = 0,
             log: Callable[[str], Any] | None = None) -> AutotuneResult:
    """Search `fn(*args)`'s compiler options or layouts (`space`; by default the space
    of `model`, else options) with `strategy`, timing at most `budget` executables beyond
    the default, then confirm the best in fresh rounds (module doc). `compare` names
    strategies run beside it on the same budget; `model` (a `Model` or a saved model's
    path; None: the model packaged for the space, `models.packaged`) is used by the
    model strategies only. Layouts are searched among `samples` sampled plans."""
    if space not in (None, *SPACES):
        raise UserError(f"unknown space {space!r}; expected one of {', '.join(SPACES)}")
    if budget < 1:
        raise UserError(f"the budget must be at least 1 measurement, got {budget}")
    if confirm_rounds < 2:
        raise UserError(f"confirm_rounds must be at least 2 (an interval needs two rounds), "
                        f"got {confirm_rounds}")
    if samples < 2:
        raise UserError(f"samples must be at least 2 (the default and one more), got {samples}")
    say = log or (lambda _msg: None)
    m = tuning_model(model, space)
    space = space or (space_of(m.kind) if m is not None else "options")
    arms = list(dict.fromkeys([strategy or DEFAULT_STRATEGY[space], *compare]))
    _check_strategies(arms, space)
    needs_model = [a for a in arms if a.startswith("model")]
    if needs_model and m is None:  # the model that ships with graphcost
        from graphcost.models.packaged import packaged_model

        model = packaged_model(space)
        m = tuning_model(model, space)
        say(f"no model given: the packaged {space} model ({model})")
    protocol = protocol or AUTOTUNING
    protocol.check()
    name = name or getattr(fn, "__name__", "program")
    secs: dict[str, float] = {}
    t0 = time.perf_counter()
    t = prepare(name, fn, args, space)
    configs = (t.configs.enumerate() if space == "options"
               else t.configs.sample(samples, np.random.default_rng(seed)))
    candidates = [t.configs.key(c) for c in configs]
    choices = [len(k.choices) for k in t.configs.knobs] if space == "options" else []
    scores = model_scores(m, t, configs, seed) if needs_model else None
    secs["prepare_s"] = time.perf_counter() - t0
    if m is not None and not needs_model:
        say(f"the model is not used by {' and '.join(arms)} search: --strategy "
            "model (or, on options, model-coordinate, model-online) searches with it")
    say(f"{name}: {space} space, {len(candidates)} candidate configs"
        + (f" over {len(choices)} knobs" if choices else " (sampled plans)")
        + f"; {' and '.join(arms)} search{'es' if len(arms) == 1 else ''}, "
        f"{budget} measurements each")
    prior = bundled_prior() if any("prior" in a for a in arms) else None
    strategies = {a: make_strategy(a, candidates, choices, seed, scores, prior) for a in arms}
    t0 = time.perf_counter()
    measurer = Measurer(t, protocol, core)
    steps = run_arms(strategies, measurer, budget, say)
    secs["search_s"] = time.perf_counter() - t0
    bests = {a: s.best for a, s in strategies.items()}
    say(f"confirming: the default and {len(set(bests.values()))} best found, "
        f"timed again together in {confirm_rounds} fresh rounds")
    t0 = time.perf_counter()
    rounds = confirm(t, {"default": t.configs.default(),
                         **{a: t.configs.config(c) for a, c in bests.items()}},
                     dataclasses.replace(protocol, rounds=confirm_rounds), core)
    secs["confirm_s"] = time.perf_counter() - t0
    return summarize(t, budget, arms, steps, bests, rounds, protocol, secs, len(candidates))


def summarize(t: Tunable, budget: int, arms: list[str], steps: list[Step],
              bests: dict[str, Hashable], rounds: dict[str, list[float]],
              protocol: Protocol, secs: dict[str, float], candidates: int) -> AutotuneResult:
    """Each arm's choice (its best only if clearly faster than the default in the fresh
    rounds) and the speed-ups, from the confirmation rounds alone."""
    space = t.configs
    default = space.key(space.default())
    found = {a: list(ratio_interval(rounds["default"], rounds[a])) for a in arms}
    picked = {a: (bests[a], rounds[a]) if confirmed_faster(*found[a])
              else (default, rounds["default"]) for a in arms}
    speedup = {a: list(ratio_interval(rounds["default"], r)) for a, (_, r) in picked.items()}
    chosen, chosen_rounds = picked[arms[0]]
    versus = {a: list(ratio_interval(r, chosen_rounds)) for a, (_, r) in picked.items()
              if a != arms[0]}
    return AutotuneResult(
        program=t.name, kind=space.kind, budget=budget, strategy=arms[0], arms=arms,
        config=t.config_json(space.config(chosen)), chosen=space.to_json(space.config(chosen)),
        kept_default=chosen == default, steps=steps,
        bests={a: space.to_json(space.config(c)) for a, c in bests.items()},
        confirmed=rounds, found=found, speedup=speedup, versus=versus, candidates=candidates,
        protocol=asdict(protocol), seconds={k: round(v, 3) for k, v in secs.items()})


def _check_strategies(arms: Sequence[str], space: str) -> None:
    unknown = [a for a in arms if a not in STRATEGIES]
    if unknown:
        raise UserError(f"unknown strategy {', '.join(map(repr, unknown))}; expected one of "
                        f"{', '.join(STRATEGIES)}")
    knobwise = [a for a in arms if a not in LAYOUT_STRATEGIES]
    if space == "layout" and knobwise:
        raise UserError(f"strategy {', '.join(map(repr, knobwise))} moves knob by knob: "
                        f"layouts are searched by {' or '.join(LAYOUT_STRATEGIES)}")


def describe(kind: str, config: list) -> str:
    """A config as its space writes it, in one line."""
    if kind == "options":
        return str(OptionConfig(tuple(config)))
    return ", ".join(f"{d['kind']} {d['index']} {d['role']} {tuple(d['major_to_minor'])}"
                     for d in config)


def format_result(r: AutotuneResult) -> str:
    """Each arm's best by the search, and the confirmed figures."""
    lines = [f"{r.program}: {r.strategy} search of {r.kind}, {r.budget} measurements"
             + (f"; compared with {', '.join(r.arms[1:])}" if len(r.arms) > 1 else "")]
    for a in r.arms:
        searched = 1 / min(s.ratio for s in r.steps if s.arm == a)
        x, lo, hi = r.found[a]
        lines.append(f"  {a:>16}: best found {searched:.3f}x the default by the search's "
                     f"timings, {x:.3f}x [{lo:.3f}, {hi:.3f}] timed again"
                     + ("" if confirmed_faster(x, lo, hi) else "; not clearly faster: "
                        "the default is its choice"))
    for a, (x, lo, hi) in r.versus.items():
        lines.append(f"  {r.strategy} ÷ {a}: {x:.3f}x [{lo:.3f}, {hi:.3f}]")
    x, lo, hi = r.speedup[r.strategy]
    if r.kept_default:
        lines.append("kept the default: nothing found was clearly faster in the fresh rounds; "
                     "plain jax.jit is as good as anything found")
    else:
        lines.append(f"chosen: {describe(r.kind, r.chosen)}, {x:.3f}x [{lo:.3f}, {hi:.3f}] "
                     f"over the default in {len(r.confirmed['default'])} fresh rounds (95% "
                     "intervals over the rounds)")
    return "\n".join(lines)
