"""`graphcost bench replica`: published shapes, the replica's files, and the path's steps
each measured in its own process."""

from __future__ import annotations

import csv
import json
import socket
import zipfile

import numpy as np
import pytest
from click.testing import CliRunner

from graphcost.bench.replica import (
    ReplicaResult,
    disk_bytes,
    format_summary,
    run_path,
    run_step,
    summarise,
)
from graphcost.cli import main
from graphcost.data.replica import (
    PUBLISHED,
    SPLITS,
    Published,
    chosen,
    clipped_lognormal,
    collection_dir,
    collection_shapes,
    write_replica,
)
from graphcost.formats.npz import member_header

SMALL = Published((3, 2, 2), (300, 100, 600), (120, 40, 400))


@pytest.mark.parametrize("mean,low,high,sigma", [(14_105, 372, 43_615, 0.63),
                                                 (66_089, 11_098, 100_040, 1.05),
                                                 (40, 2, 1_000, 0.63)])
def test_clipped_lognormal_has_the_published_mean_inside_the_published_range(mean, low, high,
                                                                            sigma):
    sizes = clipped_lognormal(500, mean, low, high, sigma)
    assert sizes.shape == (500,)
    assert sizes.min() >= low and sizes.max() <= high
    assert abs(sizes.mean() - mean) / mean < 0.01


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_every_split_has_its_published_count_and_starts_with_the_largest_graph(name):
    pub = PUBLISHED[name]
    shapes = collection_shapes(name)
    for split, count in zip(SPLITS, pub.graphs, strict=True):
        group = [s for s in shapes if s.split == split]
        assert len(group) == count
        assert group[0].nodes == pub.nodes[2]
        assert all(pub.nodes[1] <= s.nodes <= pub.nodes[2] for s in group)
        if split == "test" and pub.test_configs:
            assert {s.configs for s in group} == {pub.test_configs}
            continue
        assert group[0].configs == pub.configs[2]
        assert all(pub.configs[1] <= s.configs <= pub.configs[2] for s in group)
    assert collection_shapes(name, seed=0) == shapes
    assert collection_shapes(name, seed=1) != shapes


def test_a_chosen_subset_always_holds_each_splits_largest_graph_and_the_whole_test_split():
    shapes = collection_shapes("layout:nlp:random")
    subset = chosen(shapes, 3)
    for split in ("train", "valid"):
        group = [s for s in subset if s.split == split]
        assert len(group) == 3 and group[0].index == 0
        assert len({s.index for s in group}) == 3
    assert [s for s in subset if s.split == "test"] == [s for s in shapes if s.split == "test"]
    assert chosen(shapes, 0) == shapes
    assert chosen(shapes, 3, seed=0) == subset


@pytest.mark.parametrize("name,folder", [("layout:xla:random", ("layout", "xla", "random")),
                                         ("tile:xla", ("tile", "xla"))])
def test_a_replica_has_the_published_layout_and_sizes_and_is_resumable(tmp_path, name, folder):
    subset = chosen(collection_shapes(name, pub=SMALL), 2)
    base = write_replica(tmp_path, name, subset)
    assert base == tmp_path.joinpath("npz", *folder)
    for s in subset:
        path = base / s.split / f"{s.split}_{s.index:04d}.npz"
        if name.startswith("layout"):
            shape, _ = member_header(path, "node_config_feat")
            assert shape == (s.configs, s.configurable, 18)
        else:
            assert member_header(path, "config_feat")[0] == (s.configs, 24)
        assert member_header(path, "node_feat")[0] == (s.nodes, 140)
        with zipfile.ZipFile(path) as zf:  # compressed, as published
            assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_DEFLATED}
    stamps = {p: p.stat().st_mtime_ns for p in base.rglob("*.npz")}
    if name.startswith("layout"):  # what a killed writer left: its configs' memory map
        dead = base / "train" / ".train_0009.npz.999999999@{}.x1.part".format(
            socket.gethostname().replace(".", "_"))
        dead.mkdir()
        (dead / "configs.npy").write_bytes(b"half")
    write_replica(tmp_path, name, subset)
    assert not list(base.rglob(".*part"))
    assert {p: p.stat().st_mtime_ns for p in base.rglob("*.npz")} == stamps


