"""An XLA `HloModuleProto` as a TpuGraphs graph: nodes, 140 features, opcodes, edges
(docs/design.md §4).

Every computation of the module is flattened into one graph, in the proto's order
(computations callee-first, instructions operand-first, so producers precede their
consumers). One node per instruction; an edge `[consumer, producer]` to each distinct
operand and to the root of every computation the instruction calls (fusion, while,
call, reduce's `to_apply`, ...). `node_splits` holds the node id where each computation
starts (the official converter marks only computations named *cluster*, *while* or
*cond* and appends n; every start is the more useful and docs/design.md §1 reading).
`FEATURE_TABLE` below says how each of the 140 columns is computed.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from google.protobuf.message import DecodeError

from graphcost.formats import hlo_proto as pb
from graphcost.formats.errors import GraphFileError
from graphcost.formats.records import NUM_NODE_FEATURES

# ------------------------------------------------------------------ opcode ids (docs/design.md §3)

_OPCODE_NAMES = """
abs add add-dependency after-all all-reduce all-to-all atan2 batch-norm-grad
batch-norm-inference batch-norm-training bitcast bitcast-convert broadcast call ceil
cholesky clamp collective-permute count-leading-zeros compare complex concatenate
conditional constant convert convolution copy copy-done copy-start cosine custom-call
divide domain dot dynamic-slice dynamic-update-slice exponential exponential-minus-one fft
floor fusion gather get-dimension-size set-dimension-size get-tuple-element imag infeed
iota is-finite log log-plus-one and not or xor map maximum minimum multiply negate outfeed
pad parameter partition-id popcnt power real recv recv-done reduce reduce-precision
reduce-window remainder replica-id reshape reverse rng rng-get-and-update-state
rng-bit-generator round-nearest-afz rsqrt scatter select select-and-scatter send send-done
shift-left shift-right-arithmetic shift-right-logical sign sine slice sort sqrt subtract
tanh - transpose triangular-solve tuple - while cbrt all-gather collective-permute-start
collective-permute-done logistic dynamic-reshape all-reduce-start all-reduce-done
reduce-scatter all-gather-start all-gather-done opt-barrier async-start async-update
async-done round-nearest-even stochastic-convert tan
""".split()
#: opcode name -> id; ids 1..120 in docs/design.md §3 order ('-' marks the unused ids 97 and 101).
OPCODE_IDS: dict[str, int] = {n: i for i, n in enumerate(_OPCODE_NAMES, start=1) if n != "-"}
UNKNOWN_OPCODE = 0

# ------------------------------------------------------------------ the 140 node features

#: PrimitiveType enum numbers (xla_data.proto) in the column order of features 2-20.
ELEMENT_TYPES: tuple[tuple[str, int], ...] = (
    ("invalid", 0), ("pred", 1), ("s8", 2), ("s16", 3), ("s32", 4), ("s64", 5), ("u8", 6),
    ("u16", 7), ("u32", 8), ("u64", 9), ("f16", 10), ("f32", 11), ("f64", 12), ("bf16", 16),
    ("c64", 15), ("c128", 18), ("tuple", 13), ("opaque", 14), ("token", 17),
)
_TYPE_COLUMN = {number: 2 + k for k, (_, number) in enumerate(ELEMENT_TYPES)}

#: (first column, width, name, how it is computed). "seq6" = values 0..5 (0 past the end),
#: then sum, then product of ALL values (1 for an empty list, as the official converter);
#: "seq2" the same with 2 leading values; "lead6" = values 0..5 only. Fields an
#: instruction does not set are proto3 defaults (0, empty), exactly as published.
FEATURE_TABLE: tuple[tuple[int, int, str, str], ...] = (
    (0, 1, "is_root", "1 if instruction id == its computation's root_id"),
    (1, 1, "element_size_in_bits", "always 0 (the published data never sets it)"),
    (2, 19, "element_type", "one-hot of shape.element_type over ELEMENT_TYPES; types not "
                            "listed there (f8*, s4, u4, ...) leave all 19 columns 0"),
    (21, 8, "shape.dimensions", "seq6 of shape.dimensions (tuples: empty -> 0s, product 1)"),
    (29, 1, "tuple_shapes_size", "number of top-level shape.tuple_shapes"),
    (30, 1, "parameter_number", "parameter_number (0 for non-parameters)"),
    (31, 6, "dimensions", "lead6 of the instruction's dimensions (reduce, transpose, ...)"),
    (37, 8, "window.size", "seq6 over window.dimensions[].size"),
    (45, 8, "window.stride", "seq6 over window.dimensions[].stride"),
    (53, 8, "window.padding_low", "seq6 over window.dimensions[].padding_low"),
    (61, 8, "window.padding_high", "seq6 over window.dimensions[].padding_high"),
    (69, 8, "window.window_dilation", "seq6 over window.dimensions[].window_dilation"),
    (77, 8, "window.base_dilation", "seq6 over window.dimensions[].base_dilation"),
    (85, 8, "window.window_reversal", "6 flags (0/1), then count of true, count of false"),
    (93, 2, "conv.input_batch/feature", "convolution_dimension_numbers.input_batch_dimension, "
                                        "input_feature_dimension"),
    (95, 4, "conv.input_spatial", "lead4 of input_spatial_dimensions"),
    (99, 2, "conv.kernel_in/out_feature", "kernel_input_feature_dimension, "
                                          "kernel_output_feature_dimension"),
    (101, 4, "conv.kernel_spatial", "lead4 of kernel_spatial_dimensions"),
    (105, 2, "conv.output_batch/feature", "output_batch_dimension, output_feature_dimension "
                                          "(output spatial dims are not encoded)"),
    (107, 1, "feature_group_count", "feature_group_count (0 when unset)"),
    (108, 1, "batch_group_count", "batch_group_count (0 when unset)"),
    (109, 4, "slice.start", "seq2 over slice_dimensions[].start"),
    (113, 4, "slice.stride", "seq2 over slice_dimensions[].stride"),
    (117, 4, "slice.limit", "seq2 over slice_dimensions[].limit"),
    (121, 4, "dynamic_slice_sizes", "seq2 of dynamic_slice_sizes"),
    (125, 4, "padding.low", "seq2 over padding_config.dimensions[].edge_padding_low"),
    (129, 4, "padding.high", "seq2 over padding_config.dimensions[].edge_padding_high"),
    (133, 1, "is_stable", "1 if is_stable (sort)"),
    (134, 6, "layout.minor_to_major", "lead6 of shape.layout.minor_to_major, 0-padded as "
                                      "published (ambiguous with dimension 0, docs/design.md §2)"),
)


def _seq(values: Iterable[int], lead: int) -> list[float]:
    vals = [int(v) for v in values]
    head = vals[:lead] + [0] * (lead - min(lead, len(vals)))
    return [float(v) for v in head] + [float(sum(vals)), float(math.prod(vals))]


def _lead(values: Iterable[int], lead: int) -> list[float]:
    vals = [float(v) for v in values][:lead]
    return vals + [0.0] * (lead - len(vals))


def _flags(values: Iterable[bool], lead: int) -> list[float]:
    vals = [bool(v) for v in values]
    return _lead(vals, lead) + [float(sum(vals)), float(len(vals) - sum(vals))]


def instruction_features(inst: pb.HloInstructionProto, is_root: bool) -> np.ndarray:
    """The 140 features of one instruction, column by column as in `FEATURE_TABLE`."""
    shape, win = inst.shape, inst.window.dimensions
    conv, pad, sl = inst.convolution_dimension_numbers, inst.padding_config.dimensions, \
        inst.slice_dimensions
    one_hot = [0.0] * len(ELEMENT_TYPES)
    if shape.element_type in _TYPE_COLUMN:
        one_hot[_TYPE_COLUMN[shape.element_type] - 2] = 1.0
    row = (
        [float(is_root), 0.0] + one_hot
        + _seq(shape.dimensions, 6) + [float(len(shape.tuple_shapes)),
                                       float(inst.parameter_number)]
        + _lead(inst.dimensions, 6)
        + _seq((d.size for d in win), 6) + _seq((d.stride for d in win), 6)
        + _seq((d.padding_low for d in win), 6) + _seq((d.padding_high for d in win), 6)
        + _seq((d.window_dilation for d in win), 6) + _seq((d.base_dilation for d in win), 6)
        + _flags((d.window_reversal for d in win), 6)
        + [float(conv.input_batch_dimension), float(conv.input_feature_dimension)]
        + _lead(conv.input_spatial_dimensions, 4)
        + [float(conv.kernel_input_feature_dimension),
           float(conv.kernel_output_feature_dimension)]
        + _lead(conv.kernel_spatial_dimensions, 4)
        + [float(conv.output_batch_dimension), float(conv.output_feature_dimension)]
        + [float(inst.feature_group_count), float(inst.batch_group_count)]
        + _seq((s.start for s in sl), 2) + _seq((s.stride for s in sl), 2)
        + _seq((s.limit for s in sl), 2)
        + _seq(inst.dynamic_slice_sizes, 2)
        + _seq((p.edge_padding_low for p in pad), 2) + _seq((p.edge_padding_high for p in pad), 2)
        + [float(inst.is_stable)]
        + _lead(shape.layout.minor_to_major, 6)
    )
    return np.asarray(row, dtype=np.float32)


# ------------------------------------------------------------------ module -> graph


class UnknownOpcodeWarning(UserWarning):
    """Opcodes newer than docs/design.md §3: their nodes get id 0."""


@dataclass
class HloGraph:
    """The config-independent part of a TpuGraphs file, built from one HLO module."""

    name: str
    node_feat: np.ndarray  # (n, 140) float32
    node_opcode: np.ndarray  # (n,) int64
    edge_index: np.ndarray  # (m, 2) int64, [consumer, producer]
    node_splits: np.ndarray  # (k,) int64, first node of each computation
    node_names: list[str] = field(default_factory=list)  # instruction names, for reports
    unknown_opcodes: Counter = field(default_factory=Counter)  # opcode -> node count

    @property
    def num_nodes(self) -> int:
        return int(self.node_feat.shape[0])


def parse_hlo_module(data: bytes, source: str | Path = "<bytes>") -> pb.HloModuleProto:
    """Decode a serialized `HloModuleProto`; a corrupt one raises `GraphFileError`."""
    try:
        return pb.HloModuleProto.FromString(data)
    except DecodeError as e:
        raise GraphFileError(source, "<HloModuleProto>",
                             f"a serialized HloModuleProto (cannot decode: {e})") from None


def module_to_graph(module: pb.HloModuleProto, source: str | Path = "<module>",
                    key: str = "module") -> HloGraph:
    """Flatten every computation of `module` into one graph (docs/design.md §4).

    `source` and `key` name the file and the record in error messages. An operand or
    called computation that does not exist raises `GraphFileError`; opcodes missing
    from docs/design.md §3 become 0 and are counted in `unknown_opcodes` (and warned about).
    """
    node_of: dict[int, int] = {}
    root_of: dict[int, int] = {}
    splits: list[int] = []
    insts: list[tuple[int, int, pb.HloInstructionProto]] = []
    for ci, comp in enumerate(module.computations):
        splits.append(len(insts))
        for ii, inst in enumerate(comp.instructions):
            if inst.id in node_of:
                raise GraphFileError(source, f"{key}.computations[{ci}].instructions[{ii}].id",
                                     f"instruction ids unique in the module; id {inst.id} "
                                     f"('{inst.name}') is used twice")
            node_of[inst.id] = len(insts)
            insts.append((ci, ii, inst))
        if comp.instructions:
            if comp.root_id not in node_of or insts[node_of[comp.root_id]][0] != ci:
                raise GraphFileError(source, f"{key}.computations[{ci}].root_id",
                                     f"the id of an instruction of computation '{comp.name}', "
                                     f"got {comp.root_id}")
            root_of[comp.id] = node_of[comp.root_id]
    if not insts:
        raise GraphFileError(source, f"{key}.computations",
                             "an HloModuleProto with at least one instruction, got none")

    n = len(insts)
    feat = np.zeros((n, NUM_NODE_FEATURES), dtype=np.float32)
    opcode = np.zeros(n, dtype=np.int64)
    edges: list[tuple[int, int]] = []
    unknown: Counter = Counter()
    for u, (ci, ii, inst) in enumerate(insts):
        comp = module.computations[ci]
        feat[u] = instruction_features(inst, is_root=inst.id == comp.root_id)
        code = OPCODE_IDS.get(inst.opcode, UNKNOWN_OPCODE)
        if code == UNKNOWN_OPCODE:
            unknown[inst.opcode] += 1
        opcode[u] = code
        where = f"{key}.computations[{ci}].instructions[{ii}]"
        for op_id in inst.operand_ids:
            if op_id not in node_of:
                raise GraphFileError(source, f"{where}.operand_ids",
                                     f"ids of instructions of the module; '{inst.name}' names "
                                     f"operand id {op_id}, which no instruction has")
            edges.append((u, node_of[op_id]))
        for comp_id in inst.called_computation_ids:
            if comp_id not in root_of:
                raise GraphFileError(source, f"{where}.called_computation_ids",
                                     f"ids of non-empty computations of the module; "
                                     f"'{inst.name}' calls computation {comp_id}")
            edges.append((u, root_of[comp_id]))
    if unknown:
        listed = ", ".join(f"{k} x{v}" for k, v in unknown.most_common())
        warnings.warn(f"{source}: {key}: {sum(unknown.values())} nodes with opcodes not in "
                      f"docs/design.md §3 got id 0: {listed}", UnknownOpcodeWarning, stacklevel=2)
    edge_index = (np.unique(np.asarray(edges, dtype=np.int64), axis=0) if edges
                  else np.zeros((0, 2), dtype=np.int64))
    return HloGraph(
        name=module.name, node_feat=feat, node_opcode=opcode, edge_index=edge_index,
        node_splits=np.asarray(splits, dtype=np.int64),
        node_names=[inst.name for _, _, inst in insts], unknown_opcodes=unknown,
    )


def hlo_bytes_to_graph(data: bytes, source: str | Path = "<bytes>") -> HloGraph:
    """A serialized `HloModuleProto` (for example from JAX) as a graph."""
    return module_to_graph(parse_hlo_module(data, source), source)
