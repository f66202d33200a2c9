"""Read and write TpuGraphs `.npz` files exactly as published (docs/design.md §1).

A graph is a plain dataclass of numpy arrays. Layout files can hold gigabytes of
`node_config_feat`, so that one array is opened lazily, read-only: mapped directly
inside the archive when the member is stored uncompressed, otherwise converted once
into a per-user read cache, compact (`formats.compact`: each distinct row once and a
2-byte row number per config and node, about 36× smaller than the array) or, for a
file whose values are not all the published −1..5, an uncompressed copy. Indexing it
with a few config ids reads only those rows.

Everything a reader trusts is checked where it is read, once for every caller (submit,
evaluate, predict, train, validate): only regular files are opened (a FIFO would block,
/dev/zero never ends); every member's `.npy` header must declare a dtype its key may have
and exactly the bytes the member holds, before anything is allocated; and the graph must
pass `validate_graph(deep=True)`, NaN/inf included. A memory-mapped `node_config_feat`
is scanned for NaN/inf once per version of its file, which the cache remembers.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import shutil
import stat
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np

from graphcost.atomic import atomic_open, remove_dead_writers_parts
from graphcost.errors import EnvironmentFault, UserError
from graphcost.formats.compact import CompactConfigs, build, open_compact
from graphcost.formats.errors import GraphFileError
from graphcost.formats.inflate import Inflated, seek_member
from graphcost.formats.records import (
    EXTRA_KEYS,
    LAYOUT_KEYS,
    TILE_KEYS,
    Graph,
    LayoutGraph,
    TileGraph,
)
from graphcost.formats.validate import validate_graph

# --------------------------------------------------------------------------- reading


def graph_kind(path: str | Path) -> str:
    """'tile' or 'layout', from the archive's member names alone."""
    names = _member_names(Path(path))
    if "config_feat" in names:
        return "tile"
    if "node_config_feat" in names:
        return "layout"
    raise GraphFileError(path, "config_feat", "a tile file (config_feat) or a layout file "
                         f"(node_config_feat); the archive holds {sorted(names)}")


def read_graph(path: str | Path, lazy: bool = True, runtimes: bool = True) -> Graph:
    """Read one `.npz` file, casting every dtype seen in the wild to the canonical ones.

    With `lazy`, a layout file's `node_config_feat` is a read-only memory map. Checks
    dtypes, sizes, shapes, ranges and NaN/inf (`validate_graph(deep=True)`), so no
    caller can use a graph `graphcost validate` calls bad. `runtimes=False` reads a file
    to be ranked, not scored: its runtimes may be absent (read as NaN) or placeholders
    such as the zeros of the published test split.
    """
    path = Path(path)
    kind = graph_kind(path)
    keys = TILE_KEYS if kind == "tile" else LAYOUT_KEYS
    with _open_npz(path) as npz:
        missing = [k for k in keys if k not in npz.files
                   and (runtimes or k not in RUNTIME_KEYS)]
        if missing:
            expected = "every key of a " + kind + " file: " + ", ".join(keys)
            raise GraphFileError(path, missing[0], f"{expected} (missing)")
        present = [k for k in keys if k in npz.files]
        _check_headers(path, present)
        arrays = {k: _load_member(npz, path, k) for k in present
                  if not (kind == "layout" and lazy and k == "node_config_feat")}
    if kind == "layout" and lazy:
        arrays["node_config_feat"] = open_configs(path)
    for key in set(RUNTIME_KEYS) & set(keys) - set(arrays):  # runtimes=False only
        arrays[key] = np.full(_num_configs(kind, arrays), np.nan)
    graph = _build(kind, path.stem, arrays, path)
    # a memory map may be gigabytes: scan it once per version of the file, not per read
    scanned = (cache_dir() / (_version_key(path, "finite") + ".finite")
               if isinstance(arrays.get("node_config_feat"), np.memmap) else None)
    validate_graph(graph, path, deep=scanned is None or not scanned.exists(),
                   runtimes=runtimes)
    if scanned is not None:
        try:
            scanned.parent.mkdir(parents=True, exist_ok=True)
            scanned.touch()
        except OSError:  # an unwritable cache only costs a scan on the next read
            pass
    return graph


#: what a file to be ranked (`read_graph(runtimes=False)`) may lack
RUNTIME_KEYS = ("config_runtime", "config_runtime_normalizers")


def _num_configs(kind: str, arrays: dict[str, np.ndarray]) -> int:
    feat = arrays["config_feat" if kind == "tile" else "node_config_feat"]
    return int(feat.shape[0]) if feat.ndim else 0


