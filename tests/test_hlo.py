"""HLO module -> graph on hand-built modules: features, opcodes, edges, splits, errors."""

import numpy as np
import pytest

from graphcost.formats import GraphFileError
from graphcost.formats import hlo_proto as pb
from graphcost.formats.hlo import (
    FEATURE_TABLE,
    OPCODE_IDS,
    UnknownOpcodeWarning,
    hlo_bytes_to_graph,
    module_to_graph,
    parse_hlo_module,
)

F32, BF16, S32, TUPLE = 11, 16, 4, 13


def shape(dims=(), et=F32, layout=None):
    s = pb.ShapeProto(element_type=et, dimensions=list(dims))
    s.layout.minor_to_major.extend(layout if layout is not None else range(len(dims))[::-1])
    return s


def inst(comp, id_, opcode, shp, operands=(), **fields):
    i = comp.instructions.add(id=id_, name=f"{opcode}.{id_}", opcode=opcode,
                              operand_ids=list(operands), **fields)
    i.shape.CopyFrom(shp)
    return i


def build_module():
    """add computation (ids 10-12), fused slice (30-31), entry with conv/reduce/fusion."""
    m = pb.HloModuleProto(name="hand", entry_computation_id=3)
    add = m.computations.add(name="add", id=1, root_id=12)
    inst(add, 10, "parameter", shape(), parameter_number=0)
    inst(add, 11, "parameter", shape(), parameter_number=1)
    inst(add, 12, "add", shape(), [10, 11])
    fused = m.computations.add(name="fused_slice", id=2, root_id=31, is_fusion_computation=True)
    inst(fused, 30, "parameter", shape((4, 8)))
    sl = inst(fused, 31, "slice", shape((2, 4)), [30])
    sl.slice_dimensions.add(start=2, limit=4, stride=1)
    sl.slice_dimensions.add(start=0, limit=8, stride=2)
    entry = m.computations.add(name="main", id=3, root_id=27)
    inst(entry, 20, "parameter", shape((1, 8, 8, 4)), parameter_number=0)
    inst(entry, 21, "parameter", shape((3, 3, 4, 16)), parameter_number=1)
    conv = inst(entry, 22, "convolution", shape((1, 4, 4, 16)), [20, 21],
                feature_group_count=1, batch_group_count=1)
    for _ in range(2):
        conv.window.dimensions.add(size=3, stride=2, padding_low=1, padding_high=1,
                                   window_dilation=1, base_dilation=1)
    conv.convolution_dimension_numbers.CopyFrom(pb.ConvolutionDimensionNumbers(
        input_batch_dimension=0, input_feature_dimension=3, input_spatial_dimensions=[1, 2],
        kernel_input_feature_dimension=2, kernel_output_feature_dimension=3,
        kernel_spatial_dimensions=[0, 1], output_batch_dimension=0,
        output_feature_dimension=3, output_spatial_dimensions=[1, 2]))
    inst(entry, 23, "constant", shape())
    inst(entry, 24, "reduce", shape((1, 16)), [22, 23, 23], dimensions=[1, 2],
         called_computation_ids=[1])
    inst(entry, 25, "parameter", shape((4, 8), layout=(0, 1)), parameter_number=2)
    inst(entry, 26, "fusion", shape((2, 4)), [25], called_computation_ids=[2],
         fusion_kind="kLoop")
    tup = pb.ShapeProto(element_type=TUPLE)
    tup.tuple_shapes.extend([shape((1, 16)), shape((2, 4))])
    inst(entry, 27, "tuple", tup, [24, 26])
    return m


@pytest.fixture
def graph():
    return module_to_graph(build_module(), "hand.pb")


def col(name):
    start, width = next((s, w) for s, w, n, _ in FEATURE_TABLE if n == name)
    return slice(start, start + width)


def test_feature_table_covers_the_140_columns_in_order():
    end = 0
    for start, width, _, _ in FEATURE_TABLE:
        assert start == end
        end += width
    assert end == 140


def test_opcode_ids_follow_design():
    assert (OPCODE_IDS["abs"], OPCODE_IDS["convolution"], OPCODE_IDS["fusion"]) == (1, 26, 41)
    assert (OPCODE_IDS["transpose"], OPCODE_IDS["tuple"], OPCODE_IDS["while"]) == (98, 100, 102)
    assert OPCODE_IDS["tan"] == 120 and len(OPCODE_IDS) == 118  # 97 and 101 are unused


