"""Configuration spaces of a JAX program on XLA:CPU: layouts (node-level) and options.

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

Compiler options (graph-level, as tile). `OPTION_KNOBS` lists options seen to change
CPU runtime; each knob's first choice is "leave it unset". `option_features` encodes a
config as 24 floats: feature i (i < len(OPTION_KNOBS)) is knob i's code (documented in
the table; 0 = unset/default except where the code is the option's own number), the
unused features up to 22 are 0, and feature 23 counts the knobs set away from default.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphcost.errors import UserError
from graphcost.formats.records import NUM_LAYOUT_CONFIG_FEATURES, NUM_TILE_CONFIG_FEATURES

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
        """The executable (XLA may refuse): collection's, autotuning's and apply's path."""
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


# ------------------------------------------------------------------ compiler options


@dataclass(frozen=True)
class Knob:
    """One compiler option: choices (None = unset) and their feature codes."""

    name: str
    option: str  # the XLA option, or "disable:<pass>" for xla_disable_hlo_passes
    choices: tuple
    codes: tuple[float, ...]


#: feature i of an options config is OPTION_KNOBS[i]'s code; every name below was accepted by jax
#: 0.10.2's XLA:CPU (see `check_knobs`). Each knob alone moved the runtime of at least one of 10
#: zoo programs by more than 10% except `fast_math` (at most 8%, kept: tests use it as the
#: codegen-only option); dropped because they never did (at most 7%, within noise):
#: `xla_llvm_disable_expensive_passes`, `xla_cpu_strict_dot_conv_math`. `ynn_fusion`'s fusion types
#: and `no_platform_math` came from `bench knobs` (each ≥ 5% faster beyond noise on some zoo
#: programs: train_cnn with INDIVIDUAL_CONVOLUTION, pyramid and cnn_nchw with portable math). Codes
#: only grow: a config stored before a knob or value was added keeps its features.
_YNN = "LIBRARY_FUSION_TYPE_"
OPTION_KNOBS: tuple[Knob, ...] = (
    Knob("no_fusion", "disable:fusion", (None, True), (0, 1)),
    Knob("no_dot_library_rewriter", "disable:dot-library-rewriter", (None, True), (0, 1)),
    Knob("no_parallel_task_assigner", "disable:cpu-parallel-task-assigner", (None, True), (0, 1)),
    Knob("backend_optimization_level", "xla_backend_optimization_level",
         (None, 0, 1, 2), (3, 0, 1, 2)),
    Knob("prefer_vector_width", "xla_cpu_prefer_vector_width", (None, 128, 512), (1, 0.5, 2)),
    # what YNNPACK fuses: unset (DOT,ELTWISE,REDUCE), nothing, or one fusion type
    Knob("ynn_fusion", "xla_cpu_experimental_ynn_fusion_type",
         (None, "", _YNN + "DOT", _YNN + "REDUCE", _YNN + "INDIVIDUAL_DOT",
          _YNN + "INDIVIDUAL_CONVOLUTION"), (0, 1, 2, 3, 4, 5)),
    Knob("no_xnn_fusion", "xla_cpu_experimental_xnn_fusion_type", (None, ""), (0, 1)),
    Knob("fast_math", "xla_cpu_enable_fast_math", (None, True), (0, 1)),
    Knob("no_fusion_emitters", "xla_cpu_use_fusion_emitters", (None, False), (0, 1)),
    Knob("max_isa", "xla_cpu_max_isa", (None, "SSE4_2", "AVX", "AVX2"), (0, 1, 2, 3)),
    # portable math codegen: same HLO, 1.3-1.6x faster on cnn_nchw, pyramid, train_cnn,
    # 0.7-0.9x on depthwise, grouped_conv, unet
    Knob("no_platform_math", "xla_cpu_enable_platform_dependent_math", (None, False), (0, 1)),
)
OptionsConfig = tuple[int, ...]  # one choice index per knob; all 0 = default_options()