def test_max_configs_caps_every_graph_and_keeps_the_nodes():
    shapes = collection_shapes("layout:xla:random")
    capped = chosen(shapes, 2, max_configs=500)
    plain = chosen(shapes, 2)
    assert [s.nodes for s in capped] == [s.nodes for s in plain]
    assert [s.configs for s in capped] == [min(s.configs, 500) for s in plain]
    assert max(s.configs for s in plain) == 100_040  # the cap bit


def test_a_gpu_run_without_a_gpu_is_refused_before_any_work(tmp_path):
    result = CliRunner().invoke(main, ["bench", "replica", "layout:xla:random", "--out",
                                       str(tmp_path / "out"), "--device", "cuda"])
    assert result.exit_code == 2
    assert "CUDA is not available on this machine" in result.output
    assert not (tmp_path / "out").exists()


def test_a_steps_peak_is_its_own_not_the_parents(tmp_path):
    ballast = np.ones(400 * 2**20 // 8)  # the parent holds 400 MiB
    r = run_step("info", ["info", "--sample"], {}, tmp_path)
    assert r.returncode == 0
    assert 10 < r.peak_rss_mb < 300
    assert r.peak_gpu_mb is None  # no step here touches a GPU
    assert "layout" in (tmp_path / "info.log").read_text()
    failed = run_step("bad", ["info", str(tmp_path / "missing")], {}, tmp_path)
    assert failed.returncode != 0 and failed.peak_rss_mb > 0
    del ballast


def small_replica(tmp_path, name: str, per_split: int):
    """A SMALL-shaped replica of `name` written under TMP/data: (shapes, subset, root)."""
    shapes = collection_shapes(name, pub=SMALL)
    subset = chosen(shapes, per_split)
    write_replica(tmp_path / "data", name, subset)
    return shapes, subset, tmp_path / "data"


def test_the_whole_path_runs_and_falls_back_to_gst_when_full_graphs_do_not_fit(tmp_path):
    name = "layout:nlp:default"
    shapes, subset, root = small_replica(tmp_path, name, 2)
    work = tmp_path / "work"
    steps = run_path(root, name, work, sets=["memory_budget=1K", "gst_max_configs=64"])
    assert list(steps) == ["compact"]
    steps = steps["compact"]
    by_step = {r.step: r for r in steps}
    assert list(by_step) == ["info", "validate", "train ranker", "train ranker (gst)",
                             "train resgcn", "evaluate ranker", "submit ranker"]
    for refused in ("train ranker", "train resgcn"):  # the baseline has no GST to fall to
        assert by_step[refused].returncode == 2 and "memory budget" in by_step[refused].note
    assert "mode=gst" in by_step["train ranker"].note  # advised where it exists
    assert "mode=gst" not in by_step["train resgcn"].note
    assert all(by_step[s].returncode == 0 for s in by_step if s not in
               ("train ranker", "train resgcn"))
    assert by_step["train ranker (gst)"].epoch_s > 0 and by_step["train resgcn"].epoch_s is None
    assert all(r.peak_rss_mb > 0 for r in steps)

    work = work / "compact"
    indices = json.loads((work / "eval_indices.json").read_text())
    valid = [s for s in subset if s.split == "valid"]
    assert sorted(indices) == sorted(f"valid_{s.index:04d}" for s in valid)
    assert all(len(indices[f"valid_{s.index:04d}"]) == min(1000, s.configs) for s in valid)
    report = json.loads((work / "eval_ranker.json").read_text())
    assert report["split"] == "valid" and len(report["graphs"]) == len(valid)
    rows = list(csv.DictReader(open(work / "submission.csv")))
    assert len(rows) == sum(s.split == "test" for s in subset)
    assert all(r["ID"].startswith(name + ":") for r in rows)

    cache = {"compact": disk_bytes(work / "cache")}
    whole = summarise(name, shapes, subset, {"compact": steps}, cache,
                      disk_bytes(collection_dir(root, name)), 0)
    row = whole["caches"]["compact"]
    # the cache holds 2 bytes per config and configurable node, and a few KB besides
    assert 0 < row["cache_mb"] - row["cache_mb_expected"] < 0.1 * len(subset)
    ratio = sum(s.nodes for s in shapes if s.split == "train") / sum(
        s.nodes for s in subset if s.split == "train")
    epoch = by_step["train ranker (gst)"].epoch_s
    assert row["projected_epoch_s"]["train ranker (gst)"] == pytest.approx(epoch * ratio)
    submit = by_step["submit ranker"].seconds * sum(
        s.nodes for s in shapes if s.split == "test") / sum(
        s.nodes for s in subset if s.split == "test")
    assert row["projected_s"]["submit ranker"] == pytest.approx(submit)
    assert row["projected_s"]["info"] == pytest.approx(
        by_step["info"].seconds * len(shapes) / len(subset))
    assert "train ranker" not in row["projected_s"]  # refused: nothing to project
    assert row["projected_cache_gb"] == pytest.approx(
        sum(s.compact_bytes for s in shapes) / 2**30)
    assert whole["projected_files_gb"] == pytest.approx(
        whole["files_mb"] / 2**10 * sum(s.config_bytes for s in shapes) /
        sum(s.config_bytes for s in subset))


def test_an_unknown_collection_is_refused_before_any_work(tmp_path):
    result = CliRunner().invoke(main, ["bench", "replica", "layout:xla:bogus", "--out",
                                       str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "no published shape for collection 'layout:xla:bogus'" in result.output
    assert "step" not in result.output and not (tmp_path / "out").exists()


def test_a_replica_that_would_not_fit_the_disk_is_refused_before_writing(tmp_path,
                                                                        monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(2**40, 2**40 - 2**30, 2**30))
    result = CliRunner().invoke(main, ["bench", "replica", "layout:nlp:random", "--out",
                                       str(tmp_path / "out"), "--graphs", "1"])
    assert result.exit_code == 2
    subset = chosen(collection_shapes("layout:nlp:random"), 1)
    need = sum(s.config_bytes for s in subset) * 0.1 / 2**30  # the two 7 GB graphs' files
    need += sum(s.compact_bytes for s in subset) / 2**30  # and their compact cache: 1.6 GB
    assert f"needs about {need:,.0f} GB" in result.output and "1 GB are free" in result.output
    assert not (tmp_path / "out" / "data").exists()


def test_the_plain_cache_is_compared_step_by_step_and_gives_the_same_results(tmp_path):
    name = "layout:xla:default"
    shapes, subset, root = small_replica(tmp_path, name, 1)
    work, seen = tmp_path / "work", []
    steps = run_path(root, name, work, on_step=seen.append, caches=("compact", "plain"))
    labels = [r.step for r in steps["compact"]]
    assert labels == [r.step for r in steps["plain"]] == [
        "info", "validate", "train ranker", "train resgcn", "evaluate ranker",
        "evaluate resgcn", "submit ranker"]
    assert all(r.returncode == 0 for c in steps for r in steps[c])
    # interleaved, the forms taking turns to go first
    assert [(r.step, r.cache) for r in seen[:4]] == [
        ("info", "compact"), ("info", "plain"), ("validate", "plain"), ("validate", "compact")]
    compact, plain = (disk_bytes(work / c / "cache") for c in ("compact", "plain"))
    configs = sum(s.config_bytes for s in subset)
    assert configs <= plain < configs * 1.01 and compact < plain / 10
    for model in ("ranker", "resgcn"):  # the same configs, so the same training
        a, b = (json.loads((work / c / f"eval_{model}.json").read_text())
                for c in ("compact", "plain"))
        assert a["graphs"] == b["graphs"]
    assert (work / "compact" / "submission.csv").read_text() == \
        (work / "plain" / "submission.csv").read_text()
    row = summarise(name, shapes, subset, steps, {"compact": compact, "plain": plain},
                    disk_bytes(collection_dir(root, name)), 0)
    text = format_summary(ReplicaResult({name: row}))
    assert f"compact cache {compact / 2**20:,.0f} MB" in text
    assert f"plain cache {plain / 2**20:,.0f} MB" in text
    gb = [row["caches"][c]["projected_cache_gb"] for c in ("compact", "plain")]
    assert f"read cache                 {gb[0]:.1f} GB / {gb[1]:.1f} GB" in text
