"""Every bad-input class gets one error naming the file and the key."""

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import raw_arrays

from graphcost.cli import main
from graphcost.data.collection import open_collection
from graphcost.formats import GraphFileError, read_graph, validate_graph, write_graph


def _break(graph, **changes):
    a = raw_arrays(graph)
    for k, v in changes.items():
        if v is None:
            del a[k]
        else:
            a[k] = v(a[k]) if callable(v) else v
    return a


TILE_CASES = {
    "missing_key": ("config_runtime_normalizers", dict(config_runtime_normalizers=None)),
    "wrong_feature_width": ("node_feat", dict(node_feat=lambda x: x[:, :139])),
    "opcode_count_disagrees": ("node_opcode", dict(node_opcode=lambda x: x[:-1])),
    "edge_out_of_range": ("edge_index", dict(edge_index=lambda e: np.vstack([e, [[0, 999]]]))),
    "negative_edge": ("edge_index", dict(edge_index=lambda e: np.vstack([e, [[-1, 0]]]))),
    "zero_configs": ("config_feat", dict(
        config_feat=np.zeros((0, 24), np.float32), config_runtime=np.zeros(0, np.int64),
        config_runtime_normalizers=np.zeros(0, np.int64))),
    "runtime_count_disagrees": ("config_runtime", dict(config_runtime=lambda r: r[:-1])),
    "nonpositive_runtime": ("config_runtime", dict(config_runtime=lambda r: r * 0)),
    "zero_normalizer": ("config_runtime_normalizers",
                        dict(config_runtime_normalizers=lambda r: r * 0)),
    "text_array": ("node_opcode", dict(node_opcode=lambda x: x.astype(str))),
}

LAYOUT_CASES = {
    "missing_key": ("node_splits", dict(node_splits=None)),
    "config_id_out_of_range": ("node_config_ids", dict(node_config_ids=lambda x: x + 1000)),
    "config_feat_width": ("node_config_feat", dict(node_config_feat=lambda x: x[:, :, :17])),
    "config_nodes_disagree": ("node_config_feat", dict(node_config_feat=lambda x: x[:, 1:])),
    "zero_configs": ("node_config_feat", dict(node_config_feat=lambda x: x[:0],
                                              config_runtime=lambda r: r[:0])),
    "nan_runtime": ("config_runtime", dict(config_runtime=lambda r: np.where(
        np.arange(r.size) == 3, np.nan, r))),
    "split_out_of_range": ("node_splits", dict(node_splits=np.array([0, 10_000]))),
}


@pytest.mark.parametrize("case", sorted(TILE_CASES))
def test_bad_tile_file_names_file_and_key(tmp_path, tile_graph, case):
    key, changes = TILE_CASES[case]
    path = tmp_path / f"bad_{case}.npz"
    np.savez(path, **_break(tile_graph, **changes))
    with pytest.raises(GraphFileError) as e:
        read_graph(path)
    assert e.value.key == key
    assert str(path) in str(e.value) and f"'{key}'" in str(e.value)
    assert "expected" in str(e.value)


@pytest.mark.parametrize("case", sorted(LAYOUT_CASES))
def test_bad_layout_file_names_file_and_key(tmp_path, layout_graph, case):
    key, changes = LAYOUT_CASES[case]
    path = tmp_path / f"bad_{case}.npz"
    np.savez(path, **_break(layout_graph, **changes))
    with pytest.raises(GraphFileError) as e:
        read_graph(path)
    assert e.value.key == key and str(path) in str(e.value)