def read_extra(path: str | Path) -> dict[str, np.ndarray]:
    """The collector's optional per-config arrays (`EXTRA_KEYS`) a file holds."""
    path = Path(path)
    present = sorted(_member_names(path) & set(EXTRA_KEYS))
    _check_headers(path, present)
    with _open_npz(path) as npz:
        return {k: _load_member(npz, path, k) for k in present}


def _build(kind: str, name: str, a: dict[str, np.ndarray], path: Path) -> Graph:
    common = dict(
        name=name,
        node_feat=_as(a["node_feat"], np.float32),
        node_opcode=_as(a["node_opcode"], np.int64).reshape(-1),
        edge_index=_edges(a["edge_index"], path),
    )
    if kind == "tile":
        return TileGraph(
            **common,
            config_feat=_as(a["config_feat"], np.float32),
            # float64, not the published int64: measured runtimes may be fractional, and
            # float64 holds every integer runtime below 2**53 ns exactly
            config_runtime=_as(a["config_runtime"], np.float64).reshape(-1),
            config_runtime_normalizers=_as(a["config_runtime_normalizers"], np.float64).reshape(-1),
        )
    ncf = a["node_config_feat"]
    if not isinstance(ncf, np.memmap | CompactConfigs):
        ncf = _as(ncf, np.float32)
    return LayoutGraph(
        **common,
        node_config_ids=_as(a["node_config_ids"], np.int64).reshape(-1),
        node_config_feat=ncf,
        config_runtime=_as(a["config_runtime"], np.float64).reshape(-1),
        node_splits=_as(a["node_splits"], np.int64).reshape(-1),
    )


def _as(x: np.ndarray, dtype: type) -> np.ndarray:
    """`x` cast to the canonical dtype; its stored dtype was checked (`_header`) before it
    was loaded, so the cast invents nothing."""
    return np.ascontiguousarray(x, dtype=dtype)


def _edges(x: np.ndarray, path: Path) -> np.ndarray:
    x = _as(x, np.int64)
    if x.size == 0:
        return x.reshape(0, 2)
    if x.ndim != 2 or x.shape[1] != 2:
        raise GraphFileError(path, "edge_index", f"shape (m, 2), got {x.shape}")
    return x


def _require_regular_file(path: Path) -> None:
    """Refuse anything but a regular file before opening it: opening a FIFO blocks until
    a writer comes, and a device such as /dev/zero reads (and extracts) without end."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise GraphFileError(path, "<file>", "an existing .npz file") from None
    except OSError as e:
        raise GraphFileError(path, "<file>", f"a readable .npz file ({e})") from None
    if not stat.S_ISREG(mode):
        raise GraphFileError(path, "<file>", f"a regular .npz file, found {_file_type(mode)}")


def _file_type(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


@contextmanager
def _open_npz(path: Path) -> Iterator[np.lib.npyio.NpzFile]:
    _require_regular_file(path)
    try:
        npz = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise GraphFileError(path, "<file>", "an existing .npz file") from None
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
        raise GraphFileError(path, "<archive>", f"a readable .npz archive ({e})") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise GraphFileError(path, "<archive>", "an .npz archive, got a single .npy array")
    try:
        yield npz
    finally:
        npz.close()


def _load_member(npz: np.lib.npyio.NpzFile, path: Path, key: str) -> np.ndarray:
    try:
        return npz[key]
    except (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError) as e:
        raise GraphFileError(path, key, f"a readable array (the archive is corrupt: {e})") from None


def _member_names(path: Path) -> set[str]:
    _require_regular_file(path)
    try:
        with zipfile.ZipFile(path) as zf:
            return {n[:-4] for n in zf.namelist() if n.endswith(".npy")}
    except FileNotFoundError:
        raise GraphFileError(path, "<file>", "an existing .npz file") from None
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise GraphFileError(path, "<archive>", f"a readable .npz archive ({e})") from None


def member_header(path: str | Path, key: str) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of one array, read from its `.npy` header without loading it
    (and checked as every reader checks it: `_header`)."""
    path = Path(path)
    return _check_headers(path, [key])[key]


def _check_headers(path: Path, keys: Iterable[str]) -> dict[str, tuple[tuple[int, ...],
                                                                        np.dtype]]:
    """Shape and dtype of each of `keys`, every header checked by `_header`."""
    _require_regular_file(path)
    out = {}
    with _zip_errors(path, "<archive>", "a readable .npz archive"), \
            zipfile.ZipFile(path) as zf:
        for key in keys:
            with _zip_errors(path, key, "a readable array header"):
                shape, _, dtype = _header(zf, path, key)
            out[key] = shape, dtype
    return out


