"""While loops made visible: each read of a loop's tuple joined to the element it reads,
each node's loop depth, and a ranker that sees both (`graphcost.data.loops`)."""

from pathlib import Path

import numpy as np

from graphcost.data.loops import LOOP_FEATURES, loop_structure, with_loops
from graphcost.data.prune import kept_nodes
from graphcost.formats import LayoutGraph, read_graph
from graphcost.formats.hlo import OPCODE_IDS
from graphcost.models import Model
from graphcost.models.scorer import ConfigScorer
from graphcost.train import TrainSettings, fit

SAMPLE = Path(__file__).parents[1] / "graphcost" / "sample" / "npz" / "layout" / "cpu" / "random"

#: (computation, opcode, shape, operands) per node, callee computations first as a
#: converted module is: 0 a fused multiply called from the body, 1 the body, 2 the
#: condition, 3 the entry. Roots are each computation's last node.
NODES = [
    (0, "parameter", [2, 8], []),                   # 0
    (0, "multiply", [2, 8], [0]),                   # 1  fused root
    (1, "parameter", [], []),                       # 2  the loop's tuple
    (1, "get-tuple-element", [2, 4], [2]),          # 3  reads h
    (1, "get-tuple-element", [4, 8], [2]),          # 4  reads w
    (1, "dot", [2, 8], [3, 4]),                     # 5
    (1, "fusion", [2, 8], [5, 1]),                  # 6  calls computation 0
    (1, "tuple", [], [3, 4]),                       # 7  body root
    (2, "parameter", [], []),                       # 8
    (2, "get-tuple-element", [2, 4], [8]),          # 9  reads h
    (2, "compare", [1], [9]),                       # 10 condition root
    (3, "parameter", [2, 4], []),                   # 11 h
    (3, "parameter", [4, 8], []),                   # 12 w, configurable
    (3, "tuple", [], [11, 12]),                     # 13
    (3, "while", [], [13, 7, 10]),                  # 14
    (3, "get-tuple-element", [2, 4], [14]),         # 15 entry root
]


def loop_graph() -> LayoutGraph:
    n = len(NODES)
    feat = np.zeros((n, 140), np.float32)
    comps = [c for c, *_ in NODES]
    for i, (c, _, shape, _) in enumerate(NODES):
        feat[i, 0] = i == n - 1 or comps[i + 1] != c  # root: the last of its computation
        feat[i, 13] = 1.0  # f32
        feat[i, 21:21 + len(shape)] = shape
    edges = [(i, j) for i, (*_, ops) in enumerate(NODES) for j in ops]
    return LayoutGraph(name="loop", node_feat=feat,
                       node_opcode=np.array([OPCODE_IDS[o] for _, o, _, _ in NODES]),
                       edge_index=np.array(edges, np.int64), node_config_ids=np.array([12]),
                       node_config_feat=np.array([[[1, 0] + [-1] * 16], [[0, 1] + [-1] * 16]],
                                                 np.float32),
                       config_runtime=np.array([1.0, 2.0]),
                       node_splits=np.array([0, 2, 8, 11]))


def test_each_read_of_the_loop_tuple_is_joined_to_the_element_it_reads():
    depth, edges = loop_structure(loop_graph())
    assert sorted(map(tuple, edges.tolist())) == [(3, 11), (4, 12), (9, 11)]
    # the body, the condition and the computation the body calls run in the loop
    assert depth.tolist() == [1] * 11 + [0] * 5


def test_with_loops_brings_the_work_of_the_body_within_two_hops_of_a_configurable_node():
    g = loop_graph()
    looped, depth = with_loops(g)
    assert 5 not in kept_nodes(g, 2)  # the dot that reads w on every iteration: cut away
    assert {4, 5}.issubset(kept_nodes(looped, 2))
    assert looped.num_nodes == g.num_nodes and (depth == loop_structure(g)[0]).all()
    assert len(looped.edge_index) == len(g.edge_index) + 3


def test_a_graph_without_loops_is_returned_as_it_is():
    g = read_graph(next(SAMPLE.glob("*/cnn_nchw.000.npz")))
    looped, depth = with_loops(g)
    assert looped is g and not depth.any()


def test_the_zoo_rnn_joins_reads_to_elements_of_the_same_shape_outside_the_loop():
    g = read_graph(next(SAMPLE.glob("*/rnn.000.npz")))
    depth, edges = loop_structure(g)
    assert len(edges) > 0
    assert (depth[edges[:, 0]] == 1).all() and (depth[edges[:, 1]] == 0).all()
    np.testing.assert_array_equal(g.node_feat[edges[:, 0], 2:29], g.node_feat[edges[:, 1], 2:29])
    assert (g.node_opcode[edges[:, 0]] == OPCODE_IDS["get-tuple-element"]).all()


def test_a_ranker_with_loops_sees_each_nodes_depth_and_the_extra_edges():
    graphs = [loop_graph()]
    plain, looped = (Model("ranker", "layout", loops=on, prune_hops=2) for on in (False, True))
    for m in (plain, looped):
        fit(m, graphs, [], TrainSettings(epochs=1, steps_per_epoch=1))
    a, b = plain.prepare(graphs[0]), looped.prepare(graphs[0])
    assert b.x.shape[1] == a.x.shape[1] + LOOP_FEATURES
    assert b.x.shape[0] > a.x.shape[0]  # the body's reads and dot are kept now
    kept = kept_nodes(with_loops(graphs[0])[0], 2)
    assert b.x[:, -LOOP_FEATURES:].argmax(1).tolist() == loop_structure(graphs[0])[0][kept].tolist()
    assert b.edge_index.shape[1] > a.edge_index.shape[1]
    assert ConfigScorer(looped, graphs[0]).scores().shape == (2,)


def test_the_layout_ranker_sees_loops_by_default_and_an_older_model_file_did_not():
    assert Model("ranker", "layout").settings.loops
    assert not Model("ranker", "tile").settings.loops
    before = Model("ranker", "layout", loops=False)
    fit(before, [loop_graph()], [], TrainSettings(epochs=1, steps_per_epoch=1))
    state = before.state()
    del state["settings"]["loops"]  # as a file written before the setting existed
    older = Model.from_state(state)  # its weights fit a ranker without loop inputs
    assert not older.settings.loops
    assert older.prepare(loop_graph()).x.shape == before.prepare(loop_graph()).x.shape
