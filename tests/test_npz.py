import zipfile

import numpy as np
import pytest
from conftest import raw_arrays

from graphcost.formats import GraphFileError, LayoutGraph, read_graph, write_graph
from graphcost.formats.compact import CompactConfigs
from graphcost.formats.npz import cache_dir, open_member_mmap


def _same(a, b):
    assert type(a) is type(b)
    for k, v in vars(a).items():
        w = getattr(b, k)
        if isinstance(v, np.ndarray):
            runtime = k in ("config_runtime", "config_runtime_normalizers")
            assert np.asarray(w).dtype == (np.float64 if runtime else v.dtype), k
            np.testing.assert_array_equal(np.asarray(w), v, err_msg=k)
        else:
            assert w == v, k


@pytest.mark.parametrize("compress", [True, False])
def test_tile_and_layout_round_trip(tmp_path, tile_graph, layout_graph, compress):
    for g in (tile_graph, layout_graph):
        path = write_graph(tmp_path / f"{g.name}.npz", g, compress=compress)
        _same(g, read_graph(path, lazy=True))
        _same(g, read_graph(path, lazy=False))


def test_dtypes_seen_in_the_wild_are_cast_and_splits_flattened(tmp_path, layout_graph):
    a = raw_arrays(layout_graph)
    a["node_opcode"] = a["node_opcode"].astype(np.uint8)
    a["edge_index"] = a["edge_index"].astype(np.int32)
    a["node_config_ids"] = a["node_config_ids"].astype(np.int32)
    a["config_runtime"] = a["config_runtime"].astype(np.int64)
    a["node_splits"] = np.array([[0, 10, 30]], dtype=np.int32)  # (1, k) as published
    np.savez(tmp_path / "wild.npz", **a)
    g = read_graph(tmp_path / "wild.npz")
    assert g.node_opcode.dtype == np.int64 and g.edge_index.dtype == np.int64
    assert g.config_runtime.dtype == np.float64
    assert g.node_splits.tolist() == [0, 10, 30]
    np.testing.assert_array_equal(g.node_opcode, layout_graph.node_opcode)


def test_empty_edge_list_reads_as_m_by_2(tmp_path, tile_graph):
    a = raw_arrays(tile_graph)
    a["edge_index"] = np.zeros((0,), np.int64)
    np.savez(tmp_path / "e.npz", **a)
    assert read_graph(tmp_path / "e.npz").edge_index.shape == (0, 2)


def test_lazy_configs_are_mapped_or_compact_and_subset_in_order(tmp_path, layout_graph):
    for compress, form in ((False, np.memmap), (True, CompactConfigs)):
        path = write_graph(tmp_path / f"l{compress}.npz", layout_graph, compress=compress)
        g = read_graph(path)
        assert isinstance(g, LayoutGraph)
        assert isinstance(g.node_config_feat, form)
        ids = np.array([7, 2, 39, 2])
        np.testing.assert_array_equal(g.configs(ids), layout_graph.node_config_feat[ids])
    # the compressed member was converted once into the cache, the stored one was not
    assert len(list(cache_dir().glob("*.[nc][po]*"))) == 1  # .npy or .compact


def test_stored_member_is_mapped_in_place(tmp_path, layout_graph):
    path = write_graph(tmp_path / "s.npz", layout_graph, compress=False)
    m = open_member_mmap(path, "node_config_feat")
    assert str(m.filename).endswith("s.npz")


def test_cache_is_rebuilt_when_the_file_changes(tmp_path, layout_graph):
    path = write_graph(tmp_path / "c.npz", layout_graph)
    first = np.array(read_graph(path).configs(np.array([0])))
    layout_graph.node_config_feat = layout_graph.node_config_feat[::-1].copy()
    write_graph(path, layout_graph)
    second = np.array(read_graph(path).configs(np.array([0])))
    np.testing.assert_array_equal(second, layout_graph.node_config_feat[[0]])
    assert not np.array_equal(first, second)


