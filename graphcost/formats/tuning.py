"""Raw TPU tuning records (`TuningData` / `ModuleTuningData` .pb) to TpuGraphs graphs.

A record whose runs carry tile-size configs becomes a `TileGraph`; one whose runs carry
layout configs becomes a `LayoutGraph` (docs/design.md §1, §4). The graph part comes from
`hlo.module_to_graph`. Which runs and records are left out, and why, is the one table
`DROP_RULES`. A bad record is reported as a `GraphFileError` and the other records of
the file are still converted: `convert_tuning_file` never stops at the first problem.

Program graphs (an HLO module with no measured configs, e.g. from JAX) are written as a
layout file with no configurable nodes and one placeholder config of runtime 1.0:
`program_graph` builds one and `is_program_graph` recognises one.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError

from graphcost.errors import UserError
from graphcost.formats import hlo_proto as pb
from graphcost.formats.errors import GraphFileError
from graphcost.formats.hlo import HloGraph, module_to_graph
from graphcost.formats.npz import write_graph
from graphcost.formats.records import (
    NUM_LAYOUT_CONFIG_FEATURES,
    NUM_TILE_CONFIG_FEATURES,
    Graph,
    LayoutGraph,
    TileGraph,
)

#: Every run or record the converter leaves out: reason key -> explanation. The rules
#: follow the official converter (tpu_graphs/process_data/xla/tuning_data_iterator.cc).
DROP_RULES: dict[str, str] = {
    # runs
    "run_error": "run has error=true (the config failed to compile or run); its "
                 "compute_time_ns is 0",
    "run_no_time": "run has no profile or compute_time_ns <= 1 ns (tile) / <= 0 (layout): "
                   "nothing was measured",
    "run_wrong_kind": "run's config is not the record's kind (a layout run in a tile record "
                      "or the other way round)",
    "run_bad_layout": "layout run whose layout_config lists a different number of nodes than "
                      "config_index_to_node, or a node with more than 3 tensors",
    # records (each also appears in the report's `skipped` list with its name)
    "record_single_run": "tile record with fewer than 2 runs: nothing to rank (official: "
                         "modules with runs_size() <= 1 are skipped)",
    "record_no_runs_left": "every run of the record was dropped by the rules above",
    "record_no_default": "tile record with no surviving is_default run: no normalizer "
                         "(the official converter rejects these)",
}

_PLACEHOLDER_RUNTIME = 1.0


@dataclass
class ConvertReport:
    """What one input file turned into: graphs, bad records, and what was left out."""

    source: Path
    graphs: list[Graph] = field(default_factory=list)
    errors: list[GraphFileError] = field(default_factory=list)
    dropped_runs: Counter = field(default_factory=Counter)  # DROP_RULES key -> runs
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (record, DROP_RULES key)
    unknown_opcodes: Counter = field(default_factory=Counter)
    written: list[Path] = field(default_factory=list)


# ------------------------------------------------------------------ reading records


def _complete_prefix(data: bytes) -> tuple[pb.TopLevelRecord, int] | None:
    """The longest prefix of `data` made of whole top-level fields, parsed shallowly.

    A prefix parses only when it ends on a field boundary, so scanning candidate ends
    from the back (bytes that can start a field 1-4 tag) finds the last whole record.
    """
    tag_bytes = {0x0A, 0x10, 0x1A, 0x20, 0x22}
    for end in range(len(data) - 1, 0, -1):
        if data[end] not in tag_bytes:
            continue
        try:
            top = pb.TopLevelRecord.FromString(data[:end])
        except DecodeError:
            continue
        if len(top.field1) or len(top.field3):
            return top, end
    return None


def read_tuning_records(path: str | Path, report: ConvertReport | None = None
                        ) -> list[tuple[str, bytes]]:
    """The serialized `ModuleTuningData` records of a `TuningData` or `ModuleTuningData` file.

    Returns (record key, bytes) pairs. A truncated `TuningData` yields its whole records
    and adds a `GraphFileError` for the cut one to `report`; a file that is not a tuning
    record at all, or a truncated `ModuleTuningData`, raises `GraphFileError`.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise GraphFileError(path, "<file>", f"a readable tuning record file ({e})") from None
    expected = ("a TuningData or ModuleTuningData protobuf (the tuning.proto of "
                "github.com/google-research-datasets/tpu_graphs; docs/formats.md)")
    truncated_at = None
    try:
        top = pb.TopLevelRecord.FromString(data)
    except DecodeError:
        found = _complete_prefix(data)
        if found is None:
            raise GraphFileError(path, "<file>", f"{expected}; cannot decode any record "
                                 f"of its {len(data)} bytes") from None
        top, truncated_at = found
    is_module = bool(top.field2 or len(top.field3) or len(top.field4))
    if is_module:
        if truncated_at is not None:
            raise GraphFileError(path, "runs", "a complete ModuleTuningData; the file is "
                                 f"truncated or corrupt after byte {truncated_at} of "
                                 f"{len(data)} ({len(top.field3)} whole runs)")
        return [("record", data)]
    if not len(top.field1):
        raise GraphFileError(path, "<file>", f"{expected}; it holds no record")
    records = [(f"modules[{i}]", bytes(r)) for i, r in enumerate(top.field1)]
    if truncated_at is not None and report is not None:
        report.errors.append(GraphFileError(
            path, f"modules[{len(records)}]", "a complete ModuleTuningData record; the file "
            f"is truncated or corrupt after byte {truncated_at} of {len(data)} (the "
            f"{len(records)} records before it are converted)"))
    return records


