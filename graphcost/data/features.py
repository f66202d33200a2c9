"""Feature statistics of a collection's train split and the transform built from them.

Raw TpuGraphs features span many orders of magnitude (a shape product can be 1e9
beside one-hot columns), so models see: layout columns 134–139 re-padded with −1 past
the tensor's rank (0 is also a dimension index, docs/design.md §2), constant columns dropped,
wide-range columns through sign(x)·log1p(|x|), then every column standardised.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from graphcost.formats import Graph, TileGraph
from graphcost.formats.compact import CompactConfigs
from graphcost.formats.records import row_blocks

SHAPE_DIMS = slice(21, 27)
LAYOUT_COLS = slice(134, 140)
LOG_THRESHOLD = 1000.0  # a column whose train values reach beyond ±this is log-transformed


def tensor_rank(node_feat: np.ndarray) -> np.ndarray:
    """Rank of each node's tensor: the position of its last non-zero shape dimension + 1."""
    nonzero = node_feat[:, SHAPE_DIMS] != 0
    last = 6 - np.argmax(nonzero[:, ::-1], axis=1)
    return np.where(nonzero.any(1), last, 0)


def repad_layout(node_feat: np.ndarray) -> np.ndarray:
    """A copy whose minor_to_major columns are −1 past the tensor's rank."""
    out = np.array(node_feat, dtype=np.float32, copy=True)
    past = np.arange(6)[None, :] >= tensor_rank(out)[:, None]
    block = out[:, LAYOUT_COLS]  # a view into out
    block[past] = -1.0
    return out


def _signed_log(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.log1p(np.abs(x))


class _Moments:
    """Streaming min/max and first two moments of raw and log-transformed columns."""

    def __init__(self, dim: int):
        self.n = 0
        self.lo = np.full(dim, np.inf)
        self.hi = np.full(dim, -np.inf)
        self.s = np.zeros((2, dim))
        self.ss = np.zeros((2, dim))

    def add(self, x: np.ndarray) -> None:
        if x.size == 0:
            return
        x = x.astype(np.float64)
        self.n += x.shape[0]
        self.lo = np.minimum(self.lo, x.min(0))
        self.hi = np.maximum(self.hi, x.max(0))
        for i, v in enumerate((x, _signed_log(x))):
            self.s[i] += v.sum(0)
            self.ss[i] += (v * v).sum(0)

    def finish_minmax(self) -> _ColumnTransform:
        """The official baselines' normalisation: constant columns dropped, the others
        mapped from their train [min, max] onto [0, 1]."""
        if self.n == 0:
            raise ValueError("no rows to compute feature statistics from")
        keep = np.flatnonzero(self.hi > self.lo)
        return _ColumnTransform(keep, np.zeros(keep.size, bool), self.lo[keep],
                                (self.hi - self.lo)[keep])

    def finish(self) -> _ColumnTransform:
        if self.n == 0:
            raise ValueError("no rows to compute feature statistics from")
        keep = np.flatnonzero(self.hi > self.lo)
        use_log = np.maximum(np.abs(self.lo), np.abs(self.hi))[keep] > LOG_THRESHOLD
        which = use_log.astype(int)
        mean = self.s[which, keep] / self.n
        var = self.ss[which, keep] / self.n - mean**2
        std = np.sqrt(np.maximum(var, 0.0))
        return _ColumnTransform(keep, use_log, mean, np.where(std > 1e-8, std, 1.0))


@dataclass
class _ColumnTransform:
    keep: np.ndarray
    log: np.ndarray
    mean: np.ndarray
    std: np.ndarray

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)[:, self.keep]
        x[:, self.log] = _signed_log(x[:, self.log])
        return ((x - self.mean) / self.std).astype(np.float32)

    def to_dict(self) -> dict:
        return {"keep": self.keep.tolist(), "log": self.log.tolist(),
                "mean": self.mean.tolist(), "std": self.std.tolist()}

    @classmethod
    def from_dict(cls, d: dict) -> _ColumnTransform:
        return cls(np.array(d["keep"], np.int64), np.array(d["log"], bool),
                   np.array(d["mean"]), np.array(d["std"]))

    @classmethod
    def union(cls, parts: Sequence[_ColumnTransform]) -> _ColumnTransform:
        """Every (column, log) pair any of `parts` reads, scaled as the first that reads it."""
        first: dict[tuple[int, bool], tuple[float, float]] = {}
        for p in parts:
            for j, lg, mu, sd in zip(p.keep, p.log, p.mean, p.std, strict=True):
                first.setdefault((int(j), bool(lg)), (float(mu), float(sd)))
        keys = sorted(first)
        return cls(np.array([j for j, _ in keys], np.int64), np.array([lg for _, lg in keys]),
                   np.array([first[k][0] for k in keys]), np.array([first[k][1] for k in keys]))

    def affine_from(self, common: _ColumnTransform) -> ColumnMap:
        """These columns from `common`'s outputs y: (y·σ_c + μ_c − μ)/σ per column."""
        pairs = zip(common.keep, common.log, strict=True)
        at = {(int(j), bool(lg)): k for k, (j, lg) in enumerate(pairs)}
        index = np.array([at[int(j), bool(lg)]
                          for j, lg in zip(self.keep, self.log, strict=True)], np.int64)
        return ColumnMap(index, common.std[index] / self.std,
                         (common.mean[index] - self.mean) / self.std, int(common.keep.size))


