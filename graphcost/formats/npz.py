"""Read and write TpuGraphs `.npz` files exactly as published (DESIGN §1).

A graph is a plain dataclass of numpy arrays. Layout files can hold gigabytes of
`node_config_feat`, so that one array is opened lazily as a read-only memory map:
directly inside the archive when the member is stored uncompressed, otherwise from
an uncompressed copy extracted once into a per-user cache. Indexing the map with a
few config ids reads only those rows.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import struct
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from graphcost.atomic import atomic_open
from graphcost.formats.errors import GraphFileError
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
    shapes and ranges (not NaNs in big arrays: `validate_graph(deep=True)` does that).
    `runtimes=False` reads a file to be ranked, not scored: its runtimes may be absent
    (read as NaN) or placeholders such as the zeros of the published test split.
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
        arrays = {k: _load_member(npz, path, k) for k in keys if k in npz.files
                  and not (kind == "layout" and lazy and k == "node_config_feat")}
    if kind == "layout" and lazy:
        arrays["node_config_feat"] = open_member_mmap(path, "node_config_feat")
    for key in set(RUNTIME_KEYS) & set(keys) - set(arrays):  # runtimes=False only
        arrays[key] = np.full(_num_configs(kind, arrays), np.nan)
    graph = _build(kind, path.stem, arrays, path)
    validate_graph(graph, path, deep=False, runtimes=runtimes)
    return graph


#: what a file to be ranked (`read_graph(runtimes=False)`) may lack
RUNTIME_KEYS = ("config_runtime", "config_runtime_normalizers")


def _num_configs(kind: str, arrays: dict[str, np.ndarray]) -> int:
    feat = arrays["config_feat" if kind == "tile" else "node_config_feat"]
    return int(feat.shape[0]) if feat.ndim else 0


def read_extra(path: str | Path) -> dict[str, np.ndarray]:
    """The collector's optional per-config arrays (`EXTRA_KEYS`) a file holds."""
    path = Path(path)
    present = _member_names(path) & set(EXTRA_KEYS)
    with _open_npz(path) as npz:
        return {k: _load_member(npz, path, k) for k in sorted(present)}


def _build(kind: str, name: str, a: dict[str, np.ndarray], path: Path) -> Graph:
    common = dict(
        name=name,
        node_feat=_as(a["node_feat"], np.float32, path, "node_feat"),
        node_opcode=_as(a["node_opcode"], np.int64, path, "node_opcode").reshape(-1),
        edge_index=_edges(a["edge_index"], path),
    )
    if kind == "tile":
        return TileGraph(
            **common,
            config_feat=_as(a["config_feat"], np.float32, path, "config_feat"),
            # float64, not the published int64: measured runtimes may be fractional, and
            # float64 holds every integer runtime below 2**53 ns exactly
            config_runtime=_as(a["config_runtime"], np.float64, path,
                               "config_runtime").reshape(-1),
            config_runtime_normalizers=_as(a["config_runtime_normalizers"], np.float64, path,
                                           "config_runtime_normalizers").reshape(-1),
        )
    ncf = a["node_config_feat"]
    if not isinstance(ncf, np.memmap):
        ncf = _as(ncf, np.float32, path, "node_config_feat")
    return LayoutGraph(
        **common,
        node_config_ids=_as(a["node_config_ids"], np.int64, path, "node_config_ids").reshape(-1),
        node_config_feat=ncf,
        config_runtime=_as(a["config_runtime"], np.float64, path, "config_runtime").reshape(-1),
        node_splits=_as(a["node_splits"], np.int64, path, "node_splits").reshape(-1),
    )


def _as(x: np.ndarray, dtype: type, path: Path, key: str) -> np.ndarray:
    if x.dtype.kind not in "biuf":
        raise GraphFileError(path, key, f"a numeric array, got dtype {x.dtype}")
    return np.ascontiguousarray(x, dtype=dtype)


def _edges(x: np.ndarray, path: Path) -> np.ndarray:
    x = _as(x, np.int64, path, "edge_index")
    if x.size == 0:
        return x.reshape(0, 2)
    if x.ndim != 2 or x.shape[1] != 2:
        raise GraphFileError(path, "edge_index", f"shape (m, 2), got {x.shape}")
    return x


@contextmanager
def _open_npz(path: Path) -> Iterator[np.lib.npyio.NpzFile]:
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
    try:
        with zipfile.ZipFile(path) as zf:
            return {n[:-4] for n in zf.namelist() if n.endswith(".npy")}
    except FileNotFoundError:
        raise GraphFileError(path, "<file>", "an existing .npz file") from None
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise GraphFileError(path, "<archive>", f"a readable .npz archive ({e})") from None


def member_header(path: str | Path, key: str) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of one array, read from its `.npy` header without loading it."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as zf, zf.open(key + ".npy") as f:
            shape, _, dtype = _read_npy_header(f)
            return shape, dtype
    except KeyError:
        raise GraphFileError(path, key, "the key to be present") from None
    except (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError) as e:
        raise GraphFileError(path, key, f"a readable array header ({e})") from None


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
    once into `cache_dir()` (keyed by path, size and mtime) and mapped from there.
    """
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as zf:
            info = zf.getinfo(key + ".npy")
            if info.compress_type == zipfile.ZIP_STORED:
                return _mmap_stored(path, info)
            return _mmap_cached(path, zf, info)
    except KeyError:
        raise GraphFileError(path, key, "the key to be present") from None
    except (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError) as e:
        raise GraphFileError(path, key, f"a readable array (the archive is corrupt: {e})") from None


def _mmap_stored(path: Path, info: zipfile.ZipInfo) -> np.ndarray:
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        local = f.read(30)
        if len(local) < 30 or local[:4] != b"PK\x03\x04":
            raise ValueError("bad local file header")
        name_len, extra_len = struct.unpack("<HH", local[26:30])
        f.seek(info.header_offset + 30 + name_len + extra_len)
        shape, fortran, dtype = _read_npy_header(f)
        offset = f.tell()
    if offset + int(np.prod(shape)) * dtype.itemsize > os.path.getsize(path):
        raise ValueError("array data runs past the end of the file (truncated)")
    if int(np.prod(shape)) == 0:
        return np.zeros(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape,
                     order="F" if fortran else "C")


def _mmap_cached(path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    st = path.stat()
    ident = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{info.filename}"
    target = cache_dir() / (hashlib.sha1(ident.encode()).hexdigest() + ".npy")
    if not target.exists():
        with atomic_open(target) as out, zf.open(info) as src:
            shutil.copyfileobj(src, out, length=16 << 20)
    arr = np.load(target, mmap_mode="r")
    return arr if arr.size else np.zeros(arr.shape, arr.dtype)


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
