"""Transposes and reductions are layout points: found, constrained, located again."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from graphcost.formats.hlo import OPCODE_IDS, hlo_bytes_to_graph  # noqa: E402
from graphcost.xla.configs import LayoutSpace, locate_points, sample_layout_plans  # noqa: E402
from graphcost.xla.timing import outputs_agree  # noqa: E402


def mixed(x, w):
    h = jnp.tanh(x @ w)  # dot
    t = h.T * 2.0  # transpose
    return t.sum(0) + jnp.max(t, axis=1).sum()  # reduce_sum, reduce_max


def _args():
    rng = np.random.default_rng(0)
    return (jnp.asarray(rng.standard_normal((32, 48)), jnp.float32),
            jnp.asarray(rng.standard_normal((48, 24)), jnp.float32))


def test_transposes_and_reductions_are_points_with_in_and_out_roles():
    space = LayoutSpace(mixed, _args())
    kinds = [p.kind for p in space.points]
    assert kinds[:2] == ["parameter", "parameter"]
    assert kinds.count("dot") == 1 and kinds.count("transpose") == 1
    assert kinds.count("reduce") == 3  # sum(0), max(axis=1) and the final .sum()
    for p in space.points:
        if p.kind in ("transpose", "reduce"):
            assert set(p.ranks) == {"in", "out"}
    t = kinds.index("transpose")
    assert {r for p, r in space.slots if p == t} == {"in", "out"}
    # reductions to rank 1 have only their (rank-2) input as a slot
    assert all(r == "in" for p, r in space.slots if space.points[p].kind == "reduce")


def test_constrained_transpose_and_reduction_compile_and_agree():
    args = _args()
    space = LayoutSpace(mixed, args)
    default = space.compile({})
    t = [p.kind for p in space.points].index("transpose")
    r = [p.kind for p in space.points].index("reduce")
    plan = {(t, "out"): (1, 0), (r, "in"): (1, 0)}
    changed = space.compile(plan)
    assert changed.as_text() != default.as_text()
    assert outputs_agree(jax.tree.leaves(changed(*args)), jax.tree.leaves(default(*args)))
    for plan in sample_layout_plans(space, 6, "random", np.random.default_rng(1))[1:]:
        exe = space.compile(plan)
        xs = [jax.device_put(a, f) for a, f in zip(args, exe.input_formats[0], strict=True)]
        assert outputs_agree(jax.tree.leaves(exe(*xs)), jax.tree.leaves(default(*args)))


def test_locate_points_finds_transposes_and_reductions():
    space = LayoutSpace(mixed, _args())
    exe = space.compile({})
    hlo = hlo_bytes_to_graph(exe.runtime_executable().hlo_modules()[0]
                             .as_serialized_hlo_module_proto())
    names = {v: k for k, v in OPCODE_IDS.items()}
    located = locate_points(space, exe.as_text(), hlo.node_names,
                            [names.get(int(o), "") for o in hlo.node_opcode])
    kinds = {space.points[p].kind for p in located}
    assert {"parameter", "dot"} <= kinds
    assert kinds & {"transpose", "reduce"}
    assert len(set(located.values())) == len(located)  # one node per point


def test_random_plans_give_each_tensor_value_one_layout():
    space = LayoutSpace(mixed, _args())
    kinds = [p.kind for p in space.points]
    dot, t = kinds.index("dot"), kinds.index("transpose")
    assert space.value((0, "out")) == space.value((dot, "in"))  # x feeds the dot
    assert space.value((1, "out")) == space.value((dot, "kernel"))
    assert space.value((dot, "out")) != space.value((t, "in"))  # tanh lies between
    for plan in sample_layout_plans(space, 8, "random", np.random.default_rng(2))[1:]:
        assert plan[(0, "out")] == plan[(dot, "in")]
        assert plan[(1, "out")] == plan[(dot, "kernel")]


def test_values_are_followed_through_inlined_jit_calls():
    def f(x, w):
        return jax.jit(lambda a, b: a @ b)(x, w).T

    space = LayoutSpace(f, _args())
    kinds = [p.kind for p in space.points]
    dot, t = kinds.index("dot"), kinds.index("transpose")
    assert space.value((dot, "in")) == space.value((0, "out"))
    assert space.value((dot, "out")) == space.value((t, "in"))
    assert space.value((t, "out")) not in {space.value(s) for s in space.slots if s[0] != t}


def test_layout_spaces_keep_the_largest_tensors_up_to_max_slots():
    rng = np.random.default_rng(0)
    ws = [jnp.asarray(rng.standard_normal((16 * (i + 1), 16 * (i + 2))), jnp.float32)
          for i in range(8)]
    x = jnp.ones((8, 16), jnp.float32)

    def chain(x, ws):
        for w in ws:
            x = jnp.tanh(x @ w)
        return x

    full = LayoutSpace(chain, (x, ws), max_slots=1000)
    assert len(full.slots) > 20
    space = LayoutSpace(chain, (x, ws))
    assert len(space.slots) == min(len(full.slots), 48)
    small = LayoutSpace(chain, (x, ws), max_slots=3)
    assert small.slots == [(7, "out"), (8, "out"), (16, "kernel")]  # the largest tensors