#: keys whose values are ids or indices: stored as integers of any width (uint8, int32
#: and int64 are seen in the wild). Every other key holds real numbers: features and
#: runtimes, stored as integers or floats. Nothing else (bool, complex, strings, objects)
#: is a graph, and casting it would silently invent numbers.
INTEGER_KEYS = ("node_opcode", "edge_index", "node_config_ids", "node_splits",
                "config_fingerprint")


def _header(zf: zipfile.ZipFile, path: Path, key: str) -> tuple[tuple[int, ...], bool,
                                                                  np.dtype]:
    """One member's `.npy` header, refused unless its dtype suits `key` and it declares
    exactly the bytes the member holds. Checked before any array is allocated, so a
    corrupt header cannot ask numpy for terabytes (ArrayMemoryError)."""
    info = zf.getinfo(key + ".npy")
    with zf.open(info) as f:
        shape, fortran, dtype = _read_npy_header(f)
        held = info.file_size - f.tell()
    kinds, what = (("iu", "an integer dtype (such as int64)") if key in INTEGER_KEYS
                   else ("iuf", "a real number dtype (such as float32)"))
    if dtype.kind not in kinds:
        raise GraphFileError(path, key, f"{what}, found dtype {dtype}")
    declared = math.prod(shape) * dtype.itemsize
    if declared != held:
        raise GraphFileError(path, key, f"{declared} bytes of data, as its header declares "
                             f"(shape {shape}, dtype {dtype}), found {held} bytes")
    return shape, fortran, dtype


@contextmanager
def _zip_errors(path: Path, key: str, expected: str) -> Iterator[None]:
    """What a broken archive raises, as a GraphFileError naming `path` and `key`."""
    try:
        yield
    except UserError:  # already says what is wrong (a GraphFileError, an unwritable cache)
        raise
    except KeyError:
        raise GraphFileError(path, key, "the key to be present") from None
    except (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError) as e:
        raise GraphFileError(path, key, f"{expected} ({e})") from None


def _read_npy_header(f) -> tuple[tuple[int, ...], bool, np.dtype]:
    version = np.lib.format.read_magic(f)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(f)
    return np.lib.format.read_array_header_2_0(f)


def cache_dir() -> Path:
    """Where extracted uncompressed arrays live; `GRAPHCOST_CACHE` overrides."""
    root = os.environ.get("GRAPHCOST_CACHE") or Path.home() / ".cache" / "graphcost"
    return Path(root) / "npz"


def open_member_mmap(path: str | Path, key: str) -> np.ndarray:
    """A read-only memory map of one array of an `.npz`, never loading it whole.

    A stored (uncompressed) member is mapped in place. A compressed one is streamed
    once into `cache_dir()` (keyed by the file's version, `_version_key`) and mapped
    from there.
    """
    path = Path(path)
    _require_regular_file(path)
    with _zip_errors(path, key, "a readable array (the archive is corrupt)"), \
            zipfile.ZipFile(path) as zf:
        _header(zf, path, key)
        info = zf.getinfo(key + ".npy")
        if info.compress_type == zipfile.ZIP_STORED:
            return _mmap_stored(path, info)
        return _mmap_cached(path, zf, info)


def _mmap_stored(path: Path, info: zipfile.ZipInfo) -> np.ndarray:
    with open(path, "rb") as f:
        seek_member(f, info)
        shape, fortran, dtype = _read_npy_header(f)
        offset = f.tell()
    if offset + int(np.prod(shape)) * dtype.itemsize > os.path.getsize(path):
        raise ValueError("array data runs past the end of the file (truncated)")
    if int(np.prod(shape)) == 0:
        return np.zeros(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape,
                     order="F" if fortran else "C")


def _version_key(path: Path, what: str) -> str:
    """A cache name for `what` of this version of `path`, from one stat, never a hash of
    the data. A file replaced under the same name gets a new inode (or, rewritten in
    place, a new ctime), which os.utime cannot set back as it can size and mtime, so no
    replacement is ever read from a stale copy. (A rename or chmod changes ctime too: the
    file is then extracted and scanned once more, which costs time, never correctness.)"""
    st = path.stat()
    ident = (f"{path.resolve()}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|"
             f"{st.st_ctime_ns}|{what}")
    return hashlib.sha1(ident.encode()).hexdigest()


def open_configs(path: str | Path) -> np.ndarray | CompactConfigs:
    """A layout file's `node_config_feat`, read-only, never loaded whole: compact from
    the read cache where its values allow (the module docstring), else a memory map
    (`open_member_mmap`). `GRAPHCOST_COMPACT_CACHE=0` keeps to the uncompressed copy
    (`bench replica` compares the two)."""
    path = Path(path)
    key = "node_config_feat"
    if os.environ.get("GRAPHCOST_COMPACT_CACHE", "1") != "0":
        _require_regular_file(path)
        with _zip_errors(path, key, "a readable array (the archive is corrupt)"), \
                zipfile.ZipFile(path) as zf:
            shape, fortran, dtype = _header(zf, path, key)
            info = zf.getinfo(key + ".npy")
            if info.compress_type != zipfile.ZIP_STORED and not fortran and len(shape) == 3:
                compact = _compact_cached(path, info, shape, dtype)
                if compact is not None:
                    return compact
    return open_member_mmap(path, key)


