"""The program zoo: deterministic, named by family, traceable; user program sources."""

import pytest

jax = pytest.importorskip("jax")

from graphcost.xla.programs import FAMILIES, family_of, load_programs, make_program, zoo  # noqa: E402


def test_every_family_traces_and_names_carry_the_family():
    progs = zoo(per_family=1)
    assert {family_of(n) for n, _, _ in progs} == set(FAMILIES)
    for name, fn, args in progs:
        jaxpr = jax.make_jaxpr(fn)(*args)
        assert jaxpr.eqns, name


def test_programs_are_reproducible_and_varied():
    a, b = make_program("mlp", 3), make_program("mlp", 3)
    shapes = [x.shape for x in jax.tree.leaves(a[2])]
    assert a[0] == b[0] == "mlp.003"
    assert shapes == [x.shape for x in jax.tree.leaves(b[2])]
    variants = {tuple(x.shape for x in jax.tree.leaves(make_program("mlp", i)[2]))
                for i in range(6)}
    assert len(variants) > 1


def test_zoo_rejects_unknown_families():
    with pytest.raises(ValueError, match="unknown program families"):
        zoo(families=["nope"])


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
