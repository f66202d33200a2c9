"""The read cache's compact configs (`formats.compact`): exactly the values each file
holds, however they are indexed, the same training from them as from the uncompressed
copy, and never a half-built entry used."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import graphcost
import graphcost.formats.compact as compact
from graphcost.formats import read_graph, write_graph
from graphcost.formats.compact import CompactConfigs
from graphcost.formats.npz import cache_dir

BUNDLED = Path(graphcost.__file__).parent / "sample" / "npz" / "layout" / "cpu"


def plain(path: Path, monkeypatch) -> np.ndarray:
    """`path`'s configs as the uncompressed copy holds them (the cache before compacting)."""
    with monkeypatch.context() as m:
        m.setenv("GRAPHCOST_COMPACT_CACHE", "0")
        feat = read_graph(path).node_config_feat
        assert isinstance(feat, np.memmap)
        return np.array(feat)


def bits(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float32).view(np.uint32)


@pytest.mark.parametrize("collection", ["random", "default"])
def test_every_bundled_layout_file_is_compact_and_gives_exactly_its_configs(collection,
                                                                           monkeypatch):
    files = sorted((BUNDLED / collection).rglob("*.npz"))
    assert len(files) == 192
    for path in files:
        feat = read_graph(path).node_config_feat
        assert isinstance(feat, CompactConfigs), path
        want = plain(path, monkeypatch)
        assert feat.shape == want.shape and np.array_equal(bits(feat), bits(want)), path
        assert feat.codes.dtype == np.uint16 and feat.codes.nbytes * 36 == want.nbytes
    entries = sorted(cache_dir().glob("*.compact"))
    assert len(entries) == len(files)
    copies = sum(f.stat().st_size for f in cache_dir().glob("*.npy"))
    assert sum(e.stat().st_size for e in entries) < copies / 2  # small files: headers


def test_every_way_of_indexing_gives_what_the_array_gives(tmp_path, layout_graph):
    path = write_graph(tmp_path / "g.npz", layout_graph)
    feat, want = read_graph(path).node_config_feat, layout_graph.node_config_feat
    ids = np.array([7, 2, 39, 2])
    for key in (ids, 3, -1, slice(5, 9), slice(None, None, 3), (ids, 0), (2, slice(1, 3)),
                (slice(None), slice(None), slice(0, 2)), (ids, slice(None), 4), (1, 0, 17)):
        assert np.array_equal(bits(feat[key]), bits(want[key])), key
    assert np.array_equal(bits(np.asarray(feat)), bits(want)) and len(feat) == len(want)
    assert np.asarray(feat, dtype=np.float64).dtype == np.float64
    with pytest.raises(IndexError, match="plain indices"):
        feat[..., 0]


@pytest.mark.parametrize("value", [0.5, -0.0, 6.0, -2.0, 1e30])
def test_a_value_the_compact_form_cannot_hold_falls_back_to_the_plain_copy(
        tmp_path, layout_graph, value, monkeypatch):
    layout_graph.node_config_feat[5, 0, 3] = value
    path = write_graph(tmp_path / "g.npz", layout_graph)
    feat = read_graph(path).node_config_feat
    assert isinstance(feat, np.memmap)
    assert np.array_equal(bits(feat), bits(layout_graph.node_config_feat))
    assert not list(cache_dir().glob("*.compact")) and not list(cache_dir().glob(".*part"))
    monkeypatch.setattr(compact, "build", lambda *a: pytest.fail("compacted again"))
    assert isinstance(read_graph(path).node_config_feat, np.memmap)  # tried once only


