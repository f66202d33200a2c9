"""Bad graph files that used to get through (issue 30), each through the real CLI: a
file `graphcost validate` calls bad is refused by every reader (exit 2 naming the file
and the key, no traceback), a collection's bad file is skipped with a warning naming it
(evaluate, train) or refuses the whole CSV (submit), and nothing that is not a regular
file is ever opened. The decompression cache never serves a replaced file's old data,
and what a killed extraction left behind is cleaned up.

CliRunner catches exceptions itself, so `no traceback` is checked as: the command ended
by click's own exit (SystemExit), not by an exception escaping it.
"""

import io
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from conftest import raw_arrays, refused

from graphcost.cli import main
from graphcost.data.synthetic import write_collection
from graphcost.formats import read_graph, write_graph
from graphcost.formats.npz import cache_dir
from graphcost.models import Model

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def layout(tmp_path_factory) -> Path:
    """A small layout collection (train/valid/test) and an untrained but built ranker
    for it (scores need not be good, only finite)."""
    d = tmp_path_factory.mktemp("layout")
    coll = write_collection(d / "data", kind="layout", source="xla",
                            splits={"train": 2, "valid": 2, "test": 2}, num_nodes=30,
                            num_configs=8)
    from graphcost.data.collection import open_collection

    m = Model("ranker", "layout", hidden=8, layers=1)
    m.build(m.fit_transform(open_collection(coll).graphs("train")))
    m.save(d / "model.pt")
    return d


def _coll(work: Path) -> Path:
    return work / "data" / "npz" / "layout" / "xla" / "random"


