"""The layout space of a JAX program on XLA:CPU (node-level configs).

Layout (as TpuGraphs layout). The program is traced once to a jaxpr and re-evaluated
with layout constraints, so any JAX function works unchanged. Configurable nodes are
the program's parameters (their layout is set with `jit(in_shardings=Format(Layout))`)
and every `dot_general` / `conv_general_dilated` / `transpose` / `reduce_sum` /
`reduce_max` at the top level (jit calls inlined; bodies of scan/while/cond are left
alone): its operands and result go through `with_layout_constraint`, which XLA sees as
a `LayoutConstraint` custom-call. These are the operations whose kernel changes with
layout (a reduction over the minor dimension streams, over a major one strides; a
transpose whose layouts agree becomes a free bitcast). Each point is bound under a
named scope `gcpN`, so the instruction it becomes is found again in the compiled module
by its `op_name` metadata. A node's 18 features are its output layout (0-5), input
(lhs, or the only operand) layout (6-11) and kernel (rhs) layout (12-17), each
minor-to-major padded with -1; all -1 is the compiler's default. Only tensors of rank
2..6 are set, and at most `max_slots` of them (the largest tensors): every non-default
layout costs a copy kernel, and each kernel costs compile time (on XLA:CPU about 20 ms;
a random plan over 101 slots of a transformer took 3.2 s to compile, its default 0.3 s).

Compiler options (graph-level, as tile) are `xla.options`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphcost.errors import UserError
from graphcost.formats.records import NUM_LAYOUT_CONFIG_FEATURES

MAX_RANK = 6
MAX_SLOTS = 48  # slots per layout space, the largest tensors first
ROLES = ("out", "in", "kernel")  # feature blocks 0-5, 6-11, 12-17
POINT_PRIMITIVES = {"dot_general": "dot", "conv_general_dilated": "convolution",
                    "transpose": "transpose", "reduce_sum": "reduce", "reduce_max": "reduce"}
_OPERAND_ROLES = ("in", "kernel")  # operand i of a point primitive has role i
_INLINED = {"pjit", "jit", "closed_call", "core_call"}

#: slot -> major-to-minor order; a slot missing from the plan keeps the compiler default.
LayoutPlan = dict[tuple[int, str], tuple[int, ...]]


# ------------------------------------------------------------------ layout space


@dataclass
class Point:
    """A configurable place: a parameter (role `out` only), a dot/convolution (`out`,
    `in`, `kernel`) or a transpose/reduction (`out`, `in`)."""

    kind: str  # "parameter", "dot", "convolution", "transpose" or "reduce"
    index: int  # parameter number, or the N of the scope `gcpN`
    ranks: dict[str, int]  # role -> rank of that tensor
    values: dict[str, int] = field(default_factory=dict)  # role -> id of its tensor value
    sizes: dict[str, int] = field(default_factory=dict)  # role -> elements of that tensor

    @property
    def tag(self) -> str:
        return f"gcp{self.index}"


@dataclass
class LayoutSpace:
    """The layout configurations of one program, over its flattened arguments."""

    fn: Callable
    args: tuple
    max_slots: int = MAX_SLOTS
    leaves: list = field(init=False)
    points: list[Point] = field(init=False)
    slots: list[tuple[int, str]] = field(init=False)  # (point, role) that can be set

    def __post_init__(self) -> None:
        import jax

        from graphcost.xla.tracing import tracing

        self.leaves, self._in_tree = jax.tree.flatten(self.args)
        with tracing(self.fn):  # the user's code runs here, and only here
            closed = jax.make_jaxpr(
                lambda *xs: self.fn(*jax.tree.unflatten(self._in_tree, xs)))(*self.leaves)
        self._closed = closed
        ids: dict = {}
        self.points = [Point("parameter", i, {"out": np.ndim(x)}, {"out": _value_id(ids, (0, v))},
                             {"out": int(np.size(x))})
                       for i, (x, v) in enumerate(zip(self.leaves, closed.jaxpr.invars,
                                                      strict=True))]
        self.points += _find_points(closed.jaxpr, ids, [], 0, {}, [0])
        slots = [(p, r) for p, pt in enumerate(self.points)
                 for r, rank in pt.ranks.items() if 2 <= rank <= MAX_RANK]
        biggest = sorted(slots, key=lambda s: -self.points[s[0]].sizes.get(s[1], 0))
        keep = set(biggest[:self.max_slots])
        self.slots = [s for s in slots if s in keep]

    def restrict(self, points: Sequence[int]) -> None:
        """Keep only the slots of these points (those found in the compiled module)."""
        keep = set(points)
        self.slots = [s for s in self.slots if s[0] in keep]

    def rank(self, slot: tuple[int, str]) -> int:
        return self.points[slot[0]].ranks[slot[1]]

    def value(self, slot: tuple[int, str]) -> int | None:
        """The id of the tensor value a slot constrains (slots of one value share it)."""
        return self.points[slot[0]].values.get(slot[1])

    def function(self, plan: LayoutPlan) -> Callable:
        """The program over flat arguments, with the plan's intermediate constraints."""
        dots = {(self.points[p].index, r): m2m for (p, r), m2m in plan.items()
                if self.points[p].kind != "parameter"}
        closed = self._closed

        def flat(*xs):
            return _evaluate(closed.jaxpr, closed.consts, xs, dots, [0])

        return flat

    def in_shardings(self, plan: LayoutPlan) -> list:
        """`jit` in_shardings: a `Format(Layout(...))` for each parameter the plan sets."""
        import jax
        from jax.experimental.layout import Format, Layout
        from jax.sharding import SingleDeviceSharding

        sharding = SingleDeviceSharding(jax.devices()[0])
        out: list = [None] * len(self.leaves)
        for (p, _), m2m in plan.items():
            if self.points[p].kind == "parameter":
                out[self.points[p].index] = Format(Layout(tuple(m2m)), sharding)
        return out

    def jit(self, plan: LayoutPlan, compiler_options: dict[str, Any] | None = None):
        """`jax.jit` of the program over flat arguments under `plan` (and options)."""
        import jax

        return jax.jit(self.function(plan), in_shardings=self.in_shardings(plan),
                       keep_unused=True, compiler_options=compiler_options or None)

    def lower(self, plan: LayoutPlan):
        """The program lowered under `plan`: compiled once per set of compiler options."""
        return self.jit(plan).lower(*self.leaves)

    def compile(self, plan: LayoutPlan, compiler_options: dict[str, Any] | None = None):
        """The XLA executable of the program under `plan` and `compiler_options` (raises
        if XLA refuses it): the one compile path of collection, autotuning and `apply`."""
        return self.lower(plan).compile(compiler_options or None)

    def features(self, plan: LayoutPlan, points: Sequence[int]) -> np.ndarray:
        """(len(points), 18) float32: the plan's layouts of those points, -1 = default."""
        out = np.full((len(points), NUM_LAYOUT_CONFIG_FEATURES), -1.0, dtype=np.float32)
        row = {p: i for i, p in enumerate(points)}
        for (p, role), m2m in plan.items():
            if p in row:
                start = MAX_RANK * ROLES.index(role)
                out[row[p], start:start + len(m2m)] = m2m[::-1]  # minor-to-major
        return out


