"""A JAX function -> its compiled HLO -> a program graph, through the same HLO code path."""

import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

from graphcost.cli import main
from graphcost.formats import LayoutGraph, read_graph, write_graph
from graphcost.formats import hlo_proto as pb
from graphcost.formats.hlo import OPCODE_IDS
from graphcost.formats.tuning import is_program_graph

jax = pytest.importorskip("jax", reason="JAX is the optional extra graphcost[xla]")
jnp = jax.numpy

from graphcost.xla.extract import compiled_hlo_module, extract_jax, load_program  # noqa: E402


def mlp(x, w):
    return jax.nn.relu(x @ w)


ARGS = (jnp.ones((8, 16), jnp.float32), jnp.ones((16, 4), jnp.float32))


def test_matmul_relu_extracts_to_a_program_graph(tmp_path):
    g = extract_jax(mlp, ARGS, name="mlp")
    module = pb.HloModuleProto.FromString(compiled_hlo_module(mlp, ARGS))
    assert isinstance(g, LayoutGraph) and is_program_graph(g)
    assert g.num_nodes == sum(len(c.instructions) for c in module.computations)
    assert len(g.node_splits) == len(module.computations)
    opcodes = set(g.node_opcode.tolist())
    assert OPCODE_IDS["dot"] in opcodes or OPCODE_IDS["fusion"] in opcodes
    assert OPCODE_IDS["parameter"] in opcodes
    # the entry's two f32 parameters keep their shapes
    params = g.node_feat[(g.node_opcode == OPCODE_IDS["parameter"]) & (g.node_feat[:, 23] == 0)]
    dims = {tuple(p[21:23].astype(int)) for p in params}
    assert {(8, 16), (16, 4)} <= dims
    back = read_graph(write_graph(tmp_path / "mlp.npz", g))
    assert is_program_graph(back)
    np.testing.assert_array_equal(back.edge_index, g.edge_index)


def test_cli_extract(tmp_path, monkeypatch):
    (tmp_path / "tiny_prog.py").write_text(textwrap.dedent("""
        import jax, jax.numpy as jnp
        def make():
            return (lambda x, w: jax.nn.relu(x @ w)), (jnp.ones((4, 8)), jnp.ones((8, 2)))
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    fn, args = load_program("tiny_prog:make")
    assert callable(fn) and len(args) == 2
    out = tmp_path / "prog.npz"
    res = CliRunner().invoke(main, ["extract", "tiny_prog:make", str(out)])
    assert res.exit_code == 0, res.output
    assert is_program_graph(read_graph(out)) and "program graph" in res.output


def test_bad_spec_is_a_clear_error():
    from graphcost.errors import UserError

    with pytest.raises(UserError, match="MODULE:FUNCTION"):
        load_program("no_colon_here")
    with pytest.raises(UserError, match="importable"):
        load_program("graphcost_no_such_module:make")
    res = CliRunner().invoke(main, ["extract", "no_colon_here", "x.npz"])
    assert res.exit_code == 2 and "MODULE:FUNCTION" in res.output  # a user error


@pytest.fixture(scope="module")
def layout_model_file(tmp_path_factory):
    """A saved layout model (one epoch on a synthetic graph): what `autotune` needs."""
    from graphcost.data.synthetic import make_layout_graph
    from graphcost.models import Model
    from graphcost.train import TrainSettings, fit

    m = Model("ranker", "layout", hidden=8, opcode_dim=4, layers=1, ref_configs=4)
    fit(m, [make_layout_graph(np.random.default_rng(0), num_nodes=20, num_configs=8)],
        settings=TrainSettings(epochs=1, configs_per_graph=4, progress=False))
    return m.save(tmp_path_factory.mktemp("model") / "model.pt")


@pytest.mark.parametrize("attr,needle", [
    ("not_callable", "found int"), ("raises", "raised RuntimeError: no program today"),
    ("wrong", "(callable, example_args), found list"), ("missing", "no function 'missing'")])
def test_a_bad_program_function_is_refused_by_extract_and_autotune(
        tmp_path, monkeypatch, layout_model_file, attr, needle):
    (tmp_path / "bad_prog.py").write_text(textwrap.dedent("""
        not_callable = 3
        def raises():
            raise RuntimeError("no program today")
        def wrong():
            return [1, 2, 3]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    for args in (["extract", f"bad_prog:{attr}", str(tmp_path / "x.npz")],
                 ["autotune", f"bad_prog:{attr}", "--no-pin", "--model", str(layout_model_file),
                  "--out", str(tmp_path / "tuned.json")]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 2, (args, res.output)
        assert f"bad_prog:{attr}" in res.output and needle in res.output, res.output
        assert isinstance(res.exception, SystemExit)  # a message, not a traceback
    assert not (tmp_path / "x.npz").exists() and not (tmp_path / "tuned.json").exists()
