"""File formats: TpuGraphs `.npz` files (read, written, validated), XLA `HloModuleProto`
graphs (`hlo`) and raw TPU tuning records (`tuning`), all as the records of `records`."""

from graphcost.formats.errors import GraphFileError
from graphcost.formats.npz import (
    graph_kind,
    member_header,
    open_member_mmap,
    read_graph,
    write_graph,
)
from graphcost.formats.records import Graph, LayoutGraph, TileGraph
from graphcost.formats.validate import validate_graph

__all__ = [
    "Graph", "GraphFileError", "LayoutGraph", "TileGraph", "graph_kind", "member_header",
    "open_member_mmap", "read_graph", "validate_graph", "write_graph",
]
