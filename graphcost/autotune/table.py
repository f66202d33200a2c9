"""A table of measured configs: one program's option configs, their runtimes and which
compile to one executable (`graphcost collect --cover` measures one; `graphcost bench
search` runs strategies on it), and what a table teaches a search about other programs:
the expected gain of each single knob change (`move_prior`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from graphcost.autotune.strategy import Move
from graphcost.errors import UserError
from graphcost.formats.npz import TileGraph, read_extra, read_graph
from graphcost.xla.options import Choices, OptionConfig


@dataclasses.dataclass
class Table:
    """One program's measured configs: knob choices, runtimes and executables."""

    name: str
    configs: list[Choices]
    runtime: np.ndarray  # seconds or ns, per config
    executable: np.ndarray  # an id per config; configs of one executable share it
    default: int  # the row of the all-default config
    graph: TileGraph
    rounds: np.ndarray | None = None  # (configs, rounds) timing rounds, where stored

    @property
    def executables(self) -> int:
        return len(set(self.executable.tolist()))

    @property
    def optimum(self) -> float:
        """The table's best speed-up over the default."""
        return float(self.runtime[self.default] / self.runtime.min())


def decode_options(features: np.ndarray, path: Path) -> list[Choices]:
    """Knob choices of each row of an options graph's `config_feat`
    (`xla.options.OptionConfig.from_features`)."""
    out = []
    for r, row in enumerate(np.asarray(features)):
        try:
            out.append(OptionConfig.from_features(row).choices)
        except ValueError as e:
            raise UserError(f"{path}: config {r}: {e}: not an options:cpu graph") from None
    return out


def read_table(path: Path) -> Table:
    """One program of a table collection, its default found and its executables named."""
    g = read_graph(path)
    if not isinstance(g, TileGraph):
        raise UserError(f"{path}: a layout graph; bench search reads options tables")
    configs = decode_options(g.config_feat, path)
    default = OptionConfig.default().choices
    if default not in configs:
        raise UserError(f"{path}: no default config among its {len(configs)} configs")
    extra = read_extra(path)
    fingerprints = extra.get("config_fingerprint")
    if fingerprints is None:  # each config its own executable
        executable = np.arange(len(configs))
    else:
        _, executable = np.unique(np.asarray(fingerprints), axis=0, return_inverse=True)
    rounds = extra.get("config_runtime_rounds")
    return Table(path.stem, configs, np.asarray(g.config_runtime, dtype=np.float64),
                 np.asarray(executable).reshape(-1), configs.index(default), g,
                 None if rounds is None else np.asarray(rounds, dtype=np.float64))


def single_gains(t: Table) -> dict[Move, float]:
    """The log speed-up over the default of every config of `t` that changes one knob,
    keyed by that change (knob, value)."""
    base = t.runtime[t.default]
    out = {}
    for c, r in zip(t.configs, t.runtime, strict=True):
        changed = [k for k, v in enumerate(c) if v]
        if len(changed) == 1:
            out[(changed[0], c[changed[0]])] = float(np.log(base / r))
    return out


def move_prior(programs: Iterable[dict[Move, float]]) -> dict[Move, float]:
    """Each single knob change's expected gain over `programs` (each one's `single_gains`):
    the mean over the programs that measured it of max(0, log speed-up). A change that is
    a large win on some programs and a loss on the rest scores above one that is level
    everywhere: a search pays one measurement for a loss, and keeps a win."""
    gains: dict[Move, list[float]] = {}
    for program in programs:
        for m, g in program.items():
            gains.setdefault(m, []).append(max(g, 0.0))
    return {m: float(np.mean(v)) for m, v in sorted(gains.items())}


def bundled_prior() -> dict[Move, float]:
    """The move prior of the table that ships with graphcost (`sample/table`): what the
    prior strategies of `graphcost autotune` start from on a user's program."""
    from graphcost.data.inspect import sample_root

    root = sample_root() / "table" / "npz" / "options" / "cpu"
    return move_prior(single_gains(read_table(f)) for f in sorted(root.rglob("*.npz")))
