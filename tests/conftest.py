import numpy as np
import pytest

from graphcost.data.synthetic import make_layout_graph, make_tile_graph
from graphcost.formats.npz import LAYOUT_KEYS, TILE_KEYS


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Every test gets its own extraction cache, so none sees another's files."""
    monkeypatch.setenv("GRAPHCOST_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def tile_graph():
    return make_tile_graph(np.random.default_rng(0), num_nodes=20, num_configs=30, name="t0")


@pytest.fixture
def layout_graph():
    return make_layout_graph(np.random.default_rng(0), num_nodes=60, num_configs=40, name="l0")


def raw_arrays(graph) -> dict:
    """The arrays of a graph as a plain dict, to be broken and saved with np.savez."""
    keys = TILE_KEYS if graph.kind == "tile" else LAYOUT_KEYS
    return {k: np.array(getattr(graph, k)) for k in keys}
