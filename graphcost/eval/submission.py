"""Competition submission CSVs (docs/design.md §5): write them, and read them back with checks.

`ID,TopConfigs`; ID is `tile:xla:<graph>` or `layout:<source>:<search>:<graph>`, or for
graphcost's own compiler-option collections (tile graphs) `options:<source>:<graph>`;
TopConfigs are config indices joined by ';', fastest first: the top 5 for tile, a
full permutation for layout.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from graphcost.atomic import atomic_open
from graphcost.errors import UserError

TILE_TOP = 5

#: the first word of a collection's name: the kind of its graphs and the number of
#: words of its IDs (`tile:<source>:<graph>`, `layout:<source>:<search>:<graph>`)
ID_SHAPES = {"tile": ("tile", 3), "options": ("tile", 3), "layout": ("layout", 4)}
ID_FORMS = ("an ID 'tile:<source>:<graph>', 'options:<source>:<graph>' or "
            "'layout:<source>:<search>:<graph>'")


class SubmissionError(UserError):
    """A submission row that breaks the format, naming the file, line and ID."""


def id_kind(key: str) -> str | None:
    """The kind of the graph a submission ID names, or None when it has no ID's shape."""
    parts = key.split(":")
    kind, words = ID_SHAPES.get(parts[0], (None, 0))
    return kind if len(parts) == words and all(parts) else None


def submission_id(collection: str, graph: str) -> str:
    """The row ID of a graph of a collection named like `tile:xla`, `options:cpu` or
    `layout:xla:random`; refused for another name, so that every ID written reads back."""
    key = f"{collection}:{graph}"
    if id_kind(key) is None:
        raise UserError(f"graph {graph} of collection {collection}: a submission needs "
                        f"{ID_FORMS} (a collection in a folder npz/tile/<source>, "
                        f"npz/options/<source> or npz/layout/<source>/<search>), got '{key}'")
    return key


def ranking_from_scores(kind: str, scores: np.ndarray) -> list[int]:
    """Config indices fastest first (lowest score first; ties by index)."""
    order = np.argsort(np.asarray(scores, dtype=np.float64), kind="stable")
    return [int(i) for i in (order[:TILE_TOP] if kind == "tile" else order)]


def write_submission(rows: Mapping[str, Iterable[int]], path: str | Path) -> Path:
    """Write {ID: ranked config indices} as a submission CSV, atomically."""
    path = Path(path)
    with atomic_open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["ID", "TopConfigs"])
        for key in sorted(rows):
            w.writerow([key, ";".join(str(int(i)) for i in rows[key])])
    return path


def read_submission(path: str | Path,
                    num_configs: Mapping[str, int] | None = None) -> dict[str, list[int]]:
    """Read and check a submission CSV.

    Checks the header, ID shapes, duplicate IDs, integer indices without repeats,
    exactly 5 (or all, if fewer) for tile and, given `num_configs` per ID, a full
    permutation for layout, that every expected ID is present and no other.
    """
    path = Path(path)

    def fail(line: int, key: str, expected: str) -> None:
        raise SubmissionError(f"{path}: line {line} (ID '{key}'): expected {expected}")

    out: dict[str, list[int]] = {}
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header != ["ID", "TopConfigs"]:
            raise SubmissionError(f"{path}: line 1: expected header 'ID,TopConfigs', got {header}")
        for line, row in enumerate(reader, start=2):
            if len(row) != 2:
                fail(line, row[0] if row else "", f"2 fields, got {len(row)}")
            key, configs = row
            kind = id_kind(key)
            if kind is None:
                fail(line, key, ID_FORMS)
            if num_configs is not None and key not in num_configs:
                fail(line, key, _expected_graph(key, num_configs))
            if key in out:
                fail(line, key, "each ID once, got a duplicate")
            try:
                ranks = [int(x) for x in configs.split(";")]
            except ValueError:
                fail(line, key, f"';'-joined integers, got '{configs[:40]}'")
            if len(set(ranks)) != len(ranks) or min(ranks) < 0:
                fail(line, key, "distinct non-negative config indices")
            n = None if num_configs is None else num_configs.get(key)
            if kind == "tile":
                want = TILE_TOP if n is None else min(TILE_TOP, n)
                if len(ranks) != want:
                    fail(line, key, f"{want} tile configs, got {len(ranks)}")
            if n is not None and max(ranks) >= n:
                fail(line, key, f"indices below {n} (the graph's configs), got {max(ranks)}")
            if kind == "layout" and n is not None and len(ranks) != n:
                fail(line, key, f"a full permutation of {n} configs, got {len(ranks)}")
            out[key] = ranks
    if num_configs is not None:
        absent = sorted(set(num_configs) - set(out))
        if absent:
            raise SubmissionError(f"{path}: expected a row for every graph; missing "
                                  f"{len(absent)}, e.g. {absent[:3]}")
    return out


def _expected_graph(key: str, num_configs: Mapping[str, int]) -> str:
    """What an ID of no expected graph should have been: its collection's or another."""
    collection, _, graph = key.rpartition(":")
    known = sorted({k.rpartition(":")[0] for k in num_configs})
    if collection in known:
        return f"an ID of an expected graph, got graph {graph} that {collection} lacks"
    return f"an ID of an expected collection ({', '.join(known)}), got {collection}"