# ------------------------------------------------------------------ records -> graphs


def tile_config_features(cfg: pb.TileSizeConfig) -> np.ndarray:
    """24 features: kernel, output, input bounds, each dims 0..5, sum, product (0 if empty)."""
    out: list[float] = []
    for bounds in (cfg.kernel_bounds, cfg.output_bounds, cfg.input_bounds):
        vals = [int(v) for v in bounds]
        out += [float(v) for v in vals[:6]] + [0.0] * (6 - min(6, len(vals)))
        out += [float(sum(vals)), float(np.prod(vals, dtype=np.float64)) if vals else 0.0]
    return np.asarray(out, dtype=np.float32)


def layout_config_features(cfg: pb.LayoutConfig, num_nodes: int) -> np.ndarray | None:
    """(nc, 18): per configurable node, tensors (output, input, kernel) x 6 minor-to-major
    dims, −1 padded; None if the config does not fit (`run_bad_layout`)."""
    if len(cfg.nodes) != num_nodes:
        return None
    feat = np.full((num_nodes, NUM_LAYOUT_CONFIG_FEATURES), -1.0, dtype=np.float32)
    for k, node in enumerate(cfg.nodes):
        if len(node.tensors) > 3:
            return None
        for t, tensor in enumerate(node.tensors):
            dims = list(tensor.dims)[:6]
            feat[k, 6 * t:6 * t + len(dims)] = dims
    return feat


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "graph"


def tile_graph(record: pb.ModuleTuningData, graph: HloGraph, name: str,
               report: ConvertReport) -> TileGraph | None:
    """A tile record as a `TileGraph`, or None (with the reason in `report.skipped`)."""
    if len(record.runs) < 2:
        report.skipped.append((name, "record_single_run"))
        return None
    feats, runtimes, default = [], [], None
    for run in record.runs:
        reason = _run_drop_reason(run, "op_config", min_time=2)
        if reason:
            report.dropped_runs[reason] += 1
            continue
        feats.append(tile_config_features(run.op_config.tile_size_config))
        runtimes.append(run.profile.compute_time_ns)
        if run.is_default and default is None:
            default = run.profile.compute_time_ns
    if not runtimes:
        report.skipped.append((name, "record_no_runs_left"))
        return None
    if default is None:
        report.skipped.append((name, "record_no_default"))
        return None
    rt = np.asarray(runtimes, dtype=np.int64)
    return TileGraph(
        name=name, node_feat=graph.node_feat, node_opcode=graph.node_opcode,
        edge_index=graph.edge_index,
        config_feat=np.stack(feats).reshape(-1, NUM_TILE_CONFIG_FEATURES),
        config_runtime=rt, config_runtime_normalizers=np.full_like(rt, default),
    )


def layout_graph(record: pb.ModuleTuningData, graph: HloGraph, name: str,
                 report: ConvertReport, source: Path, key: str) -> LayoutGraph | None:
    """A layout record as a `LayoutGraph` (raw runtimes), or None (reason in `report`).

    `config_index_to_node` holds positions in the flattened node order (in the fixture
    they all land on convolutions and reshapes; read as instruction ids they would not).
    Unlike tile records no default run is required: layout runtimes are not normalized.
    """
    ids = np.asarray(record.config_index_to_node, dtype=np.int64)
    if ids.size and ids.max() >= graph.num_nodes:
        raise GraphFileError(source, f"{key}.config_index_to_node", "node ids of the flattened "
                             f"module (0..{graph.num_nodes - 1}), got {int(ids.max())}")
    feats, runtimes = [], []
    for run in record.runs:
        reason = _run_drop_reason(run, "module_config", min_time=1)
        if not reason:
            f = layout_config_features(run.module_config.layout_config, ids.size)
            reason = "run_bad_layout" if f is None else None
        if reason:
            report.dropped_runs[reason] += 1
            continue
        feats.append(f)
        runtimes.append(float(run.profile.compute_time_ns))
    if not runtimes:
        report.skipped.append((name, "record_no_runs_left"))
        return None
    return LayoutGraph(
        name=name, node_feat=graph.node_feat, node_opcode=graph.node_opcode,
        edge_index=graph.edge_index, node_config_ids=ids,
        node_config_feat=np.stack(feats).astype(np.float32),
        config_runtime=np.asarray(runtimes, dtype=np.float64), node_splits=graph.node_splits,
    )


