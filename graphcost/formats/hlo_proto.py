"""Message classes for the parts of XLA's HLO protos and the TPU tuning records we read.

The descriptors are written here, field by field, from the public field numbers of
XLA's `xla_data.proto` / `hlo.proto` and TpuGraphs' `tuning.proto` (docs/design.md §4): no
generated code and no vendored `.proto` files. Only the fields the converter uses are
declared; protobuf skips every other field of a real record as an unknown field, so
new XLA fields never break parsing.

Enum fields (`element_type`) are declared as `int32`: the wire format is the same and
an unknown enum value then stays a plain number instead of being special-cased.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "int32": _F.TYPE_INT32, "int64": _F.TYPE_INT64, "uint64": _F.TYPE_UINT64,
    "bool": _F.TYPE_BOOL, "string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES,
}

PACKAGE = "graphcost.xla"

# message name -> fields (name, number, type, repeated?). A type that is not a scalar
# is another message of this file. Numbers are those of the public schemas.
_MESSAGES: dict[str, list[tuple[str, int, str, bool]]] = {
    # ---- xla_data.proto
    "LayoutProto": [
        ("minor_to_major", 1, "int64", True),
        ("memory_space", 8, "int64", False),
    ],
    "ShapeProto": [
        ("element_type", 2, "int32", False),  # xla.PrimitiveType
        ("dimensions", 3, "int64", True),
        ("tuple_shapes", 4, "ShapeProto", True),
        ("layout", 5, "LayoutProto", False),
        ("is_dynamic_dimension", 6, "bool", True),
    ],
    "WindowDimension": [
        ("size", 1, "int64", False),
        ("stride", 2, "int64", False),
        ("padding_low", 3, "int64", False),
        ("padding_high", 4, "int64", False),
        ("window_dilation", 5, "int64", False),
        ("base_dilation", 6, "int64", False),
        ("window_reversal", 7, "bool", False),
    ],
    "Window": [("dimensions", 1, "WindowDimension", True)],
    "ConvolutionDimensionNumbers": [
        ("kernel_input_feature_dimension", 3, "int64", False),
        ("kernel_output_feature_dimension", 4, "int64", False),
        ("kernel_spatial_dimensions", 6, "int64", True),
        ("input_batch_dimension", 7, "int64", False),
        ("input_feature_dimension", 8, "int64", False),
        ("output_batch_dimension", 9, "int64", False),
        ("output_feature_dimension", 10, "int64", False),
        ("input_spatial_dimensions", 11, "int64", True),
        ("output_spatial_dimensions", 12, "int64", True),
    ],
    "PaddingConfigDimension": [
        ("edge_padding_low", 1, "int64", False),
        ("edge_padding_high", 2, "int64", False),
        ("interior_padding", 3, "int64", False),
    ],
    "PaddingConfig": [("dimensions", 1, "PaddingConfigDimension", True)],
    "ExecutionProfile": [
        ("compute_cycle_count", 3, "int64", False),
        ("compute_time_ns", 4, "int64", False),
        ("compute_and_transfer_time_ns", 5, "int64", False),
    ],
    # ---- hlo.proto
    "SliceDimensions": [
        ("start", 1, "int64", False),
        ("limit", 2, "int64", False),
        ("stride", 3, "int64", False),
    ],
    "HloInstructionProto": [
        ("name", 1, "string", False),
        ("opcode", 2, "string", False),
        ("shape", 3, "ShapeProto", False),
        ("parameter_number", 9, "int64", False),
        ("fusion_kind", 11, "string", False),
        ("tuple_index", 13, "int64", False),
        ("dimensions", 14, "int64", True),
        ("window", 15, "Window", False),
        ("convolution_dimension_numbers", 16, "ConvolutionDimensionNumbers", False),
        ("slice_dimensions", 17, "SliceDimensions", True),
        ("dynamic_slice_sizes", 20, "int64", True),
        ("padding_config", 21, "PaddingConfig", False),
        ("custom_call_target", 28, "string", False),
        ("id", 35, "int64", False),
        ("operand_ids", 36, "int64", True),
        ("control_predecessor_ids", 37, "int64", True),
        ("called_computation_ids", 38, "int64", True),
        ("feature_group_count", 50, "int64", False),
        ("batch_group_count", 58, "int64", False),
        ("is_stable", 60, "bool", False),
    ],
    "HloComputationProto": [
        ("name", 1, "string", False),
        ("instructions", 2, "HloInstructionProto", True),
        ("id", 5, "int64", False),
        ("root_id", 6, "int64", False),
        ("is_fusion_computation", 7, "bool", False),
    ],
    "HloModuleProto": [
        ("name", 1, "string", False),
        ("entry_computation_name", 2, "string", False),
        ("computations", 3, "HloComputationProto", True),
        ("id", 5, "int64", False),
        ("entry_computation_id", 6, "int64", False),
    ],
    # ---- tpu_graphs tuning.proto (the wrapper schema, in short: docs/formats.md)
    "TileSizeConfig": [
        ("kernel_bounds", 1, "int64", True),
        ("output_bounds", 2, "int64", True),
        ("input_bounds", 3, "int64", True),
        ("iteration_bounds", 4, "int64", True),
    ],
    "HloOpConfig": [("tile_size_config", 1, "TileSizeConfig", False)],
    "TensorLayoutConfig": [("dims", 1, "int32", True)],
    "NodeLayoutConfig": [("tensors", 1, "TensorLayoutConfig", True)],
    "LayoutConfig": [("nodes", 1, "NodeLayoutConfig", True)],
    "HloModuleConfig": [("layout_config", 1, "LayoutConfig", False)],
    "ConfigProfile": [
        ("op_config", 1, "HloOpConfig", False),  # oneof config
        ("module_config", 2, "HloModuleConfig", False),  # oneof config
        ("error", 3, "bool", False),
        ("profile", 4, "ExecutionProfile", False),
        ("is_default", 5, "bool", False),
    ],
    "ModuleTuningData": [
        ("module", 1, "HloModuleProto", False),
        ("fingerprint", 2, "uint64", False),
        ("runs", 3, "ConfigProfile", True),
        ("config_index_to_node", 4, "uint64", True),
    ],
    "TuningData": [("modules", 1, "ModuleTuningData", True)],
    # A tuning file's top level with every submessage left as bytes: parsing it is cheap,
    # tells a TuningData (only field 1) from a ModuleTuningData (fields 1-4) and finds
    # the complete records of a truncated file.
    "TopLevelRecord": [
        ("field1", 1, "bytes", True),
        ("field2", 2, "uint64", False),
        ("field3", 3, "bytes", True),
        ("field4", 4, "uint64", True),
    ],
}
_ONEOFS = {"ConfigProfile": ("config", ("op_config", "module_config"))}


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    fdp = descriptor_pb2.FileDescriptorProto(
        name="graphcost/xla_subset.proto", package=PACKAGE, syntax="proto3")
    for msg_name, fields in _MESSAGES.items():
        msg = fdp.message_type.add(name=msg_name)
        oneof = _ONEOFS.get(msg_name)
        if oneof:
            msg.oneof_decl.add(name=oneof[0])
        for name, number, typ, repeated in fields:
            f = msg.field.add(name=name, number=number, json_name=name)
            f.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
            if typ in _SCALARS:
                f.type = _SCALARS[typ]
            else:
                f.type = _F.TYPE_MESSAGE
                f.type_name = f".{PACKAGE}.{typ}"
            if oneof and name in oneof[1]:
                f.oneof_index = 0
    return fdp


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file_descriptor())


def message_class(name: str) -> type:
    """The generated-at-runtime class of one message declared above, e.g. 'HloModuleProto'."""
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}"))


LayoutProto = message_class("LayoutProto")
ShapeProto = message_class("ShapeProto")
WindowDimension = message_class("WindowDimension")
Window = message_class("Window")
ConvolutionDimensionNumbers = message_class("ConvolutionDimensionNumbers")
PaddingConfig = message_class("PaddingConfig")
ExecutionProfile = message_class("ExecutionProfile")
HloInstructionProto = message_class("HloInstructionProto")
HloComputationProto = message_class("HloComputationProto")
HloModuleProto = message_class("HloModuleProto")
TileSizeConfig = message_class("TileSizeConfig")
LayoutConfig = message_class("LayoutConfig")
ConfigProfile = message_class("ConfigProfile")
ModuleTuningData = message_class("ModuleTuningData")
TuningData = message_class("TuningData")
TopLevelRecord = message_class("TopLevelRecord")