def _value_id(ids: dict, key: tuple) -> int:
    return ids.setdefault(key, len(ids))


def _find_points(jaxpr, ids: dict, found: list[Point], scope: int, alias: dict,
                 scopes: list[int]) -> list[Point]:
    """The point primitives of `jaxpr` (jit calls inlined), each with the ids of the tensor
    values its roles constrain. A value is keyed by (call scope, var); a call's inputs and
    outputs are aliased to the caller's values, so one tensor has one id."""
    import jax.extend.core as jcore

    def key(v, sc: int) -> tuple | None:
        return None if isinstance(v, jcore.Literal) else alias.get((sc, v), (sc, v))

    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in _INLINED and "jaxpr" in eqn.params:
            inner = _inner(eqn.params["jaxpr"])
            scopes[0] += 1
            sub = scopes[0]
            for iv, ov in zip(inner.invars, eqn.invars, strict=False):
                if (k := key(ov, scope)) is not None:
                    alias[(sub, iv)] = k
            _find_points(inner, ids, found, sub, alias, scopes)
            for iv, ov in zip(inner.outvars, eqn.outvars, strict=False):
                if (k := key(iv, sub)) is not None:
                    alias[(scope, ov)] = k
        elif name in POINT_PRIMITIVES:
            ranks = {role: len(v.aval.shape) for role, v in zip(_OPERAND_ROLES, eqn.invars,
                                                                strict=False)}
            ranks["out"] = len(eqn.outvars[0].aval.shape)
            roles = [*zip(_OPERAND_ROLES, eqn.invars, strict=False), ("out", eqn.outvars[0])]
            values = {r: _value_id(ids, k) for r, v in roles if (k := key(v, scope)) is not None}
            sizes = {r: int(np.prod(v.aval.shape)) for r, v in roles}
            found.append(Point(POINT_PRIMITIVES[name], len(found), ranks, values, sizes))
    return found