def test_nodes_opcodes_splits_and_edges(graph):
    assert graph.num_nodes == 13
    assert graph.node_names[7] == "convolution.22"
    np.testing.assert_array_equal(graph.node_opcode,
                                  [63, 63, 2, 63, 92, 63, 63, 26, 24, 70, 63, 41, 100])
    np.testing.assert_array_equal(graph.node_splits, [0, 3, 5])
    edges = {tuple(e) for e in graph.edge_index.tolist()}
    assert edges == {
        (2, 0), (2, 1),  # add -> its parameters
        (4, 3),  # slice -> fused parameter
        (7, 5), (7, 6),  # convolution -> input, kernel
        (9, 7), (9, 8), (9, 2),  # reduce -> conv, init (twice, one edge), to_apply's root
        (11, 10), (11, 4),  # fusion -> operand, fused computation's root
        (12, 9), (12, 11),  # tuple
    }
    assert len(graph.edge_index) == len(edges)  # no duplicate edges
    assert (graph.edge_index[:, 0] > graph.edge_index[:, 1]).all()  # producers come first


def test_convolution_window_and_dimension_numbers(graph):
    f = graph.node_feat[7]
    assert f[13] == 1 and f[2:21].sum() == 1  # f32 one-hot
    np.testing.assert_array_equal(f[col("shape.dimensions")], [1, 4, 4, 16, 0, 0, 25, 256])
    np.testing.assert_array_equal(f[col("window.size")], [3, 3, 0, 0, 0, 0, 6, 9])
    np.testing.assert_array_equal(f[col("window.stride")], [2, 2, 0, 0, 0, 0, 4, 4])
    np.testing.assert_array_equal(f[col("window.padding_low")], [1, 1, 0, 0, 0, 0, 2, 1])
    np.testing.assert_array_equal(f[col("window.window_reversal")], [0] * 6 + [0, 2])
    np.testing.assert_array_equal(f[93:107], [0, 3, 1, 2, 0, 0, 2, 3, 0, 1, 0, 0, 0, 3])
    assert (f[107], f[108]) == (1, 1)
    np.testing.assert_array_equal(f[col("layout.minor_to_major")], [3, 2, 1, 0, 0, 0])
    assert f[0] == 0  # not a root


def test_slice_reduce_parameter_and_root_columns(graph):
    s = graph.node_feat[4]
    np.testing.assert_array_equal(s[col("slice.start")], [2, 0, 2, 0])
    np.testing.assert_array_equal(s[col("slice.stride")], [1, 2, 3, 2])
    np.testing.assert_array_equal(s[col("slice.limit")], [4, 8, 12, 32])
    assert s[0] == 1  # root of the fused computation
    r = graph.node_feat[9]
    np.testing.assert_array_equal(r[col("dimensions")], [1, 2, 0, 0, 0, 0])
    # no window: sums 0, products of the empty list 1 (as the published data)
    np.testing.assert_array_equal(r[37:45], [0] * 7 + [1])
    p = graph.node_feat[10]
    assert p[30] == 2
    np.testing.assert_array_equal(p[col("layout.minor_to_major")], [0, 1, 0, 0, 0, 0])
    t = graph.node_feat[12]
    assert t[0] == 1 and t[2 + 16] == 1 and t[29] == 2  # root, tuple one-hot, 2 elements
    assert graph.node_feat[2][0] == 1 and graph.node_feat[0][0] == 0


def test_bytes_round_trip_gives_the_same_graph(graph):
    again = hlo_bytes_to_graph(build_module().SerializeToString(), "hand.pb")
    np.testing.assert_array_equal(again.node_feat, graph.node_feat)
    np.testing.assert_array_equal(again.edge_index, graph.edge_index)


def test_unknown_opcode_is_zero_and_warned():
    m = build_module()
    m.computations[2].instructions[3].opcode = "ragged-all-to-all"  # the constant
    with pytest.warns(UnknownOpcodeWarning, match="ragged-all-to-all x1"):
        g = module_to_graph(m, "new.pb")
    assert g.node_opcode[8] == 0 and g.unknown_opcodes == {"ragged-all-to-all": 1}


def test_missing_operand_names_file_record_and_instruction():
    m = build_module()
    m.computations[2].instructions[2].operand_ids[1] = 999
    with pytest.raises(GraphFileError) as e:
        module_to_graph(m, "bad.pb", key="modules[3]")
    msg = str(e.value)
    assert e.value.path == "bad.pb"
    assert e.value.key == "modules[3].computations[2].instructions[2].operand_ids"
    assert "convolution.22" in msg and "999" in msg


def test_missing_called_computation_and_root_are_errors():
    m = build_module()
    m.computations[2].instructions[6].called_computation_ids[0] = 77
    with pytest.raises(GraphFileError, match="called_computation_ids"):
        module_to_graph(m, "bad.pb")
    m = build_module()
    m.computations[0].root_id = 31  # an instruction of another computation
    with pytest.raises(GraphFileError, match=r"computations\[0\].root_id"):
        module_to_graph(m, "bad.pb")


def test_undecodable_bytes_are_a_graph_file_error():
    data = build_module().SerializeToString()
    with pytest.raises(GraphFileError, match="HloModuleProto"):
        parse_hlo_module(data[: len(data) // 2], "cut.pb")
