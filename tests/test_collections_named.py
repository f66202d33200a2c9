"""Two collections of one name below a folder are refused, not one silently hidden, and
the bundled sample's commands read its collections, not its table."""

from __future__ import annotations

import shutil

import pytest

from graphcost.data.collection import find_collections
from graphcost.data.inspect import sample_collections, sample_root
from graphcost.errors import CollectionError


def test_two_collections_of_one_name_are_refused_naming_both(tmp_path):
    options = sample_collections() / "options" / "cpu"
    for where in ("a", "b"):
        shutil.copytree(options / "test", tmp_path / where / "npz" / "options" / "cpu" / "test")
    with pytest.raises(CollectionError, match=r"two collections named options:cpu.*a/npz.*b/npz"):
        find_collections(tmp_path)


def test_the_bundled_collections_are_not_the_table():
    found = find_collections(sample_collections())
    assert set(found) == {"layout:cpu:random", "layout:cpu:default", "options:cpu"}
    assert found["options:cpu"].root == sample_collections() / "options" / "cpu"
    with pytest.raises(CollectionError, match="two collections named options:cpu"):
        find_collections(sample_root())  # the table is options:cpu too