@dataclass
class ColumnMap:
    """x = y[:, index] · scale + shift: one fitted transform's columns from another's
    `width` columns (columns a model adds after them, e.g. loop depths, pass as they are)."""

    index: np.ndarray
    scale: np.ndarray
    shift: np.ndarray
    width: int


STYLES = ("standard", "minmax", "raw")

#: bytes per element of each element type of node feature columns 2–20 (docs/design.md §2):
#: invalid, pred, s8, s16, s32, s64, u8, u16, u32, u64, f16, f32, f64, bf16, c64, c128,
#: tuple, opaque, token
ELEMENT_BYTES = np.array([0, 1, 1, 2, 4, 8, 1, 2, 4, 8, 2, 4, 8, 2, 8, 16, 0, 0, 0], np.float64)


def tensor_bytes(node_feat: np.ndarray) -> np.ndarray:
    """Bytes of each node's tensor, (..., 140) → (...): the product of its shape dims
    (0 past the rank counts as 1) times its element type's size."""
    elements = np.prod(np.maximum(node_feat[..., SHAPE_DIMS], 1.0), axis=-1)
    return elements * (node_feat[..., 2:21] @ ELEMENT_BYTES)


def _identity(dim: int) -> _ColumnTransform:
    return _ColumnTransform(np.arange(dim), np.zeros(dim, bool), np.zeros(dim), np.ones(dim))


