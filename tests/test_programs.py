"""The program zoo: every family builds, runs, is deterministic and varied; user sources."""

import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from graphcost.xla.configs import LayoutSpace  # noqa: E402
from graphcost.xla.programs import FAMILIES, family_of, load_programs, make_program, zoo  # noqa: E402


def _signature(args) -> tuple:
    return tuple((tuple(x.shape), str(x.dtype)) for x in jax.tree.leaves(args))


def test_the_zoo_has_enough_well_named_families():
    assert len(FAMILIES) >= 22
    for name in FAMILIES:
        assert re.fullmatch(r"[a-z0-9_]+", name), name


def test_every_family_traces_and_names_carry_the_family():
    progs = zoo(per_family=2, seed=3)
    assert len(progs) == 2 * len(FAMILIES)
    assert {family_of(n) for n, _, _ in progs} == set(FAMILIES)
    for name, fn, args in progs:
        assert re.fullmatch(r"[a-z0-9_]+\.\d{3}", name), name
        assert name.startswith(family_of(name) + ".")
        assert jax.make_jaxpr(fn)(*args).eqns, name


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_compiles_runs_and_has_layout_points(family):
    name, fn, args = make_program(family, 0)
    out = jax.tree.leaves(jax.jit(fn)(*args))
    assert out, name
    for x in out:
        x = np.asarray(x)
        assert x.size and np.isfinite(x.astype(np.float64)).all(), name
    space = LayoutSpace(fn, args)
    assert any(p.kind != "parameter" for p in space.points), name
    assert space.slots, name


def test_programs_are_deterministic():
    for family in FAMILIES:
        a, b = make_program(family, 2, seed=7), make_program(family, 2, seed=7)
        assert a[0] == b[0] == f"{family}.002"
        assert _signature(a[2]) == _signature(b[2]), family
        for x, y in zip(jax.tree.leaves(a[2]), jax.tree.leaves(b[2]), strict=True):
            assert np.array_equal(np.asarray(x), np.asarray(y)), family
        assert str(jax.make_jaxpr(a[1])(*a[2])) == str(jax.make_jaxpr(b[1])(*b[2])), family


def test_programs_vary_within_a_family_and_with_the_seed():
    for family in FAMILIES:
        variants = {_signature(make_program(family, i)[2]) for i in range(6)}
        assert len(variants) > 1, family
    a, b = make_program("mlp", 0, seed=0), make_program("mlp", 0, seed=1)
    assert any(not np.array_equal(np.asarray(x), np.asarray(y))
               for x, y in zip(jax.tree.leaves(a[2]), jax.tree.leaves(b[2]), strict=False))


def test_bf16_is_rare():
    dtypes = [str(x.dtype) for _, _, args in zoo(per_family=4) for x in jax.tree.leaves(args)]
    assert dtypes.count("bfloat16") < 0.2 * len(dtypes)


def test_zoo_rejects_unknown_families():
    with pytest.raises(ValueError, match="unknown program families"):
        zoo(families=["nope"])


def test_zoo_keeps_the_families_asked_for():
    progs = zoo(per_family=2, families=["gnn", "moe"])
    assert [n for n, _, _ in progs] == ["gnn.000", "gnn.001", "moe.000", "moe.001"]


def test_load_programs_passes_only_accepted_kwargs():
    progs = load_programs("graphcost.xla.programs:zoo", per_family=1, families=["rnn"],
                          unused=True)
    assert [n for n, _, _ in progs] == ["rnn.000"]
    with pytest.raises(ValueError, match="MODULE:FUNCTION"):
        load_programs("no_colon")


def duplicate_programs():
    fn = lambda x: x  # noqa: E731
    return [("a.0", fn, (1.0,)), ("a.0", fn, (2.0,))]


def test_load_programs_rejects_duplicate_names():
    with pytest.raises(ValueError, match="unique"):
        load_programs("test_programs:duplicate_programs")