def test_nan_in_features_is_found_by_the_deep_check_which_every_read_runs(tmp_path,
                                                                          layout_graph):
    """The deep check alone scans the big arrays; reading a file runs it (issue 30: a
    file validate calls bad must not be ranked or trained on by any other command)."""
    layout_graph.node_config_feat[5, 0, 3] = np.nan
    path = tmp_path / "nan.npz"
    np.savez(path, **raw_arrays(layout_graph))
    validate_graph(layout_graph, path, deep=False)  # cheap checks pass: no scan
    with pytest.raises(GraphFileError) as e:
        validate_graph(layout_graph, path, deep=True)
    assert e.value.key == "node_config_feat" and "row 5" in str(e.value)
    for lazy in (True, False):
        with pytest.raises(GraphFileError) as e:
            read_graph(path, lazy=lazy)
        assert e.value.key == "node_config_feat" and "row 5" in str(e.value)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "not_npz", "empty"])
def test_corrupt_archives(tmp_path, tile_graph, damage):
    good = write_graph(tmp_path / "good.npz", tile_graph).read_bytes()
    path = tmp_path / f"{damage}.npz"
    path.write_bytes({"truncate": good[: len(good) // 3],
                      "garbage": good[:200] + bytes(len(good) - 200),
                      "not_npz": b"hello, not a zip file",
                      "empty": b""}[damage])
    with pytest.raises(GraphFileError) as e:
        read_graph(path)
    assert str(path) in str(e.value)


def test_writer_refuses_a_bad_graph(tmp_path, tile_graph):
    tile_graph.config_runtime_normalizers[:] = 0
    with pytest.raises(GraphFileError, match="config_runtime_normalizers"):
        write_graph(tmp_path / "x.npz", tile_graph)
    assert not list(tmp_path.iterdir())


def _collection_with_bad_files(tmp_path, tile_graph):
    split = tmp_path / "npz" / "tile" / "xla" / "train"
    write_graph(split / "a.npz", tile_graph)
    write_graph(split / "b.npz", tile_graph)
    np.savez(split / "bad1.npz", **_break(tile_graph, config_runtime=lambda r: -r))
    (split / "bad2.npz").write_bytes(b"junk")
    return split


def test_validate_command_lists_every_bad_file(tmp_path, tile_graph):
    _collection_with_bad_files(tmp_path, tile_graph)
    result = CliRunner().invoke(main, ["validate", str(tmp_path)])
    assert result.exit_code == 1
    assert "bad1.npz" in result.output and "bad2.npz" in result.output
    assert "2 of 4 files valid, 2 bad" in result.output
    ok = CliRunner().invoke(main, ["validate", str(tmp_path / "npz/tile/xla/train/a.npz")])
    assert ok.exit_code == 0, ok.output


def test_collection_skips_bad_files_and_reports_them(tmp_path, tile_graph, caplog):
    _collection_with_bad_files(tmp_path, tile_graph)
    coll = open_collection(tmp_path)
    names = [g.name for g in coll.graphs("train")]
    assert names == ["a", "b"]
    assert sorted(e.path.rsplit("/", 1)[1] for e in coll.skipped) == ["bad1.npz", "bad2.npz"]
    assert "bad1.npz" in caplog.text and "bad2.npz" in caplog.text


def test_test_split_files_without_runtimes_are_valid_elsewhere_not(tmp_path, tile_graph):
    """The published test split has no runtimes: there it is a file to rank, valid; the
    same file in train is refused, naming the key."""
    from graphcost.data.inspect import validate_paths

    a = raw_arrays(tile_graph)
    a["config_runtime"] = np.zeros_like(a["config_runtime"])
    for split in ("test", "train"):
        (tmp_path / split).mkdir()
        np.savez(tmp_path / split / "k.npz", **a)
    bad = validate_paths([tmp_path])
    assert [(Path(e.path).parent.name, e.key) for e in bad] == [("train", "config_runtime")]
    del a["config_runtime"]
    np.savez(tmp_path / "test" / "k.npz", **a)
    assert validate_paths([tmp_path / "test"]) == []
    r = CliRunner().invoke(main, ["info", str(tmp_path / "test" / "k.npz")])
    assert r.exit_code == 0 and "k.npz" in r.output