def test_truncated_stored_member_is_reported(tmp_path, layout_graph):
    path = write_graph(tmp_path / "t.npz", layout_graph, compress=False)
    data = path.read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(GraphFileError) as e:
        read_graph(tmp_path / "cut.npz")
    assert "cut.npz" in str(e.value)


def test_written_file_is_a_plain_npz(tmp_path, tile_graph):
    path = write_graph(tmp_path / "x.npz", tile_graph)
    with zipfile.ZipFile(path) as zf:
        assert sorted(zf.namelist()) == sorted(f"{k}.npy" for k in raw_arrays(tile_graph))
    assert [p.name for p in tmp_path.iterdir() if p.name != "cache"] == ["x.npz"]
    assert path.stat().st_mode & 0o044 == 0o044  # readable by others: can be shipped


def test_fractional_tile_runtimes_are_read_as_they_are(tmp_path, tile_graph):
    """Tile runtimes are read as float64: never truncated to int64, whose values it holds
    exactly (the published files store int64)."""
    a = raw_arrays(tile_graph)
    a["config_runtime"] = a["config_runtime"] + 0.75
    a["config_runtime_normalizers"] = np.full_like(a["config_runtime"], a["config_runtime"][0])
    np.savez(tmp_path / "f.npz", **a)
    g = read_graph(tmp_path / "f.npz")
    np.testing.assert_array_equal(g.config_runtime, a["config_runtime"])
    assert g.target[0] == 1.0 and g.config_runtime.dtype == np.float64


@pytest.mark.parametrize("runtime", ["zeros", "absent"])
def test_files_to_rank_may_lack_runtimes(tmp_path, tile_graph, layout_graph, runtime):
    """The published test split has no usable runtimes: `runtimes=False` reads such files
    (absent runtimes read as NaN), the default refuses them naming the key."""
    for g in (tile_graph, layout_graph):
        a = raw_arrays(g)
        for key in ("config_runtime", "config_runtime_normalizers"):
            if key in a:
                if runtime == "zeros":
                    a[key] = np.zeros_like(a[key])
                else:
                    del a[key]
        path = tmp_path / f"{g.kind}-{runtime}.npz"
        np.savez(path, **a)
        with pytest.raises(GraphFileError, match="config_runtime"):
            read_graph(path)
        ranked = read_graph(path, runtimes=False)
        assert ranked.num_configs == g.num_configs
        assert np.all(ranked.config_runtime == 0) if runtime == "zeros" else \
            np.all(np.isnan(ranked.config_runtime))


def _rss_file_mib() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssFile:")) / 1024


def test_reading_a_mapped_file_leaves_its_pages_out_of_this_processs_memory(tmp_path):
    """A whole-file scan and repeated config reads of a 250 MiB stored file keep
    resident only what one block needs, while the same reads straight from the map
    leave the whole file resident (the control, which shows the measure can see it)."""
    from graphcost.bench.io import big_layout_graph
    from graphcost.formats.records import row_blocks

    g = big_layout_graph(num_configs=20_000, num_configurable=180)
    path = write_graph(tmp_path / "big.npz", g, compress=False)
    before = _rss_file_mib()
    lazy = read_graph(path, lazy=True)  # the deep NaN scan reads every row once
    assert isinstance(lazy.node_config_feat, np.memmap)
    seen = 0
    for start, block in row_blocks(lazy.node_config_feat):
        np.testing.assert_array_equal(block, g.node_config_feat[start:start + len(block)])
        seen += len(block)
    rng = np.random.default_rng(0)
    for _ in range(20):
        ids = rng.choice(lazy.num_configs, 512, replace=False)
        np.testing.assert_array_equal(lazy.configs(ids), g.node_config_feat[ids])
    assert seen == lazy.num_configs
    assert _rss_file_mib() - before < 80
    total = sum(float(np.asarray(lazy.node_config_feat[s:s + 1000]).sum())
                for s in range(0, lazy.num_configs, 1000))
    file_mib = lazy.node_config_feat.nbytes / 2**20
    assert np.isfinite(total) and _rss_file_mib() - before > file_mib / 2
