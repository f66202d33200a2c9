"""Collections: named sets of `.npz` graphs split into train/valid/test (docs/design.md §1).

`npz/tile/xla/{split}` is `tile:xla`; `npz/layout/{source}/{search}/{split}` is
`layout:source:search`; any other folder path below `npz/` is named the same way
(our own `options:cpu`). A plain folder of `.npz` files is one collection with the
single split `all`. Bad files are skipped, logged and kept in `Collection.skipped`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from graphcost.errors import CollectionError
from graphcost.formats import Graph, GraphFileError, graph_kind, member_header, read_graph
from graphcost.formats.npz import RUNTIME_KEYS
from graphcost.formats.records import LAYOUT_KEYS, NUM_NODE_FEATURES, TILE_KEYS

SPLITS = ("train", "valid", "test")
log = logging.getLogger("graphcost")


@dataclass
class Collection:
    name: str
    root: Path
    splits: dict[str, list[Path]]
    skipped: list[GraphFileError] = field(default_factory=list)
    # graph name → source of programs, where the splits pool several collections
    # (`eval.crossval.source_folds`); empty for one collection
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """'tile' or 'layout', read from the first file's keys."""
        first: GraphFileError | None = None
        for files in self.splits.values():
            for f in files:
                try:
                    return graph_kind(f)
                except GraphFileError as e:
                    first = first or e
        raise CollectionError(f"collection {self.name} at {self.root}: no readable .npz file "
                              f"(first problem: {first})")

    def files(self, split: str) -> list[Path]:
        if split not in self.splits:
            raise CollectionError(f"collection {self.name} at {self.root} has no split "
                                  f"'{split}'; it has {', '.join(sorted(self.splits))}")
        return self.splits[split]

    def graphs(self, split: str, lazy: bool = True, runtimes: bool = True) -> Iterator[Graph]:
        """Every readable graph of a split; bad files are logged, recorded and skipped.
        `runtimes=False` reads files to rank, whose runtimes may be absent or zero."""
        for path in self.files(split):
            try:
                yield read_graph(path, lazy=lazy, runtimes=runtimes)
            except GraphFileError as e:
                self.skipped.append(e)
                log.warning("skipping bad file: %s", e)

    def __len__(self) -> int:
        return sum(len(f) for f in self.splits.values())


def _npz_files(d: Path) -> list[Path]:
    """The `.npz` entries of `d` but folders: a FIFO, device or broken link among them is
    kept, so that reading it reports it by name (the reader never opens it, so it cannot
    hang) instead of its silently going missing."""
    return sorted(p for p in d.glob("*.npz") if not p.is_dir())


def _name_for(d: Path) -> str:
    parts = d.resolve().parts
    if "npz" in parts:
        below = parts[len(parts) - parts[::-1].index("npz"):]
        if below:
            return ":".join(below)
    return d.name


def find_collections(root: str | Path) -> dict[str, Collection]:
    """Every collection below `root`, by name.

    A collection is a folder with split subfolders holding `.npz` files; a folder
    holding `.npz` files directly is a collection with the one split `all`. Two folders
    of one name (the bundled collections and the bundled table are both `options:cpu`)
    are refused rather than one silently hiding the other.
    """
    root = Path(root)
    if not root.is_dir():
        raise CollectionError(f"{root}: not a directory")
    found: dict[str, Collection] = {}
    if root.name in SPLITS and _npz_files(root):  # one split of a collection, named directly
        name = _name_for(root.parent)
        return {name: Collection(name=name, root=root.parent, splits={root.name: _npz_files(root)})}
    for d in sorted([root, *(p for p in root.rglob("*") if p.is_dir())]):
        if d.name in SPLITS:
            continue
        splits = {s: _npz_files(d / s) for s in SPLITS if (d / s).is_dir()}
        splits = {s: f for s, f in splits.items() if f}
        if not splits and _npz_files(d):
            splits = {"all": _npz_files(d)}
        if splits:
            name = _name_for(d)
            if name in found:
                raise CollectionError(f"{root}: two collections named {name} below it, "
                                      f"{found[name].root} and {d}; point at one of them")
            found[name] = Collection(name=name, root=d, splits=splits)
    return found


def open_collection(path: str | Path) -> Collection:
    """The one collection at or below `path` (error if none, or several: name one)."""
    found = find_collections(path)
    if len(found) != 1:
        if not found:
            raise CollectionError(f"{path}: no collection here (expected .npz files in it, "
                                  "or in train/, valid/, test/ below it)")
        raise CollectionError(f"{path}: expected one collection, found {len(found)}: "
                              f"{', '.join(sorted(found))}; name one of their folders")
    return next(iter(found.values()))


@dataclass
class FileSummary:
    path: Path
    kind: str
    nodes: int
    edges: int
    configs: int
    configurable: int  # layout: configurable nodes; tile: 0
    bytes: int


def summarize_file(path: str | Path) -> FileSummary:
    """Sizes of one file from its array headers only: fast even for gigabyte files. A
    file missing any key of its kind is refused (GraphFileError), as the reader would;
    runtimes may be missing from a `test` split, as published."""
    path = Path(path)
    kind = graph_kind(path)
    for key in TILE_KEYS if kind == "tile" else LAYOUT_KEYS:
        if not (key in RUNTIME_KEYS and path.parent.name == "test"):
            member_header(path, key)
    feat = member_header(path, "node_feat")[0]
    if len(feat) != 2 or feat[1] != NUM_NODE_FEATURES:
        raise GraphFileError(path, "node_feat", f"shape (n, {NUM_NODE_FEATURES}), got {feat}")
    nodes = feat[0]
    edges = member_header(path, "edge_index")[0]
    m = edges[0] if len(edges) == 2 else int(np.prod(edges)) // 2
    if kind == "tile":
        c, nc = member_header(path, "config_feat")[0][0], 0
    else:
        c = member_header(path, "node_config_feat")[0][0]
        nc = int(np.prod(member_header(path, "node_config_ids")[0]))
    return FileSummary(path, kind, int(nodes), int(m), int(c), nc, path.stat().st_size)
