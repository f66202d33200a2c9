"""The vocabulary of graphcost.kinds: every graph kind and measure kind has one space,
anything else is refused by name."""

import ast
from pathlib import Path

import pytest

from graphcost.kinds import GRAPH_KINDS, MEASURE_KINDS, SPACES, graph_kind_of, space_of


@pytest.mark.parametrize("kind, space", [
    ("tile", "options"), ("layout", "layout"),  # graph kinds
    ("layout:random", "layout"), ("layout:default", "layout"), ("options", "options"),
])
def test_space_of_maps_every_graph_kind_and_measure_kind(kind, space):
    assert space_of(kind) == space


def test_every_value_of_the_vocabulary_has_a_space():
    assert {space_of(k) for k in GRAPH_KINDS} == set(SPACES)
    assert {space_of(k) for k in MEASURE_KINDS} == set(SPACES)


@pytest.mark.parametrize("bad", ["", "tiles", "Layout", "option", "layout:", "layout:bogus",
                                 "layout:cpu:random", "options:cpu", "tile:xla", "random"])
def test_space_of_refuses_an_unknown_kind_by_name(bad):
    with pytest.raises(ValueError, match=f"unknown kind {bad!r}"):
        space_of(bad)


def test_graph_kind_of_inverts_space_of_on_graph_kinds():
    assert [graph_kind_of(space_of(k)) for k in GRAPH_KINDS] == list(GRAPH_KINDS)
    with pytest.raises(ValueError, match="unknown space 'tile'"):
        graph_kind_of("tile")


def test_kinds_imports_nothing_of_graphcost():
    """It sits below every layer, so any module may use the words."""
    tree = ast.parse((Path(__file__).parents[1] / "graphcost" / "kinds.py").read_text())
    imported = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    imported += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in imported if m.startswith("graphcost")]
