"""A layout file's configs in the read cache, compact: each distinct row once, and per
config and configurable node the number of its row.

Every entry of a published `node_config_feat` (c, nc, 18) is a small integer, −1..5 (a
minor-to-major dimension, or −1 for "not set"), stored as float32: 72 bytes per
configurable node and config, 100,040 configs × 2,050 nodes = 15 GB for the largest
file, which deflate packs about 27×. Few of the 7**18 possible rows occur, so the cache
keeps the distinct rows (`rows`, float32) and a (c, nc) array of row numbers (`codes`,
uint16: 2 bytes instead of 72; uint32 where a file has more than 65,536 distinct rows).
`CompactConfigs` gives back exactly the float32 array the file holds: the build checks
every value bit for bit against its decoded row, so a file with any other value
(a fraction, −0.0, NaN) is not compacted (`build` returns False) and the reader falls
back to the plain uncompressed copy.

The cache entry, `KEY.compact`, is an uncompressed zip of `codes.npy` and `rows.npy` (an
`.npz` as `np.savez` writes it), written whole or not at all, whose `codes` are
memory-mapped in place: indexing a few configs reads only their rows of codes.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import numpy as np

#: entries of a layout config row, and the values an entry takes in the published files
ROW = 18
LOW, HIGH = -1, 5
BASE = HIGH - LOW + 1  # 7: a row is a number of 18 base-7 digits (< 2**51)
#: rows of (c·nc, 18) float32 converted at a time: 16 MiB, small enough that converting
#: one chunk overlaps inflating the next even in a file of a few chunks
CHUNK_ROWS = (1 << 24) // (ROW * 4)


class CompactConfigs:
    """A read-only (c, nc, 18) float32 array held as `rows[codes]`: index it as an array
    (`x[ids]`, `x[a:b]`, `x[i, :, 0:2]`) and get the very values the file holds."""

    ndim = 3
    dtype = np.dtype(np.float32)

    def __init__(self, rows: np.ndarray, codes: np.ndarray):
        self.rows, self.codes = rows, codes  # (d, 18) float32; (c, nc) unsigned ints

    @property
    def shape(self) -> tuple[int, int, int]:
        return (*self.codes.shape, ROW)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key) -> np.ndarray:
        key = key if isinstance(key, tuple) else (key,)
        if len(key) > 3 or any(k is Ellipsis or k is None for k in key):
            raise IndexError(f"CompactConfigs takes up to 3 plain indices, got {key!r}")
        out = self.rows[self.codes[key[:2]]]
        return out[..., key[2]] if len(key) == 3 else out

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self[:]
        return out if dtype is None else out.astype(dtype, copy=False)


def decode(keys: np.ndarray) -> np.ndarray:
    """(n,) row numbers → (n, 18) float32 rows: entry i is digit i in base 7, less 1."""
    digits = (keys[:, None] // BASE ** np.arange(ROW, dtype=np.int64)) % BASE
    return (digits + LOW).astype(np.float32)


#: a row's number: Σ (e_i + 1)·7**i over its 18 entries
_POWERS = BASE ** np.arange(ROW, dtype=np.int64)


def _keys(x: np.ndarray) -> np.ndarray:
    """(n, 18) float32 → (n,) int64 row numbers: exact where every entry is an integer in
    −1..5, anything where one is not (the caller checks by decoding). Integer arithmetic,
    not BLAS: BLAS's threads would spin on the core that inflates the next chunk."""
    with np.errstate(invalid="ignore", over="ignore"):
        return (x.astype(np.int8).astype(np.int64) - LOW) @ _POWERS


class _TooMany(Exception):
    """More distinct rows than the codes' dtype numbers."""


def build(src: BinaryIO, shape: tuple[int, ...], dtype: np.dtype, out: BinaryIO) -> bool:
    """Read the C-order (c, nc, 18) array of `dtype` from `src`, positioned at its first
    value (read once, or twice for a file of over 65,536 distinct rows), and write its
    compact cache entry to `out`; return False, with `out` incomplete, where a value is
    not exactly one of −1..5 once cast to float32 (as readers cast)."""
    start = src.tell()
    for codes_dtype in (np.uint16, np.uint32):
        try:
            return _build(src, shape[:2], dtype, out, codes_dtype)
        except _TooMany:
            src.seek(start)
            out.seek(0)
            out.truncate()
    raise AssertionError("uint32 codes number every row of any file")  # pragma: no cover


def _build(src: BinaryIO, shape: tuple[int, int], dtype: np.dtype, out: BinaryIO,
           codes_dtype: type) -> bool:
    """`build` with codes of `codes_dtype`. The next chunk is inflated in a thread while
    this one is converted (zlib and numpy release the GIL), so a first read costs about
    what inflating the member costs."""
    n = shape[0] * shape[1]
    limit = np.iinfo(codes_dtype).max + 1
    known = np.empty(0, np.int64)  # row numbers seen so far, sorted
    code = np.empty(0, np.int64)  # the code of each: rows of earlier chunks come first
    table = decode(known)  # the row of each, decoded once per new row
    item = dtype.itemsize * ROW
    sizes = [min(CHUNK_ROWS, n - lo) for lo in range(0, n, CHUNK_ROWS)]
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf, ThreadPoolExecutor(1) as pool:
        with zf.open("codes.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array_header_1_0(
                f, {"descr": np.lib.format.dtype_to_descr(np.dtype(codes_dtype)),
                    "fortran_order": False, "shape": shape})
            ahead = pool.submit(src.read, sizes[0] * item) if sizes else None
            for i, rows in enumerate(sizes):
                buf = ahead.result()
                if len(buf) != rows * item:
                    raise EOFError(f"the array ends after {sum(sizes[:i]) + len(buf) // item}"
                                   f" of {n} rows")
                if i + 1 < len(sizes):
                    ahead = pool.submit(src.read, sizes[i + 1] * item)
                x = np.frombuffer(buf, dtype).reshape(rows, ROW).astype(np.float32,
                                                                        copy=False)
                keys = _keys(x)
                pos = np.searchsorted(known, keys)
                seen = known[np.minimum(pos, len(known) - 1)] == keys if len(known) else \
                    np.zeros(len(keys), bool)
                if not seen.all():  # new rows: numbered after those seen before
                    new = np.unique(keys[~seen])
                    code = np.concatenate([code, len(known) + np.arange(len(new))])
                    known = np.concatenate([known, new])
                    order = np.argsort(known, kind="stable")
                    known, code = known[order], code[order]
                    if len(known) > limit:
                        raise _TooMany
                    table = decode(known)
                    pos = np.searchsorted(known, keys)
                decoded = np.take(table, pos, axis=0)
                if not np.array_equal(decoded.view(np.uint32), x.view(np.uint32)):
                    return False  # a value outside −1..5, a fraction, −0.0 or NaN
                f.write(code[pos].astype(codes_dtype).tobytes())
        with zf.open("rows.npy", "w") as f:
            in_order = np.empty_like(known)
            in_order[code] = known
            np.lib.format.write_array(f, decode(in_order))
    return True


def open_compact(path: Path, mmap_member: Callable[[Path, zipfile.ZipInfo], np.ndarray]
                 ) -> CompactConfigs:
    """The cache entry at `path`: its rows read, its codes memory-mapped in place by
    `mmap_member` (the reader's map of a stored member)."""
    with zipfile.ZipFile(path) as zf:
        with zf.open("rows.npy") as f:
            rows = np.lib.format.read_array(f)
        codes = mmap_member(path, zf.getinfo("codes.npy"))
    return CompactConfigs(rows, codes)
