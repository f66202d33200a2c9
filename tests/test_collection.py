import numpy as np
import pytest

from graphcost.data.collection import find_collections, open_collection, summarize_file
from graphcost.data.dedup import dedup_configs
from graphcost.data.synthetic import write_collection
from graphcost.errors import CollectionError
from graphcost.formats import read_graph, write_graph


def test_discovers_and_names_collections(tmp_path):
    write_collection(tmp_path, "tile", source="xla", splits={"train": 2, "valid": 1})
    write_collection(tmp_path, "layout", source="xla", search="random",
                     splits={"train": 2, "test": 1}, num_nodes=40, num_configs=5)
    write_collection(tmp_path, "layout", source="nlp", search="default",
                     splits={"valid": 1}, num_nodes=40, num_configs=5)
    found = find_collections(tmp_path)
    assert sorted(found) == ["layout:nlp:default", "layout:xla:random", "tile:xla"]
    assert found["tile:xla"].kind == "tile"
    assert sorted(found["layout:xla:random"].splits) == ["test", "train"]
    assert len(found["layout:xla:random"].files("train")) == 2
    with pytest.raises(CollectionError, match="no split 'valid'"):
        found["layout:xla:random"].files("valid")
    one = open_collection(tmp_path / "npz" / "tile" / "xla")
    assert one.name == "tile:xla"
    split_only = open_collection(tmp_path / "npz" / "tile" / "xla" / "train")
    assert split_only.name == "tile:xla" and list(split_only.splits) == ["train"]
    with pytest.raises(CollectionError, match="expected one collection, found 3: layout:nlp"):
        open_collection(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CollectionError, match="empty: no collection here"):
        open_collection(tmp_path / "empty")


def test_plain_folder_is_one_collection(tmp_path, tile_graph):
    write_graph(tmp_path / "mine" / "k.npz", tile_graph)
    coll = open_collection(tmp_path / "mine")
    assert coll.name == "mine" and list(coll.splits) == ["all"]
    assert [g.name for g in coll.graphs("all")] == ["k"]


def test_summary_from_headers(tmp_path, layout_graph):
    path = write_graph(tmp_path / "l.npz", layout_graph)
    s = summarize_file(path)
    assert (s.kind, s.nodes, s.edges, s.configs, s.configurable) == (
        "layout", 60, layout_graph.edge_index.shape[0], 40, layout_graph.node_config_ids.size)


def test_dedup_keeps_one_row_per_group_at_the_group_median(tmp_path, layout_graph):
    """Repeated measurements of one config train at their median, not the fastest (which
    biases every duplicated config fast); the original runtimes are left untouched."""
    ncf = layout_graph.node_config_feat
    ncf[10] = ncf[3]
    ncf[20] = ncf[3]
    rt = layout_graph.config_runtime
    rt[3], rt[10], rt[20] = 5.0, 4.0, 9.0
    g = read_graph(write_graph(tmp_path / "d.npz", layout_graph))
    keep, target = dedup_configs(g)
    assert g.num_configs - keep.size >= 2
    assert 3 in keep and 10 not in keep and 20 not in keep
    assert target[3] == 5.0  # the median of 5, 4 and 9 (the minimum would be 4)
    assert g.config_runtime[3] == 5.0 and target is not g.config_runtime
    unique = np.setdiff1d(np.arange(g.num_configs), [3, 10, 20])
    np.testing.assert_array_equal(target[unique], g.config_runtime[unique])
    assert np.all(np.diff(keep) > 0)
    rows = {g.configs(np.array([i])).tobytes() for i in keep}
    assert len(rows) == keep.size  # what is kept is unique


def test_dedup_tile_pairs_train_at_their_mean(tile_graph):
    tile_graph.config_feat[1] = tile_graph.config_feat[0]
    keep, target = dedup_configs(tile_graph)
    assert 0 in keep and 1 not in keep and keep.size < tile_graph.num_configs
    assert target[0] == np.mean(tile_graph.target[[0, 1]])  # the median of two
    assert (0 in keep) != (1 in keep)