def run(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


def _copy_collection(work: Path, dest: Path) -> Path:
    """A private copy of the layout collection (train/valid/test) to break a file in."""
    for f in _coll(work).rglob("*.npz"):
        target = dest / f.relative_to(_coll(work))
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(f.read_bytes())
    return dest


def _arrays(graph_file: Path) -> dict[str, np.ndarray]:
    with np.load(graph_file) as npz:
        return {k: npz[k] for k in npz.files}


def _broken(graph_file: Path, out: Path, compress: bool = False, **changes) -> Path:
    """`graph_file`'s arrays with `changes` (key -> array) saved to `out`."""
    (np.savez_compressed if compress else np.savez)(out, **{**_arrays(graph_file),
                                                            **changes})
    return out


# ----------------------------------------------------------- 1. NaN/inf in config features


def test_submit_refuses_a_test_file_with_all_inf_configs_that_validate_calls_bad(
        layout, tmp_path):
    coll = _copy_collection(layout, tmp_path / "npz" / "layout" / "xla" / "random")
    bad = sorted((coll / "test").glob("*.npz"))[0]
    ncf = _arrays(bad)["node_config_feat"]
    _broken(bad, bad, node_config_feat=np.full_like(ncf, np.inf),
            config_runtime=np.zeros(ncf.shape[0]))  # as the published test split
    r = run("validate", bad)
    assert r.exit_code == 1 and "'node_config_feat'" in r.output and bad.name in r.output
    out = tmp_path / "sub.csv"
    refused(run("submit", tmp_path, "-m", f"layout:xla:random={layout / 'model.pt'}",
                "--out", out), bad.name, "'node_config_feat'", "finite values")
    assert not out.exists()


def test_evaluate_skips_a_file_with_inf_configs_with_a_warning_naming_it(layout, tmp_path):
    coll = _copy_collection(layout, tmp_path / "c")
    bad, good = sorted((coll / "valid").glob("*.npz"))
    ncf = _arrays(bad)["node_config_feat"]
    _broken(bad, bad, node_config_feat=np.full_like(ncf, np.inf))
    r = run("evaluate", layout / "model.pt", coll, "--split", "valid")
    assert r.exit_code == 0, r.output
    assert "1 files left out" in r.output and bad.name in r.output
    assert "'node_config_feat'" in r.output and good.stem in r.output


def test_predict_refuses_inf_configs_read_eagerly_or_from_the_cache(layout, tmp_path):
    src = sorted((_coll(layout) / "valid").glob("*.npz"))[0]
    ncf = _arrays(src)["node_config_feat"]
    ncf[3] = np.inf
    for compress in (True, False):  # extracted to the cache, and mapped in place
        path = _broken(src, tmp_path / f"inf_{compress}.npz", compress, node_config_feat=ncf)
        for _ in range(2):  # a failed scan leaves no verdict behind: refused again
            refused(run("predict", layout / "model.pt", path), path.name,
                    "'node_config_feat'", "row 3")


def test_a_clean_memory_map_is_scanned_once_per_version_of_its_file(layout_graph, tmp_path,
                                                                    monkeypatch):
    """Reading a layout file stays lazy: its configs are scanned for NaN/inf on the
    first read of each version of the file, not on every read."""
    import graphcost.formats.validate as validate

    scans = []
    scan = validate._finite
    monkeypatch.setattr(validate, "_finite", lambda a, key, fail: (scans.append(key),
                                                                   scan(a, key, fail)))
    path = write_graph(tmp_path / "g.npz", layout_graph, compress=False)
    for _ in range(3):
        read_graph(path)
    assert scans == ["node_feat", "node_config_feat"]
    write_graph(path, layout_graph, compress=False)  # a new version: scanned again
    read_graph(path)
    assert scans == ["node_feat", "node_config_feat"] * 2


# ----------------------------------------------------------- 2. NaN/inf in node features


def _with_bad_node_feat(src: Path, out: Path, value: float) -> Path:
    nf = _arrays(src)["node_feat"]
    nf[4, 7] = value
    return _broken(src, out, node_feat=nf)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_nan_or_inf_node_features_are_refused_at_read(layout, tmp_path, value):
    src = sorted((_coll(layout) / "valid").glob("*.npz"))[0]
    bad = _with_bad_node_feat(src, tmp_path / "bad.npz", value)
    refused(run("predict", layout / "model.pt", bad), "bad.npz", "'node_feat'", "row 4")
    coll = _copy_collection(layout, tmp_path / "c")
    for f in (coll / "train").glob("*.npz"):
        _with_bad_node_feat(f, f, value)
    refused(run("train", coll, "--out", tmp_path / "run"), "no readable file",
            "'node_feat'", "finite values")
    assert not (tmp_path / "run" / "model.pt").exists()


def test_training_skips_a_file_with_nan_node_features_with_a_warning_naming_it(
        layout, tmp_path, caplog):
    coll = _copy_collection(layout, tmp_path / "c")
    bad = sorted((coll / "train").glob("*.npz"))[0]
    _with_bad_node_feat(bad, bad, np.nan)
    r = run("train", coll, "--out", tmp_path / "run", "--set", "epochs=1",
            "--set", "hidden=8", "--set", "layers=1")
    assert r.exit_code == 0 and (tmp_path / "run" / "model.pt").exists(), r.output
    warned = [m for m in caplog.messages if "skipping bad file" in m]
    assert len(warned) == 1 and bad.name in warned[0] and "'node_feat'" in warned[0]


# ----------------------------------------------------------- 3. wrong dtypes


@pytest.mark.parametrize("key, make, found", [
    ("edge_index", lambda a: a.astype(bool), "bool"),
    ("edge_index", lambda a: a + 0.5, "float64"),
    ("node_opcode", lambda a: a.astype(np.float32), "float32"),
    ("node_config_feat", lambda a: a.astype(np.complex64), "complex64"),
    ("node_config_feat", lambda a: a.astype(str), "<U"),
    ("node_feat", lambda a: a.astype(str), "<U"),
    ("config_runtime", lambda a: a.astype(str), "<U"),
])
def test_wrong_dtypes_are_refused_naming_key_expected_and_found(layout, tmp_path, key,
                                                                 make, found):
    src = sorted((_coll(layout) / "valid").glob("*.npz"))[0]
    value = make(_arrays(src)[key])
    expected = "an integer dtype" if key in ("edge_index", "node_opcode") \
        else "a real number dtype"
    for compress in (True, False):  # the lazy map of node_config_feat is checked too
        path = _broken(src, tmp_path / f"{key}_{compress}.npz", compress, **{key: value})
        refused(run("predict", layout / "model.pt", path), path.name, f"'{key}'",
                expected, f"found dtype {found}")


def test_object_arrays_are_refused_by_dtype_not_as_a_corrupt_archive(layout, tmp_path):
    src = sorted((_coll(layout) / "valid").glob("*.npz"))[0]
    value = _arrays(src)["node_config_feat"].astype(object)
    path = _broken(src, tmp_path / "obj.npz", node_config_feat=value)
    refused(run("predict", layout / "model.pt", path), "obj.npz", "'node_config_feat'",
            "a real number dtype", "found dtype object")


# ----------------------------------------------------------- 4. huge declared shapes


def _declare_shape(path: Path, key: str, shape: tuple[int, ...], out: Path) -> Path:
    """`path` with `key`'s `.npy` header declaring `shape`, its data left as it is:
    what a corrupt header looks like (numpy would allocate the declared array)."""
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename == key + ".npy":
                arr = np.load(io.BytesIO(data))
                header = io.BytesIO()
                np.lib.format.write_array_header_1_0(header, {
                    "descr": np.lib.format.dtype_to_descr(arr.dtype),
                    "fortran_order": False, "shape": shape})
                data = header.getvalue() + arr.tobytes()
            zout.writestr(info.filename, data, compress_type=zipfile.ZIP_DEFLATED)
    return out


@pytest.mark.parametrize("key", ["node_feat", "config_runtime", "node_config_feat"])
def test_a_huge_declared_shape_is_refused_before_allocating(layout, tmp_path, key):
    coll = _copy_collection(layout, tmp_path / "npz" / "layout" / "xla" / "random")
    files = sorted((coll / "valid").glob("*.npz"))
    _declare_shape(files[0], key, (1 << 40, 140), tmp_path / "huge.npz")
    os.replace(tmp_path / "huge.npz", files[0])
    refused(run("predict", layout / "model.pt", files[0]), files[0].name, f"'{key}'",
            "as its header declares", "found")
    # evaluate skips that file with a warning naming it and scores the other one
    r = run("evaluate", layout / "model.pt", coll, "--split", "valid")
    assert r.exit_code == 0, r.output
    assert "1 files left out" in r.output and files[0].name in r.output and key in r.output
    assert files[1].stem in r.output and "Traceback" not in r.output


# ----------------------------------------------------------- 5. FIFOs and devices


def _cli(*args) -> subprocess.CompletedProcess:
    """The CLI in a subprocess (sharing this test's cache): a regression that blocks
    fails on the timeout rather than hanging the suite."""
    return subprocess.run([sys.executable, "-m", "graphcost", *map(str, args)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("what", ["fifo", "/dev/zero"])
def test_a_fifo_or_device_given_as_a_graph_is_refused_without_opening_it(tmp_path, what):
    if what == "fifo":
        path = tmp_path / "pipe.npz"
        os.mkfifo(path)
    else:
        path = Path(what)
    kind = "a FIFO" if what == "fifo" else "a character device"
    r = _cli("info", path)
    assert r.returncode == 2, r.stderr
    assert f"{path}: key '<file>': expected a regular .npz file, found {kind}" in r.stderr
    assert "Traceback" not in r.stderr
    r = _cli("validate", path)
    assert r.returncode == 1 and f"BAD {path}" in r.stdout and kind in r.stdout, r.stderr
    assert not list(cache_dir().glob("*"))  # nothing read, nothing extracted


def test_a_fifo_in_a_folder_is_reported_not_opened(layout, tmp_path):
    coll = _copy_collection(layout, tmp_path / "c")
    os.mkfifo(coll / "valid" / "pipe.npz")
    r = _cli("validate", coll)
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"BAD {coll / 'valid' / 'pipe.npz'}" in r.stdout and "a FIFO" in r.stdout
    assert "6 of 7 files valid, 1 bad" in r.stdout
    r = _cli("info", coll)
    assert r.returncode == 0 and "unreadable" in r.stderr and "pipe.npz" in r.stderr


# ----------------------------------------------------------- 6. stale cache


def _level0_npz(path: Path, arrays: dict) -> Path:
    """A deflated `.npz` (so its configs go through the cache) whose size depends only
    on the arrays' sizes: compression level 0 stores deflate blocks verbatim."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=0) as zf:
        for key, value in arrays.items():
            with zf.open(key + ".npy", "w") as f:
                np.lib.format.write_array(f, np.asarray(value))
    return path


def test_a_replaced_file_with_the_same_size_and_mtime_is_not_read_from_the_cache(
        layout_graph, tmp_path):
    path = _level0_npz(tmp_path / "g.npz", raw_arrays(layout_graph))
    assert run("validate", path).exit_code == 0
    st = path.stat()
    bad = raw_arrays(layout_graph)
    bad["node_config_feat"][2] = np.inf
    _level0_npz(tmp_path / "new.npz", bad)
    os.replace(tmp_path / "new.npz", path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    r = run("validate", path)
    assert r.exit_code == 1 and "'node_config_feat'" in r.output and "row 2" in r.output


# ----------------------------------------------------------- 7. a killed extraction


_KILLED_WRITER = """
import os, signal, sys
from graphcost.atomic import atomic_open
with atomic_open(sys.argv[1]) as f:
    f.write(b"half an array")
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would, mid-extraction
"""


def test_a_later_extraction_removes_parts_left_by_a_killed_writer(layout_graph, tmp_path):
    path = write_graph(tmp_path / "g.npz", layout_graph)  # deflated: read via the cache
    killed = subprocess.run([sys.executable, "-c", _KILLED_WRITER,
                             cache_dir() / "0123abcd.npy"], timeout=60)
    assert killed.returncode == -9
    (left,) = cache_dir().glob(".*.part")  # what SIGKILL left: its writer's pid named
    other_host = left.with_name(re.sub(r"@[^.]+", "@elsewhere", left.name))
    other_host.write_bytes(b"another host's")  # whose pids this host cannot check
    from graphcost.atomic import atomic_open

    with atomic_open(cache_dir() / "4567ef01.npy") as f:  # a live writer's part
        f.write(b"being written")
        r = run("validate", path)
        assert r.exit_code == 0, r.output
        (live,) = set(cache_dir().glob(".4567ef01.*.part"))
        assert live.exists()
    assert not left.exists() and other_host.exists()
    assert len(list(cache_dir().glob("[0-9a-f]*.[nc][po]*"))) == 2  # converted, and the live one
    np.testing.assert_array_equal(read_graph(path).node_config_feat,
                                  layout_graph.node_config_feat)
