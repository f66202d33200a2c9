"""Historical segment embeddings for Graph Segment Training (docs/design.md §6).

GST back-propagates through a few segments of a graph per step; every other segment's
embedding comes from `EmbeddingTable`, written when that segment was last encoded.
Stale embedding dropout (`stale_sum`, `fresh_weight`) keeps the model from leaning on
entries written by older weights.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from graphcost.atomic import write_json


def _read_meta(path: Path) -> dict | None:
    """The shapes a table on disk was made for; None when there is none or it is
    damaged: the table is then made anew (it holds only a cache of embeddings, which
    fresh segments rewrite), never a traceback on resume."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


class EmbeddingTable:
    """Historical segment embeddings keyed by (graph, config slot, segment), on disk.

    Two memory-mapped `.npy` files under `root`: `embeddings.npy` (R, d) float32 and
    `written.npy` (R,) int32, the epoch each entry was written (−1: never). Graph g's
    entry (slot, segment) is row offset[g] + slot·S_g + segment, so one config's segments
    are contiguous. Only the rows a step touches are paged in: resident memory is bounded
    by what steps read, not by the table's size.
    """

    def __init__(self, root: str | Path, shapes: Sequence[tuple[int, int]], dim: int,
                 resume: bool = False):
        self.root = Path(root)
        self.shapes = [(int(c), int(sg)) for c, sg in shapes]
        self.dim = int(dim)
        sizes = [c * sg for c, sg in self.shapes]
        self.offset = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        rows = max(1, int(self.offset[-1]))
        meta = json.loads(json.dumps({"shapes": self.shapes, "dim": self.dim}))
        meta_path = self.root / "table.json"
        files = [self.root / "embeddings.npy", self.root / "written.npy"]
        same = (resume and _read_meta(meta_path) == meta and all(f.exists() for f in files))
        self.root.mkdir(parents=True, exist_ok=True)
        if same:
            self.emb = np.load(self.root / "embeddings.npy", mmap_mode="r+")
            self.written = np.load(self.root / "written.npy", mmap_mode="r+")
        else:
            meta_path.unlink(missing_ok=True)  # a rebuild killed midway is never reused
            fmt = np.lib.format
            self.emb = fmt.open_memmap(self.root / "embeddings.npy", "w+", np.float32,
                                       (rows, self.dim))
            self.written = fmt.open_memmap(self.root / "written.npy", "w+", np.int32, (rows,))
            self.written[:] = -1
            write_json(meta, meta_path)  # last: a table.json names a whole table

    @property
    def nbytes(self) -> int:
        return int(self.emb.nbytes + self.written.nbytes)

    def _rows(self, g: int, slots: np.ndarray) -> np.ndarray:
        sg = self.shapes[g][1]
        slots = np.asarray(slots, dtype=np.int64)
        return self.offset[g] + slots[:, None] * sg + np.arange(sg)[None, :]

    def read(self, g: int, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(C, S, d) embeddings and (C, S) epochs written of graph g's configs `slots`."""
        rows = self._rows(g, slots)
        return np.asarray(self.emb[rows.reshape(-1)]).reshape(*rows.shape, self.dim), \
            np.asarray(self.written[rows])

    def write(self, g: int, slots: np.ndarray, segment: int, emb: np.ndarray, epoch: int) -> None:
        """Store (C, d) embeddings of one segment for configs `slots`, stamped `epoch`."""
        rows = self._rows(g, slots)[:, segment]
        self.emb[rows] = emb
        self.written[rows] = epoch

    def age(self, g: int, slots: np.ndarray, epoch: int) -> np.ndarray:
        """(C, S) epochs since each entry was written (−1 for never written)."""
        w = self.read(g, slots)[1]
        return np.where(w >= 0, epoch - w, -1)

    def forget_after(self, epoch: int) -> int:
        """Mark entries written after `epoch` as never written (a run resumed from that
        epoch's checkpoint must not see embeddings of weights it no longer has)."""
        count, step = 0, 1 << 22
        for i in range(0, self.written.shape[0], step):
            w = self.written[i:i + step]
            late = w > epoch
            count += int(late.sum())
            w[late] = -1
        return count

    def flush(self) -> None:
        self.emb.flush()
        self.written.flush()

    def close(self) -> None:
        self.flush()
        del self.emb, self.written


def stale_sum(stale: Tensor, fresh: int | Sequence[int], p: float,
              rng: np.random.Generator) -> Tensor:
    """Σ over segments not in `fresh` of (C, S, d) historical embeddings, each segment
    dropped with probability p (stale embedding dropout, docs/design.md §6).

    One draw per segment, shared by the C configs: a ranking loss compares configs of
    the same graph, and a segment kept for one config but dropped for another would
    add a whole segment's embedding to their difference, drowning what the configs
    change.
    """
    sg = stale.shape[1]
    keep = rng.random(sg) >= p if p > 0 else np.ones(sg, dtype=bool)
    w = keep.astype(np.float32)
    w[fresh] = 0.0
    return (stale * torch.from_numpy(w).to(stale.dtype)[None, :, None]).sum(1)


def fresh_weight(share: np.ndarray, fresh: Sequence[int], p: float) -> float:
    """The factor on the fresh segments that makes up for the stale ones dropped: their
    expected dropped share p·(1 − F) is added to the fresh share F, so the weights of a
    graph's segments still sum to 1 on average (with equal segments: 1 + p·(S − 1))."""
    f = float(np.sum(share[list(fresh)]))
    return 1.0 + p * (1.0 - f) / f