def test_more_rows_than_two_bytes_number_get_four_byte_codes(tmp_path, layout_graph):
    rng = np.random.default_rng(1)
    g = layout_graph
    c = -(-80_000 // g.node_config_ids.size)  # 80,000 rows, nearly all distinct
    g.node_config_feat = rng.integers(-1, 6, (c, g.node_config_ids.size, 18)).astype(
        np.float32)
    g.config_runtime = rng.uniform(1, 2, c)
    path = write_graph(tmp_path / "g.npz", g)
    feat = read_graph(path).node_config_feat
    assert isinstance(feat, CompactConfigs)
    assert feat.codes.dtype == np.uint32 and len(feat.rows) > 65_536
    assert np.array_equal(bits(feat), bits(g.node_config_feat))


def test_a_file_of_one_distinct_row_and_a_file_of_no_configurable_node(tmp_path,
                                                                       layout_graph):
    g = layout_graph
    g.node_config_feat = np.full_like(g.node_config_feat, -1.0)
    feat = read_graph(write_graph(tmp_path / "a.npz", g)).node_config_feat
    assert feat.codes.dtype == np.uint16 and feat.rows.shape == (1, 18)
    assert np.array_equal(bits(feat), bits(g.node_config_feat))
    g.node_config_ids = g.node_config_ids[:0]
    g.node_config_feat = g.node_config_feat[:, :0]
    feat = read_graph(write_graph(tmp_path / "b.npz", g)).node_config_feat
    assert feat.shape == g.node_config_feat.shape and feat[[0, 3]].shape == (2, 0, 18)


_KILLED_BUILD = """
import os, signal, sys
import graphcost.formats.compact as compact
compact.CHUNK_ROWS = 50  # many chunks, so the kill lands midway
real, calls = compact._keys, []
def keys(x):
    calls.append(x)
    if len(calls) == 3:
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would, mid-build
    return real(x)
compact._keys = keys
from graphcost.formats import read_graph
read_graph(sys.argv[1])
"""


def test_a_build_killed_midway_leaves_no_entry_and_the_next_read_builds_it_whole(
        tmp_path, layout_graph):
    path = write_graph(tmp_path / "g.npz", layout_graph)
    killed = subprocess.run([sys.executable, "-c", _KILLED_BUILD, path], timeout=120)
    assert killed.returncode == -9
    (left,) = cache_dir().glob(".*.part")  # the half entry, under its writer's name
    assert not list(cache_dir().glob("*.compact"))
    feat = read_graph(path).node_config_feat
    assert isinstance(feat, CompactConfigs)
    assert np.array_equal(bits(feat), bits(layout_graph.node_config_feat))
    assert not left.exists() and len(list(cache_dir().glob("*.compact"))) == 1


def test_training_and_scoring_from_compact_configs_equal_those_from_the_plain_copy(
        monkeypatch, tmp_path):
    import torch

    from graphcost.models import Model
    from graphcost.models.scorer import score_graph
    from graphcost.train import TrainSettings, fit

    files = sorted((BUNDLED / "random" / "train").glob("*.npz"))[:6]

    def trained(form: str) -> tuple[dict, list[np.ndarray]]:
        monkeypatch.setenv("GRAPHCOST_COMPACT_CACHE", form)
        monkeypatch.setenv("GRAPHCOST_CACHE", str(tmp_path / form))
        graphs = [read_graph(f) for f in files]
        kind = CompactConfigs if form == "1" else np.memmap
        assert all(isinstance(g.node_config_feat, kind) for g in graphs)
        torch.manual_seed(0)
        m = Model("ranker", "layout", hidden=16, opcode_dim=8, layers=1, ref_configs=8)
        fit(m, graphs[:4], settings=TrainSettings(epochs=2, configs_per_graph=6,
                                                  progress=False))
        return m.net.state_dict(), [score_graph(m, g) for g in graphs[4:]]

    (w1, p1), (w0, p0) = trained("1"), trained("0")
    assert w1.keys() == w0.keys()
    assert all(torch.equal(w1[k], w0[k]) for k in w1)
    assert all(np.array_equal(a, b) for a, b in zip(p1, p0, strict=True))


def test_duplicate_configs_are_found_alike_in_both_forms(tmp_path, layout_graph, monkeypatch):
    from graphcost.data.dedup import dedup_configs, duplicates

    g = layout_graph
    g.node_config_feat[[3, 9, 30]] = g.node_config_feat[5]  # a group of four
    g.node_config_feat[11] = g.node_config_feat[12]
    g.config_runtime[[3, 5, 9, 30]] = [1e6, 1.1e6, 9e6, 1.2e6]  # one 9× apart
    path = write_graph(tmp_path / "g.npz", g)
    compact_graph = read_graph(path)
    assert isinstance(compact_graph.node_config_feat, CompactConfigs)
    monkeypatch.setenv("GRAPHCOST_COMPACT_CACHE", "0")
    plain_graph = read_graph(path)
    found = duplicates(compact_graph)
    assert found == duplicates(plain_graph)
    assert found.groups >= 2 and found.contradicting >= 1
    (a_ids, a_rt), (b_ids, b_rt) = dedup_configs(compact_graph), dedup_configs(plain_graph)
    assert np.array_equal(a_ids, b_ids) and np.array_equal(a_rt, b_rt)
    assert a_ids.size <= g.num_configs - 4


def test_a_corrupt_member_is_refused_naming_its_key_and_caches_nothing(tmp_path,
                                                                      layout_graph):
    import zipfile

    from graphcost.formats.errors import GraphFileError

    path = write_graph(tmp_path / "g.npz", layout_graph)
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("node_config_feat.npy")
    data = bytearray(path.read_bytes())
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    for i in range(start + 40, start + info.compress_size - 8, 7):
        data[i] ^= 0x5A  # the deflated configs garbled past their header
    path.write_bytes(bytes(data))
    with pytest.raises(GraphFileError, match="node_config_feat"):
        read_graph(path)
    assert not list(cache_dir().glob("*.compact"))


def test_the_official_baselines_feature_fit_is_the_same_from_either_form(monkeypatch):
    from graphcost.data.features import FeatureTransform

    files = sorted((BUNDLED / "default" / "train").glob("*.npz"))[:12]
    fits = []
    for form in ("1", "0"):
        monkeypatch.setenv("GRAPHCOST_COMPACT_CACHE", form)
        fits.append(FeatureTransform.fit([read_graph(f) for f in files], "minmax"))
    a, b = (f.layout_config_columns for f in fits)
    assert np.array_equal(a.keep, b.keep) and a.keep.size > 0
    assert all(np.array_equal(getattr(a, k), getattr(b, k)) for k in vars(a))