def _run_drop_reason(run, kind: str, min_time: int) -> str | None:
    if run.WhichOneof("config") != kind:
        return "run_wrong_kind"
    if run.error:
        return "run_error"
    if not run.HasField("profile") or run.profile.compute_time_ns < min_time:
        return "run_no_time"
    return None


def program_graph(graph: HloGraph, name: str | None = None) -> LayoutGraph:
    """A graph with no measured configs as a valid layout file.

    No configurable nodes and a single placeholder config whose runtime is 1.0: the file
    passes validation and round-trips, and `is_program_graph` tells it from measured data.
    """
    return LayoutGraph(
        name=name or graph.name, node_feat=graph.node_feat, node_opcode=graph.node_opcode,
        edge_index=graph.edge_index, node_config_ids=np.zeros(0, dtype=np.int64),
        node_config_feat=np.zeros((1, 0, NUM_LAYOUT_CONFIG_FEATURES), dtype=np.float32),
        config_runtime=np.full(1, _PLACEHOLDER_RUNTIME), node_splits=graph.node_splits,
    )


def is_program_graph(g: Graph) -> bool:
    """True for a file written by `program_graph`: structure only, no measurement."""
    return (isinstance(g, LayoutGraph) and g.node_config_ids.size == 0 and g.num_configs == 1
            and float(g.config_runtime[0]) == _PLACEHOLDER_RUNTIME)


# ------------------------------------------------------------------ files


def convert_tuning_file(path: str | Path) -> ConvertReport:
    """Every record of one tuning file as graphs; bad records land in `report.errors`."""
    path = Path(path)
    report = ConvertReport(source=path)
    try:
        records = read_tuning_records(path, report)
    except GraphFileError as e:
        report.errors.append(e)
        return report
    for index, (key, raw) in enumerate(records):
        name = _safe_name(path.stem)
        if key != "record":
            name = f"{name}.{index:03d}"
        try:
            g = _convert_record(path, key, raw, name, report)
        except GraphFileError as e:
            report.errors.append(e)
            continue
        if g is not None:
            report.graphs.append(g)
    return report


def _convert_record(path: Path, key: str, raw: bytes, name: str,
                    report: ConvertReport) -> Graph | None:
    try:
        record = pb.ModuleTuningData.FromString(raw)
    except DecodeError as e:
        raise GraphFileError(path, key, f"a ModuleTuningData record (cannot decode: {e})") \
            from None
    if not record.HasField("module"):
        raise GraphFileError(path, f"{key}.module", "an HloModuleProto (field 1), got none")
    kinds = {run.WhichOneof("config") for run in record.runs}
    graph = module_to_graph(record.module, path, key)
    report.unknown_opcodes.update(graph.unknown_opcodes)
    if key != "record":
        name = f"{name}.{_safe_name(record.module.name)}"
    if "module_config" in kinds:
        return layout_graph(record, graph, name, report, path, key)
    if "op_config" in kinds or len(record.runs) < 2:
        return tile_graph(record, graph, name, report)
    raise GraphFileError(path, f"{key}.runs", "runs with a tile config (op_config) or a "
                         "layout config (module_config)")


def convert_files(inputs: list[str | Path], out_dir: str | Path,
                  compress: bool = True) -> list[ConvertReport]:
    """Convert tuning files and write each graph to `out_dir/{tile,layout}/NAME.npz`.

    Graphs are named after their input's file name (`a/x.pb` gives `x.npz`), so two
    inputs with the same file name are refused before anything is converted: the second
    would overwrite the first's graphs. So is a graph file already in `out_dir` (an
    earlier call's, or this same conversion run before), before anything is written.
    """
    out_dir = Path(out_dir)
    first: dict[str, Path] = {}
    for src in map(Path, inputs):
        other = first.setdefault(_safe_name(src.stem), src)
        if other != src:
            raise UserError(f"{other} and {src} would both write graphs named "
                            f"{_safe_name(src.stem)!r} under {out_dir}: convert them into "
                            "separate output folders, or rename one")
    reports = [convert_tuning_file(src) for src in inputs]
    targets = [out_dir / g.kind / f"{g.name}.npz" for r in reports for g in r.graphs]
    existing = [t for t in targets if t.exists()]
    if existing:
        more = f" (and {len(existing) - 1} more of this conversion's graphs)" \
            if len(existing) > 1 else ""
        raise UserError(f"{existing[0]}{more} already exists, and convert replaces no "
                        "graph: convert into another output folder, or remove it first")
    for report in reports:
        for g in report.graphs:
            report.written.append(write_graph(out_dir / g.kind / f"{g.name}.npz", g, compress))
    return reports