def _compact_cached(path: Path, info: zipfile.ZipInfo, shape: tuple[int, ...],
                    dtype: np.dtype) -> CompactConfigs | None:
    """The member's compact cache entry, built on first use; None where its values
    cannot be compacted (then, and from then on, the uncompressed copy is used)."""
    key = _version_key(path, info.filename)
    entry = cache_dir() / (key + ".compact")
    if not entry.exists():
        if (cache_dir() / (key + ".npy")).exists():  # compacting it failed before
            return None

        def write(out: BinaryIO) -> None:
            with Inflated(path, info) as src:
                _read_npy_header(src)
                if not build(src, shape, dtype, out):
                    raise _NotCompact  # inside the atomic write: the half entry is dropped

        try:
            _fill_cache(path, info, entry, write)
        except _NotCompact:
            return None
    return open_compact(entry, _mmap_stored)


class _NotCompact(Exception):
    """A value the compact form cannot hold (`compact.build` said so)."""


def _mmap_cached(path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    target = cache_dir() / (_version_key(path, info.filename) + ".npy")
    if not target.exists():
        def copy(out: BinaryIO) -> None:
            with zf.open(info) as src:
                shutil.copyfileobj(src, out, length=16 << 20)
        _fill_cache(path, info, target, copy)
    arr = np.load(target, mmap_mode="r")
    return arr if arr.size else np.zeros(arr.shape, arr.dtype)


def _fill_cache(path: Path, info: zipfile.ZipInfo, target: Path,
                write: Callable[[BinaryIO], None]) -> None:
    """Write one member's cache entry, whole or not at all, by `write(file)`. The cache
    failing is never the archive's fault: a full disk is an EnvironmentFault, an
    unwritable cache a UserError naming GRAPHCOST_CACHE, so no reader skips a healthy
    file as corrupt."""
    if target.parent.is_dir():  # what extractions killed midway (SIGKILL) left behind
        remove_dead_writers_parts(target.parent)
    where = f"the read cache {cache_dir()} (GRAPHCOST_CACHE)"
    try:
        with atomic_open(target) as out:
            write(out)
    except EnvironmentFault:
        raise EnvironmentFault(
            f"{path}: cannot extract '{info.filename}' ({info.file_size} bytes) into {where}:"
            " the disk or quota is full; free space there or point GRAPHCOST_CACHE at a "
            "larger disk") from None
    except UserError as e:
        raise UserError(f"{path}: cannot extract '{info.filename}' into {where}: {e}; point "
                        "GRAPHCOST_CACHE at a writable folder") from None


# --------------------------------------------------------------------------- writing


def _archive_arrays(path: str | Path, graph: Graph,
                    extra: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    """The published keys of `graph` plus the `extra` per-config arrays, checked."""
    validate_graph(graph, path, deep=False)
    keys = TILE_KEYS if graph.kind == "tile" else LAYOUT_KEYS
    arrays = {k: np.asarray(getattr(graph, k)) for k in keys}
    for key, value in (extra or {}).items():
        value = np.asarray(value)
        if key not in EXTRA_KEYS or value.shape[:1] != (graph.num_configs,):
            raise ValueError(f"{path}: extra key {key!r} {value.shape} is not one of "
                             f"{EXTRA_KEYS} with one row per config ({graph.num_configs})")
        arrays[key] = value
    return arrays


def write_graph(path: str | Path, graph: Graph, compress: bool = True,
                extra: Mapping[str, np.ndarray] | None = None) -> Path:
    """Write a graph in the published format, atomically (temp file, then rename).

    `compress=False` stores members uncompressed so that readers can memory-map them
    in place with no cache. `extra` adds per-config `EXTRA_KEYS` arrays (one row per
    config), which readers of the published format ignore.
    """
    path = Path(path)
    arrays = _archive_arrays(path, graph, extra)
    with atomic_open(path) as f:
        (np.savez_compressed if compress else np.savez)(f, **arrays)
    return path


def graph_bytes(graph: Graph, extra: Mapping[str, np.ndarray] | None = None,
                name: str = "graph") -> bytes:
    """The compressed `.npz` that `write_graph` would write, in memory: how a graph
    measured on another machine travels to the process that writes the collection."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **_archive_arrays(name, graph, extra))
    return buffer.getvalue()
