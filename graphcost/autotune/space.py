"""The search spaces autotuning moves through, one per space (graphcost.kinds), as the
model sees them.

A search space answers the questions search needs (the default, a random sample, a
change of one unit, every value of one unit) and encodes configs as the model's inputs,
so the search code works the same for layouts and compiler options. A *unit* is what one
move changes: a layout slot (one tensor of one configurable node) or one compiler knob.

- `LayoutSearchSpace`: the orders each slot may take, over a program's `LayoutSpace`
  (`xla.configs`: its slots and how to compile a plan) restricted to the points found in
  the compiled module; plans are encoded as (C, nc, 18) over those points in node order
  (exactly as `measure_layout` writes them).
- `OptionSearchSpace`: choice tuples over `OPTION_KNOBS`, encoded as their
  `OptionConfig`'s features (`xla.options`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from graphcost.xla.configs import LayoutPlan, LayoutSpace, sample_layout_plans
from graphcost.xla.options import OPTION_KNOBS, Choices, Knob, OptionConfig, sample_option_configs

Config = Any  # a LayoutPlan or an options config's Choices
MAX_PERMUTATIONS = 24  # a slot of rank <= 4 offers every order; larger ranks a sample
#: configs a model ranks when autotuning layouts, and the reference set it compares a
#: candidate with (why no more: `autotune.tune`)
SAMPLES = 48


class LayoutSearchSpace:
    """The layout plans search may try: each slot's orders over the located points of
    a program's `LayoutSpace` (`points` in node order)."""

    kind = "layout"  # the space it searches (graphcost.kinds)

    def __init__(self, space: LayoutSpace, points: Sequence[int]):
        self.space, self.points = space, list(points)
        self.units = list(space.slots)
        rng = np.random.default_rng(0)
        self._choices: list[list[tuple[int, ...] | None]] = []
        for slot in self.units:
            r = space.rank(slot)
            if math.factorial(r) <= MAX_PERMUTATIONS:
                orders = [tuple(p) for p in itertools.permutations(range(r))]
            else:
                orders = sorted({tuple(int(i) for i in rng.permutation(r))
                                 for _ in range(MAX_PERMUTATIONS)})
            self._choices.append([None, *orders])  # None: leave the slot to the compiler

    def default(self) -> LayoutPlan:
        return {}

    def key(self, plan: LayoutPlan) -> Hashable:
        return tuple(sorted(plan.items()))

    def config(self, key: Hashable) -> LayoutPlan:
        """The plan of a `key`."""
        return dict(key)

    def size(self) -> int:
        return math.prod(len(c) for c in self._choices)

    def enumerate(self) -> list[LayoutPlan]:
        return [{s: o for s, o in zip(self.units, combo, strict=True) if o is not None}
                for combo in itertools.product(*self._choices)]

    def sample(self, count: int, rng: np.random.Generator) -> list[LayoutPlan]:
        """The default, then half uniformly random plans, half 1-3 moves from the default
        (the two sampling modes of the measured collections)."""
        plans = sample_layout_plans(self.space, max(1, count // 2), "random", rng)
        plans += sample_layout_plans(self.space, count - count // 2 + 1, "default", rng)[1:]
        return distinct(self, plans)[:count]

    def values(self, plan: LayoutPlan, unit: int) -> list[LayoutPlan]:
        """The plan with unit `unit` set to each of its other values."""
        slot, now = self.units[unit], plan.get(self.units[unit])
        return [_with(plan, slot, o) for o in self._choices[unit] if o != now]

    def mutate(self, plan: LayoutPlan, rng: np.random.Generator) -> LayoutPlan:
        unit = int(rng.integers(len(self.units)))
        options = self.values(plan, unit)
        return options[int(rng.integers(len(options)))] if options else dict(plan)

    def cross(self, a: LayoutPlan, b: LayoutPlan, rng: np.random.Generator) -> LayoutPlan:
        """Each slot's value from one parent or the other."""
        out: LayoutPlan = {}
        for slot in self.units:
            src = a if rng.random() < 0.5 else b
            if slot in src:
                out[slot] = src[slot]
        return out

    def encode(self, plans: Sequence[LayoutPlan]) -> np.ndarray:
        """(C, nc, 18) float32: each plan's layouts of the points, −1 = compiler default."""
        return np.stack([self.space.features(p, self.points) for p in plans])

    def to_json(self, plan: LayoutPlan) -> list[dict[str, Any]]:
        out = []
        for (p, role), order in sorted(plan.items()):
            pt = self.space.points[p]
            out.append({"point": p, "kind": pt.kind, "index": pt.index, "role": role,
                        "major_to_minor": list(order)})
        return out


class OptionSearchSpace:
    """The compiler-option configs search may try: one choice index per knob (the
    default: all zeros, `OptionConfig.default`)."""

    kind = "options"  # the space it searches (graphcost.kinds)

    def __init__(self, knobs: Sequence[Knob] = OPTION_KNOBS):
        self.knobs = tuple(knobs)
        self.units = list(range(len(self.knobs)))

    def default(self) -> Choices:
        return OptionConfig.default(self.knobs).choices

    def key(self, config: Choices) -> Hashable:
        return tuple(config)

    def config(self, key: Hashable) -> Choices:
        """The config of a `key`: the choices themselves."""
        return tuple(key)

    def size(self) -> int:
        return math.prod(len(k.choices) for k in self.knobs)

    def enumerate(self) -> list[Choices]:
        return [tuple(c) for c in itertools.product(*(range(len(k.choices))
                                                      for k in self.knobs))]

    def sample(self, count: int, rng: np.random.Generator) -> list[Choices]:
        """The default, then configs with each knob off its default w.p. 0.3."""
        return sample_option_configs(count, rng, knobs=self.knobs)

    def values(self, config: Choices, unit: int) -> list[Choices]:
        return [config[:unit] + (c,) + config[unit + 1:]
                for c in range(len(self.knobs[unit].choices)) if c != config[unit]]

    def mutate(self, config: Choices, rng: np.random.Generator) -> Choices:
        options = self.values(config, int(rng.integers(len(self.knobs))))
        return options[int(rng.integers(len(options)))]

    def cross(self, a: Choices, b: Choices, rng: np.random.Generator) -> Choices:
        return tuple(x if rng.random() < 0.5 else y for x, y in zip(a, b, strict=True))

    def encode(self, configs: Sequence[Choices]) -> np.ndarray:
        return np.stack([OptionConfig(c, self.knobs).features() for c in configs])

    def to_json(self, config: Choices) -> list[int]:
        return [int(c) for c in config]


def _with(plan: LayoutPlan, slot: tuple[int, str], order: tuple[int, ...] | None) -> LayoutPlan:
    out = dict(plan)
    if order is None:
        out.pop(slot, None)
    else:
        out[slot] = order
    return out


def distinct(space: SearchSpace, configs: Sequence[Config]) -> list[Config]:
    """Configs in order, each once."""
    seen: set = set()
    out = []
    for c in configs:
        k = space.key(c)
        if k not in seen:
            seen.add(k)
            out.append(c)
    return out


SearchSpace = LayoutSearchSpace | OptionSearchSpace