def _inner(j):
    return j.jaxpr if hasattr(j, "jaxpr") else j


def _evaluate(jaxpr, consts, args, dots: dict, counter: list[int]) -> list:
    """Evaluate a jaxpr, constraining point operands and results as `dots` says."""
    import jax
    import jax.extend.core as jcore
    from jax.experimental.layout import Layout, with_layout_constraint

    env: dict = {}

    def read(v):
        return v.val if isinstance(v, jcore.Literal) else env[v]

    def constrain(x, key):
        return with_layout_constraint(x, Layout(dots[key])) if key in dots else x

    env.update(zip(jaxpr.constvars, consts, strict=False))
    env.update(zip(jaxpr.invars, args, strict=False))
    for eqn in jaxpr.eqns:
        vals = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        if name in _INLINED and "jaxpr" in eqn.params:
            inner = eqn.params["jaxpr"]
            outs = _evaluate(_inner(inner), getattr(inner, "consts", ()), vals, dots, counter)
        elif name in POINT_PRIMITIVES:
            k = counter[0]
            counter[0] += 1
            vals = [constrain(v, (k, role)) for v, role in zip(vals, _OPERAND_ROLES,
                                                               strict=False)] + vals[2:]
            with jax.named_scope(f"gcp{k}"):
                outs = [constrain(eqn.primitive.bind(*vals, **eqn.params), (k, "out"))]
        else:
            outs = eqn.primitive.bind(*vals, **eqn.primitive.get_bind_params(eqn.params))
            outs = outs if eqn.primitive.multiple_results else [outs]
        for v, x in zip(eqn.outvars, outs, strict=False):
            if not isinstance(v, jcore.DropVar):
                env[v] = x
    return [read(v) for v in jaxpr.outvars]


_INSTRUCTION = re.compile(r'^\s*(?:ROOT\s+)?%?([^\s=]+) = .*?metadata=\{op_name="([^"]*)"', re.M)
_PARAMETER = re.compile(r"^\s*(?:ROOT\s+)?%?([^\s=]+) = .* parameter\((\d+)\)", re.M)
_PREFERRED_OPCODES = {"dot": ("dot", "convolution", "custom-call", "fusion"),
                      "transpose": ("transpose", "copy", "fusion", "custom-call"),
                      "reduce": ("reduce", "fusion", "custom-call")}


