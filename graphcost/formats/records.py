"""The graph records every layer shares: plain dataclasses of numpy arrays (docs/design.md §1).

They sit below both the `.npz` reader/writer and the validator, which each need them,
so neither has to import the other's module to know what a graph is.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from graphcost.formats.compact import CompactConfigs

NUM_NODE_FEATURES = 140
NUM_TILE_CONFIG_FEATURES = 24
NUM_LAYOUT_CONFIG_FEATURES = 18

TILE_KEYS = ("node_feat", "node_opcode", "edge_index", "config_feat", "config_runtime",
             "config_runtime_normalizers")
LAYOUT_KEYS = ("node_feat", "node_opcode", "edge_index", "node_config_ids",
               "node_config_feat", "config_runtime", "node_splits")
#: optional per-config keys graphcost's collector adds; readers of the published format
#: ignore them. `config_fingerprint` (c,) int64: configs with equal values compiled to
#: one executable and share one measurement; `config_runtime_rounds` (c, rounds)
#: float64: each timing round's runtime, ns (the noise ceiling is τ between rounds).
EXTRA_KEYS = ("config_fingerprint", "config_runtime_rounds")


@dataclass
class _GraphBase:
    """What both kinds share: the program graph itself."""

    name: str
    node_feat: np.ndarray  # (n, 140) float32
    node_opcode: np.ndarray  # (n,) int64
    edge_index: np.ndarray  # (m, 2) int64, consumer -> producer

    @property
    def num_nodes(self) -> int:
        return int(self.node_feat.shape[0])


@dataclass
class TileGraph(_GraphBase):
    """One fused kernel with graph-level tile configurations."""

    config_feat: np.ndarray  # (c, 24) float32
    config_runtime: np.ndarray  # (c,) ns: int64 as published; read as float64 (not truncated)
    config_runtime_normalizers: np.ndarray  # (c,) ns, as config_runtime
    kind: ClassVar[str] = "tile"

    @property
    def num_configs(self) -> int:
        return int(self.config_feat.shape[0])

    @property
    def target(self) -> np.ndarray:
        """Runtime relative to the default config: the quantity tile metrics use (NaN for
        a file read without runtimes, `read_graph(runtimes=False)`)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.config_runtime / self.config_runtime_normalizers


@dataclass
class LayoutGraph(_GraphBase):
    """One whole program with node-level layout configurations.

    `node_config_feat` may be a read-only memory map or the read cache's compact form
    (`CompactConfigs`); index it with a config subset (`graph.node_config_feat[ids]`)
    to read just those rows.
    """

    node_config_ids: np.ndarray  # (nc,) int64
    node_config_feat: np.ndarray  # (c, nc, 18) float32, possibly memory-mapped or compact
    config_runtime: np.ndarray  # (c,) float64
    node_splits: np.ndarray  # (k,) int64
    kind: ClassVar[str] = "layout"

    @property
    def num_configs(self) -> int:
        return int(self.node_config_feat.shape[0])

    @property
    def target(self) -> np.ndarray:
        return self.config_runtime

    def configs(self, ids: np.ndarray) -> np.ndarray:
        """Feature rows of the given configs, in the given order, as a float32 array."""
        ids = np.asarray(ids, dtype=np.int64)
        order = np.argsort(ids, kind="stable")  # sorted access is sequential on disk
        rows = np.asarray(self.node_config_feat[ids[order]], dtype=np.float32)
        release_pages(self.node_config_feat)
        out = np.empty_like(rows)
        out[order] = rows
        return out


#: elements a whole-array scan holds at a time (64 MiB of float32)
BLOCK_ELEMENTS = 1 << 24


def row_blocks(a: np.ndarray, max_elements: int = BLOCK_ELEMENTS
               ) -> Iterator[tuple[int, np.ndarray]]:
    """Every row of `a` as (first row, float32 block of rows): a scan of a memory-mapped
    array that keeps one block resident at a time, however large its file. A float32
    block is a view of the map (reading it again after the next block is drawn only
    costs minor faults); another dtype is cast, a copy."""
    rows = max(1, max_elements // max(1, int(np.prod(a.shape[1:]))))
    for start in range(0, a.shape[0], rows):
        yield start, np.asarray(a[start:start + rows], dtype=np.float32)
        release_pages(a)


def release_pages(a: np.ndarray) -> None:
    """Unmap from this process the pages that reading memory-mapped `a` mapped in.

    They stay in the page cache, so reading them again costs a minor fault, not I/O; but
    they no longer count in this process's resident memory, which would otherwise grow
    to the size of every file read (the kernel maps whole runs of cached pages around
    each one touched: 1,024 random rows of a 7 GB file mapped 1.9 GB). No-op for an
    array in memory.
    """
    if isinstance(a, CompactConfigs):
        a = a.codes
    mm = getattr(a, "_mmap", None)  # np.memmap's map, shared by its views
    if mm is not None and not mm.closed:
        mm.madvise(mmap.MADV_DONTNEED)


Graph = TileGraph | LayoutGraph