@dataclass
class FeatureTransform:
    """Node (and config) feature transform fitted on a train split.

    style 'standard' (graphcost's models): as the module docstring says; layout per-node
    config features (−1..5 minor-to-major orders) are small integers already and are
    used as they are. style 'minmax' (the official baselines, as their loaders do): raw
    features, no re-padding, constant columns dropped and the rest min-max scaled to
    [0, 1] with train statistics, layout config features too. style 'raw' (the
    heuristic baselines, which read feature values as they are): no change at all.
    """

    node_columns: _ColumnTransform
    tile_config_columns: _ColumnTransform | None = None
    style: str = "standard"
    layout_config_columns: _ColumnTransform | None = None

    @classmethod
    def fit(cls, graphs: Iterable[Graph], style: str = "standard") -> FeatureTransform:
        if style not in STYLES:
            raise ValueError(f"feature style must be one of {STYLES}, got {style!r}")
        if style == "raw":
            tile = any(isinstance(g, TileGraph) for g in graphs)
            return cls(_identity(140), _identity(24) if tile else None, style)
        minmax = style == "minmax"
        nodes, configs, layout = _Moments(140), _Moments(24), _Moments(18)
        for g in graphs:
            nodes.add(g.node_feat if minmax else repad_layout(g.node_feat))
            if isinstance(g, TileGraph):
                configs.add(g.config_feat)
            elif isinstance(g.node_config_feat, CompactConfigs) and minmax:
                layout.add(g.node_config_feat.rows)  # every value a config has: min, max
            elif minmax:  # block by block: a graph's configs may not fit in memory
                for _, block in row_blocks(g.node_config_feat):
                    layout.add(block.reshape(-1, 18))
        finish = _Moments.finish_minmax if minmax else _Moments.finish
        return cls(finish(nodes), finish(configs) if configs.n else None, style,
                   finish(layout) if layout.n else None)

    @property
    def node_dim(self) -> int:
        return int(self.node_columns.keep.size)

    @property
    def tile_config_dim(self) -> int:
        return 0 if self.tile_config_columns is None else int(self.tile_config_columns.keep.size)

    @property
    def layout_config_dim(self) -> int:
        """Layout config features a model sees: 18 as stored, fewer when minmax drops
        constant columns."""
        cols = self.layout_config_columns
        return 18 if cols is None else int(cols.keep.size)

    def node(self, node_feat: np.ndarray) -> np.ndarray:
        """(n, 140) raw features → (n, node_dim) float32 model inputs."""
        return self.node_columns(node_feat if self.style in ("minmax", "raw")
                                 else repad_layout(node_feat))

    def layout_config(self, configs: np.ndarray) -> np.ndarray:
        """(c, k, 18) layout config features → model inputs (as stored for 'standard')."""
        cols = self.layout_config_columns
        if cols is None:
            return configs
        c, k, _ = configs.shape
        return cols(configs.reshape(-1, 18)).reshape(c, k, -1)

    def tile_config(self, config_feat: np.ndarray) -> np.ndarray:
        """(c, 24) raw tile configs → (c, tile_config_dim) float32 model inputs."""
        if self.tile_config_columns is None:
            raise ValueError("this transform was fitted on layout graphs: no tile config stats")
        return self.tile_config_columns(config_feat)

    @classmethod
    def union(cls, transforms: Sequence[FeatureTransform]) -> FeatureTransform:
        """One transform from whose outputs each of `transforms`' follow by a map of columns
        (`map_to`): what networks trained on different graphs, each with its own fitted
        transform, read from one prepared graph. ValueError if they are of different styles
        or transform layout configs differently (not mapped)."""
        first = transforms[0]
        for t in transforms[1:]:
            if t.style != first.style:
                raise ValueError(f"feature styles {first.style!r} and {t.style!r} differ")
            if (t.tile_config_columns is None) != (first.tile_config_columns is None):
                raise ValueError("one transform reads tile configs and another does not")
            if _as_dict(t.layout_config_columns) != _as_dict(first.layout_config_columns):
                raise ValueError("their layout config transforms differ")
        tiles = [t.tile_config_columns for t in transforms if t.tile_config_columns is not None]
        return cls(_ColumnTransform.union([t.node_columns for t in transforms]),
                   _ColumnTransform.union(tiles) if tiles else None, first.style,
                   first.layout_config_columns)

    def map_to(self, other: FeatureTransform) -> tuple[ColumnMap, ColumnMap | None]:
        """How `other`'s node and tile config features follow from this transform's (made
        by `union` from a list holding `other`)."""
        tile = other.tile_config_columns
        return (other.node_columns.affine_from(self.node_columns),
                None if tile is None or self.tile_config_columns is None
                else tile.affine_from(self.tile_config_columns))

    def to_dict(self) -> dict:
        tile = self.tile_config_columns
        layout = self.layout_config_columns
        return {"node": self.node_columns.to_dict(), "tile_config": tile and tile.to_dict(),
                "style": self.style, "layout_config": layout and layout.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> FeatureTransform:
        tile, layout = d.get("tile_config"), d.get("layout_config")
        return cls(_ColumnTransform.from_dict(d["node"]),
                   _ColumnTransform.from_dict(tile) if tile else None,
                   d.get("style", "standard"),
                   _ColumnTransform.from_dict(layout) if layout else None)


def _as_dict(cols: _ColumnTransform | None) -> dict | None:
    return None if cols is None else cols.to_dict()