def locate_points(space: LayoutSpace, hlo_text: str, node_names: Sequence[str],
                  node_opcodes: Sequence[str]) -> dict[int, int]:
    """Point -> node id in the compiled module (points not found are left out).

    Parameters are the entry computation's `parameter(k)`; another point is the
    instruction whose `op_name` carries its scope, preferring a node of its own opcode
    (a real dot/convolution/transpose/reduce) over the fusion or custom-call holding it.
    """
    node_of = {n: i for i, n in enumerate(node_names)}
    entry = hlo_text[hlo_text.rfind("\nENTRY "):] if "\nENTRY " in hlo_text else hlo_text
    params = {int(k): node_of[n] for n, k in _PARAMETER.findall(entry.split("\n}\n")[0])
              if n in node_of}
    tagged: dict[str, list[int]] = {}
    for name, op_name in _INSTRUCTION.findall(hlo_text):
        for tag in re.findall(r"(?:^|/)(gcp\d+)(?=/|$)", op_name):
            if name in node_of:
                tagged.setdefault(tag, []).append(node_of[name])
    found: dict[int, int] = {}
    used: set[int] = set()
    for p, pt in enumerate(space.points):
        if pt.kind == "parameter":
            node = params.get(pt.index)
        else:
            cands = sorted(tagged.get(pt.tag, []))
            ranked = sorted(cands, key=lambda i: _opcode_rank(node_opcodes[i], pt.kind))
            node = next((i for i in ranked if i not in used), None)
        if node is not None and node not in used:
            found[p] = node
            used.add(node)
    return found


def _opcode_rank(opcode: str, kind: str) -> int:
    preferred = _PREFERRED_OPCODES.get(kind, _PREFERRED_OPCODES["dot"])
    return preferred.index(opcode) if opcode in preferred else 99


def sample_layout_plans(space: LayoutSpace, count: int, mode: str,
                        rng: np.random.Generator) -> list[LayoutPlan]:
    """`count` distinct plans, the default (empty) plan first.

    `random`: every tensor value with a slot gets a uniformly random permutation, set at
    each of its slots (a parameter feeding a dot is one value). `default`: the default
    plan plus 1-3 local moves (set one slot to row-major with two adjacent dims swapped,
    or swap two adjacent dims of a slot already set).
    """
    if mode not in ("random", "default"):
        raise UserError(f"layout sampling mode must be 'random' or 'default', got {mode!r}")
    plans: list[LayoutPlan] = [{}]
    seen = {_key({})}
    if not space.slots:
        return plans
    for _ in range(count * 20):
        if len(plans) >= count:
            break
        plan = _random_plan(space, rng) if mode == "random" else _local_plan(space, rng)
        if _key(plan) not in seen:
            seen.add(_key(plan))
            plans.append(plan)
    return plans


def _key(plan: LayoutPlan) -> tuple:
    return tuple(sorted(plan.items()))


def _random_plan(space: LayoutSpace, rng: np.random.Generator) -> LayoutPlan:
    """A random permutation per tensor value, used by every slot that constrains it (two
    different constraints on one value would only add a copy, and a compile-time kernel)."""
    plan: LayoutPlan = {}
    by_value: dict[int, tuple[int, ...]] = {}
    for s in space.slots:
        v = space.value(s)
        if v is None or v not in by_value:
            order = tuple(int(i) for i in rng.permutation(space.rank(s)))
            if v is not None:
                by_value[v] = order
        plan[s] = by_value.get(v, order) if v is not None else order
    return plan


def _local_plan(space: LayoutSpace, rng: np.random.Generator) -> LayoutPlan:
    plan: LayoutPlan = {}
    for _ in range(int(rng.integers(1, 4))):
        slot = space.slots[int(rng.integers(len(space.slots)))]
        order = list(plan.get(slot, range(space.rank(slot))))
        i = int(rng.integers(len(order) - 1))
        order[i], order[i + 1] = order[i + 1], order[i]
        plan[slot] = tuple(order)
    return plan
