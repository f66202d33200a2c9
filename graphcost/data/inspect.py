"""What `graphcost info` and `graphcost validate` do: summaries and checks of files
and whole collections."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from graphcost.data.collection import FileSummary, find_collections, summarize_file
from graphcost.data.dedup import duplicates
from graphcost.errors import CollectionError
from graphcost.formats import GraphFileError, read_graph
from graphcost.formats.npz import RUNTIME_KEYS


def sample_root() -> Path:
    """The small dataset shipped inside the package: its collections (`npz/`), the
    table of the options space (`table/`) and their cards."""
    return Path(str(resources.files("graphcost") / "sample"))


def sample_collections() -> Path:
    """The folder of the bundled collections (layout:cpu:random, layout:cpu:default,
    options:cpu)."""
    return sample_root() / "npz"


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given, and every `.npz` below each folder, sorted, once each. A FIFO,
    device or socket named `.npz` is listed too, to be reported by the reader (which
    never opens it), not skipped unseen."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(f for f in p.rglob("*.npz") if not f.is_dir())
        else:
            out.append(p)
    return list(dict.fromkeys(out))


def check_file(path: Path, warn: Callable[[str], None] | None = None
               ) -> GraphFileError | None:
    """The first problem of one file, or None: exactly what every reader refuses
    (`read_graph` checks dtypes, sizes, shapes, ranges and NaN/inf), so a file validate
    passes is one submit, evaluate and train can use. A file of a `test` split may lack
    runtimes (or hold zeros), as the published test split does: it is checked as a file
    to rank. `warn` receives what a reader takes but should not be silent about:
    identical configs whose runtimes contradict (`duplicates`)."""
    try:
        graph = read_graph(path, lazy=True)
    except GraphFileError as e:
        if not (e.key in RUNTIME_KEYS and path.parent.name == "test"):
            return e
        try:
            read_graph(path, lazy=True, runtimes=False)
        except GraphFileError as again:
            return again
        return None  # a file to rank: no runtimes to compare its duplicates by
    if warn is not None:
        found = duplicates(graph)
        if found.contradicting:
            warn(found.warning(path))
    return None


def validate_paths(paths: Iterable[str | Path],
                   progress: Callable[[Iterable], Iterable] = iter,
                   warn: Callable[[str], None] | None = None) -> list[GraphFileError]:
    """Every bad file among `paths` (files or folders), with its error; `warn` as for
    `check_file`."""
    files = expand_paths(paths)
    if not files:
        raise CollectionError(f"no .npz files in {', '.join(map(str, paths))}")
    return [e for e in (check_file(f, warn) for f in progress(files)) if e is not None]


@dataclass
class Stat:
    min: float
    median: float
    max: float

    @classmethod
    def of(cls, values: list[int]) -> Stat:
        v = np.asarray(values, dtype=np.float64)
        return cls(float(v.min()), float(np.median(v)), float(v.max()))


@dataclass
class GroupSummary:
    """Sizes of a group of files (a split of a collection, or the files given)."""

    name: str
    kind: str
    files: int
    bytes: int
    nodes: Stat
    edges: Stat
    configs: Stat
    configurable: Stat
    unreadable: list[GraphFileError]


def summarize_group(name: str, files: list[Path]) -> GroupSummary:
    rows: list[FileSummary] = []
    bad: list[GraphFileError] = []
    for f in files:
        try:
            rows.append(summarize_file(f))
        except GraphFileError as e:
            bad.append(e)
    if len(files) == 1 and bad:
        raise bad[0]  # one file: its own problem, not a summary of none
    if not rows:
        raise CollectionError(f"{name}: none of its {len(files)} .npz files is readable; "
                              f"the first: {bad[0]}")
    kinds = sorted({r.kind for r in rows})
    return GroupSummary(
        name=name, kind="/".join(kinds), files=len(rows), bytes=sum(r.bytes for r in rows),
        nodes=Stat.of([r.nodes for r in rows]), edges=Stat.of([r.edges for r in rows]),
        configs=Stat.of([r.configs for r in rows]),
        configurable=Stat.of([r.configurable for r in rows]), unreadable=bad)


def summarize(path: str | Path) -> list[GroupSummary]:
    """One summary per split of every collection at or below `path`, or of one file."""
    path = Path(path)
    if not path.is_dir():  # a file, or a FIFO or device the reader refuses by name
        return [summarize_group(path.name, [path])]
    groups = []
    for name, coll in sorted(find_collections(path).items()):
        for split, files in coll.splits.items():
            groups.append(summarize_group(f"{name} {split}", files))
    if not groups:
        raise CollectionError(f"{path}: no .npz files found")
    return groups