#: XLA:CPU options beyond OPTION_KNOBS that might make a program faster, for `graphcost bench
#: knobs` (not features: `option_features` encodes OPTION_KNOBS only). Kept from ~30 options of jax
#: 0.10.2 tried alone (optimized HLO compared on 47 zoo programs, speed on one of each of the 24
#: families, 6 rounds, "faster" = 95% interval above 1): each value compiles and changed the HLO or
#: the speed of some program. Values are typed as the DebugOptions field: enums by name, a list of
#: enums as comma-separated names.
CANDIDATE_KNOBS: tuple[Knob, ...] = (
    # jax sets it False (NaN-propagating min/max); True: plain vector min/max (relu, max
    # pooling, softmax's max). New HLO on 12 of 47 programs; no speed change seen yet.
    Knob("fast_min_max", "xla_cpu_enable_fast_min_max", (None, True), (0, 1)),
    # a memory-optimized schedule (buffers reused sooner): new order on 23 of 24 programs
    Knob("scheduler", "xla_cpu_scheduler_type", (None, "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED"),
         (0, 1)),
    # copy insertion drops copies of loop state: new HLO for scans and loops (rnn, gnn)
    Knob("region_copy_insertion", "xla_cpu_copy_insertion_use_region_analysis",
         (None, True), (0, 1)),
    # experimental codegen tiling: same HLO, 9 of 24 programs slower (none faster yet)
    Knob("tiling_propagation", "xla_cpu_experimental_enable_tiling_propagation",
         (None, True), (0, 1)),
)
#: Rejected. "No such compile option": xla_cpu_ + use_multi_output_fusion, flatten_after_ fusion,
#: fold_all_constants, small_while_loop_byte_threshold, disable_slp_vectorizer,
#: disable_loop_unrolling, optimize_for_size, disable_platform_dependent_math. Same HLO on all 47
#: and never 5% faster: xla_cpu_experimental_ + xnn_fusion_type (YNN takes those fusions),
#: xnn_graph_fusion_mode, onednn_fusion_type, onednn_custom_call; xla_cpu_ + use_onednn,
#: use_xnnpack=False, multi_thread_eigen=False, opt_preset=FAST_RUNTIME, scheduler
#: CONCURRENCY_OPTIMIZED, parallel_codegen_split_count=1, ftz=False (on by default),
#: enable_concurrency_optimized_scheduler (deprecated), use_acl (ARM);
#: exec_time_optimization_effort, optimization_level. Only switch optimisations off:
#: opt_preset=FAST_COMPILE (4 slower, none 5% faster), xla_llvm_enable_*_metadata=False. Need
#: fast_math set too: xla_cpu_fast_math_honor_*. Outlive one compile (LLVM's global flags):
#: xla_backend_extra_options.


def default_options(knobs: Sequence[Knob] = OPTION_KNOBS) -> OptionsConfig:
    return (0,) * len(knobs)


def compiler_options(config: OptionsConfig,
                     knobs: Sequence[Knob] = OPTION_KNOBS) -> dict[str, Any]:
    """The `compile(compiler_options=...)` dict of a config (empty for the default)."""
    opts: dict[str, Any] = {}
    disabled: list[str] = []
    for knob, choice in zip(knobs, config, strict=True):
        value = knob.choices[choice]
        if value is None:
            continue
        if knob.option.startswith("disable:"):
            disabled.append(knob.option.split(":", 1)[1])
        else:
            opts[knob.option] = value
    if disabled:
        opts["xla_disable_hlo_passes"] = ",".join(disabled)
    return opts


def option_features(config: OptionsConfig,
                    knobs: Sequence[Knob] = OPTION_KNOBS) -> np.ndarray:
    """24 floats: knob codes, zeros, and the number of knobs set away from default."""
    out = np.zeros(NUM_TILE_CONFIG_FEATURES, dtype=np.float32)
    for i, (knob, choice) in enumerate(zip(knobs, config, strict=True)):
        out[i] = knob.codes[choice]
    out[-1] = sum(c != 0 for c in config)
    return out


def option_choices(features: np.ndarray,
                   knobs: Sequence[Knob] = OPTION_KNOBS) -> OptionsConfig:
    """The config `option_features` encoded, read back from its knobs' codes; a
    ValueError names the feature whose value is no code of its knob."""
    out = []
    for i, (knob, code) in enumerate(zip(knobs, np.asarray(features), strict=False)):
        if float(code) not in knob.codes:
            raise ValueError(f"feature {i} is {code}, not a code of knob {knob.name} "
                             f"{list(knob.codes)}")
        out.append(knob.codes.index(float(code)))
    return tuple(out)


def sample_option_configs(count: int, rng: np.random.Generator, p: float = 0.3,
                          knobs: Sequence[Knob] = OPTION_KNOBS) -> list[OptionsConfig]:
    """`count` distinct configs, the default first: each knob moves off default w.p. `p`."""
    configs = [(0,) * len(knobs)]
    seen = set(configs)
    total = int(np.prod([len(k.choices) for k in knobs]))
    for _ in range(count * 20):
        if len(configs) >= min(count, total):
            break
        c = tuple(int(rng.integers(1, len(k.choices))) if rng.random() < p else 0
                  for k in knobs)
        if c not in seen:
            seen.add(c)
            configs.append(c)
    return configs


def check_knobs(knobs: Sequence[Knob] = OPTION_KNOBS) -> dict[str, str]:
    """Compile a tiny program with every non-default choice: 'ok' or the error, by choice."""
    import jax
    import jax.numpy as jnp

    lowered = jax.jit(lambda x, w: jnp.tanh(x @ w).sum()).lower(jnp.ones((8, 8)), jnp.ones((8, 8)))
    result = {}
    for i, knob in enumerate(knobs):
        for choice in range(1, len(knob.choices)):
            config = tuple(choice if j == i else 0 for j in range(len(knobs)))
            label = f"{knob.name}={knob.choices[choice]!r}"
            try:
                lowered.compile(compiler_options(config, knobs))
                result[label] = "ok"
            except Exception as e:  # XLA raises its own error types
                result[label] = str(e).splitlines()[0]
    return result

