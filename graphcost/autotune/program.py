"""A program ready to tune: its config space and its HLO graph.

`prepare` compiles the default once, reads the graph the model scores and finds the
configurable points. Measuring its configs (`measure`), the cost model that learns from
measurements (`costmodel`), the tuners and the benchmarks build on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from graphcost.autotune.chosen import CONFIG_FORMAT, signature
from graphcost.autotune.space import Config, LayoutSearchSpace, OptionSearchSpace, SearchSpace
from graphcost.errors import UserError
from graphcost.formats.npz import LayoutGraph, TileGraph
from graphcost.xla.configs import LayoutPlan, LayoutSpace
from graphcost.xla.options import OptionConfig


def load_target(spec: str) -> tuple[str, Callable, tuple]:
    """`MODULE:FUNCTION` (returning (callable, example_args)) or a zoo name `family.NNN`."""
    if ":" in spec:
        from graphcost.xla.extract import load_program

        fn, args = load_program(spec)
        return spec.rpartition(":")[2], fn, args
    from graphcost.xla.programs import FAMILIES, make_program

    family, _, index = spec.rpartition(".")
    if family not in FAMILIES or not index.isdigit():
        raise UserError(f"{spec!r} is neither MODULE:FUNCTION nor a zoo program "
                         f"family.NNN (families: {', '.join(sorted(FAMILIES))})")
    name, fn, args = make_program(family, int(index))
    return name, fn, args


@dataclass
class Tunable:
    """A program ready to tune: its layout space, config space and HLO graph."""

    name: str
    layout: LayoutSpace
    configs: SearchSpace
    hlo: Any  # formats.hlo.HloGraph of the default compilation
    node_ids: list[int]  # layout: node of each encoded point
    default_exe: Any

    def plan_and_options(self, config: Config) -> tuple[LayoutPlan, dict[str, Any]]:
        if self.configs.kind == "layout":
            return config, {}
        return {}, OptionConfig(config, self.configs.knobs).compiler_options()

    def graph_of(self, feat: np.ndarray,
                 runtime_ns: np.ndarray | None = None) -> LayoutGraph | TileGraph:
        """The program graph with encoded configs `feat` and their runtimes (default 1)."""
        h, c = self.hlo, len(feat)
        if self.configs.kind == "layout":
            rt = np.ones(c) if runtime_ns is None else np.asarray(runtime_ns, np.float64)
            return LayoutGraph(name=self.name, node_feat=h.node_feat, node_opcode=h.node_opcode,
                               edge_index=h.edge_index,
                               node_config_ids=np.asarray(self.node_ids, dtype=np.int64),
                               node_config_feat=feat, config_runtime=rt,
                               node_splits=h.node_splits)
        rt = (np.ones(c, np.int64) if runtime_ns is None
              else np.rint(np.asarray(runtime_ns)).astype(np.int64))
        return TileGraph(name=self.name, node_feat=h.node_feat, node_opcode=h.node_opcode,
                         edge_index=h.edge_index, config_feat=feat, config_runtime=rt,
                         config_runtime_normalizers=np.ones(c, np.int64))

    def config_json(self, config: Config) -> dict[str, Any]:
        plan, opts = self.plan_and_options(config)
        d: dict[str, Any] = {"format": CONFIG_FORMAT, "program": self.name,
                             "kind": self.configs.kind, "arguments": signature(self.layout),
                             "layouts": (self.configs.to_json(plan)
                                         if isinstance(self.configs, LayoutSearchSpace) else []),
                             "compiler_options": opts}
        return d


def prepare(name: str, fn: Callable, args: Sequence[Any], space: str) -> Tunable:
    """Compile the default once, read its HLO graph and find the configurable points of
    `space` ("layout" or "options", graphcost.kinds)."""
    from graphcost.xla.configs import locate_points
    from graphcost.xla.extract import compiled_graph
    from graphcost.xla.prepare import opcode_names

    layout = LayoutSpace(fn, tuple(args))
    default_exe = layout.compile({})
    hlo = compiled_graph(default_exe, name)
    if space == "options":
        return Tunable(name, layout, OptionSearchSpace(), hlo, [], default_exe)
    located = locate_points(layout, default_exe.as_text(), hlo.node_names,
                            opcode_names(hlo.node_opcode))
    layout.restrict(list(located))
    points = sorted({p for p, _ in layout.slots}, key=lambda p: located[p])
    if not points:
        raise UserError(f"{name}: no configurable layout (no parameter or dot/convolution of "
                         "rank 2-6 found in the compiled module); tune compiler options instead")
    return Tunable(name, layout, LayoutSearchSpace(layout, points), hlo,
                   [located[p] for p in points], default_exe)
