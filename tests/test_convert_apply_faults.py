"""Bad input to convert, apply, autotune and the commands that trace a user's function
(issue 42): each refused with exit status 2 and one `Error:` line naming the file, key
or function and what was expected; nothing already written is replaced.

The program sources the tests pass are the functions of this module (the tests folder
is on pytest's path).
"""

import copy
import importlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("jax")

from tuning_records import kernel_record  # noqa: E402

from graphcost.autotune.chosen import CONFIG_FORMAT  # noqa: E402
from graphcost.cli import main  # noqa: E402
from graphcost.errors import UserError  # noqa: E402


def run(*args) -> object:
    return CliRunner().invoke(main, [str(a) for a in args])


def refused(result, *needles: str) -> None:
    """Exit 2 by click's own exit, one `Error:` line naming every needle, no traceback."""
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # nothing escaped
    assert "Traceback" not in result.output, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    for needle in needles:
        assert str(needle) in result.output, (needle, result.output)


# ------------------------------------------------------------------ convert


def test_convert_refuses_to_replace_a_graph_an_earlier_call_wrote(tmp_path):
    a = kernel_record(tmp_path / "a" / "rec.pb", 100)
    b = kernel_record(tmp_path / "b" / "rec.pb", 900)
    out = tmp_path / "out"
    assert run("convert", a, out).exit_code == 0
    (written,) = (out / "tile").glob("*.npz")
    before = written.read_bytes()
    refused(run("convert", b, out), written, "already exists", "another output folder")
    refused(run("convert", a, out), written)  # the same conversion again: refused alike
    assert written.read_bytes() == before and list((out / "tile").iterdir()) == [written]


# ------------------------------------------------------------------ apply


def moved(x, w):
    return (x @ w).sum()


def moved_program():
    """A program whose argument 0 is 2-d (point 0: parameter 0, role out)."""
    import jax.numpy as jnp

    return moved, (jnp.ones((8, 4)), jnp.ones((4, 2)))


GOOD = {"format": CONFIG_FORMAT,
        "layouts": [{"point": 0, "kind": "parameter", "index": 0, "role": "out",
                     "major_to_minor": [1, 0]}],
        "compiler_options": {"xla_cpu_enable_fast_math": True}}


def _layout(**change):
    def edit(c):
        c["layouts"][0].update(change)
    return edit


DAMAGE = {  # what a hand edit breaks -> what the message must name
    "unknown option": (lambda c: c["compiler_options"].update(xla_no_such_option=True),
                       ["compiler_options.xla_no_such_option", "xla_cpu_enable_fast_math"]),
    "option of the wrong type": (
        lambda c: c["compiler_options"].update(xla_backend_optimization_level="fast"),
        ["compiler_options.xla_backend_optimization_level", "whole number", "'fast'"]),
    "role sideways": (_layout(role="sideways"), ["layouts[0].role", "'out'", "'sideways'"]),
    "repeated axis": (_layout(major_to_minor=[0, 0]), ["layouts[0].major_to_minor", "[0, 0]"]),
    "order of another rank": (_layout(major_to_minor=[2, 1, 0]),
                              ["layouts[0].major_to_minor", "rank 2"]),
    "missing key": (lambda c: c["layouts"][0].pop("major_to_minor"),
                    ["layouts[0]", "'major_to_minor'"]),
    "missing layouts": (lambda c: c.pop("layouts"), ["'layouts'", "missing"]),
    "layouts as a dict": (lambda c: c.update(layouts={"0": c["layouts"][0]}),
                          ["layouts", "list", "object"]),
    "point not a number": (_layout(point="zero"), ["layouts[0].point", "'zero'"]),
    "point of another program": (_layout(point=40), ["layouts[0]", "point 40"]),
}

AGAINST_THE_PROGRAM = {"order of another rank", "point of another program"}


def _damaged(what: str) -> dict:
    config = copy.deepcopy(GOOD)
    DAMAGE[what][0](config)
    return config


@pytest.mark.parametrize("what", DAMAGE)
def test_apply_names_the_damaged_key_of_a_hand_edited_config(what, tmp_path):
    path = tmp_path / "chosen.json"
    path.write_text(json.dumps(_damaged(what)))
    refused(run("apply", path, "test_convert_apply_faults:moved_program"), path,
            *DAMAGE[what][1])


@pytest.mark.parametrize("what", DAMAGE)
def test_the_python_apply_refuses_a_damaged_config_too(what, tmp_path):
    from graphcost.autotune import apply, load_config

    fn, args = moved_program()
    with pytest.raises(UserError, match=r"^the config: "):
        apply(fn, args, _damaged(what))
    path = tmp_path / "chosen.json"
    path.write_text(json.dumps(_damaged(what)))
    with pytest.raises(UserError, match=f"^{path}: "):
        if what in AGAINST_THE_PROGRAM:
            apply(fn, args, path)  # only the program can say: refused when applied
        else:
            load_config(path)


def test_an_undamaged_config_applies(tmp_path):
    path = tmp_path / "chosen.json"
    path.write_text(json.dumps(GOOD))
    result = run("apply", path, "test_convert_apply_faults:moved_program")
    assert result.exit_code == 0 and "outputs match" in result.output, result.output


# ------------------------------------------------------------------ a model of another space

TINY = ("--model", "mlp", "--set", "hidden=8", "--set", "progress=false", "--epochs", "1")
SMALL = ("--no-pin", "--budget", "1", "--samples", "8", "--runs", "2", "--warmup", "0",
         "--confirm-rounds", "2")


def _tile_model(root: Path, collection: Path) -> Path:
    """A one-epoch tile model trained (by `train`) on the tile graphs of `collection`."""
    import numpy as np

    from graphcost.data.synthetic import make_tile_graph
    from graphcost.formats.npz import write_graph

    rng = np.random.default_rng(0)
    for split, count in (("train", 3), ("valid", 1)):
        for i in range(count):
            write_graph(collection / split / f"g{i}.npz",
                        make_tile_graph(rng, num_nodes=15, num_configs=12, name=f"g{i}"))
    result = run("train", collection, "--out", root / "run", *TINY)
    assert result.exit_code == 0, result.output
    return root / "run" / "model.pt"


@pytest.fixture(scope="module")
def tpu_tile_model(tmp_path_factory) -> Path:
    """A model of TPU tile sizes: trained on a collection named tile:xla."""
    root = tmp_path_factory.mktemp("tpu")
    return _tile_model(root, root / "npz" / "tile" / "xla")


@pytest.fixture(scope="module")
def options_model(tmp_path_factory) -> Path:
    """A model of XLA:CPU compiler options: trained on a collection named options:cpu."""
    root = tmp_path_factory.mktemp("options")
    return _tile_model(root, root / "npz" / "options" / "cpu")


def test_a_model_records_the_collection_it_was_trained_on(tpu_tile_model, options_model):
    from graphcost.models import Model

    assert Model.load(tpu_tile_model).collection == "tile:xla"
    assert Model.load(options_model).collection == "options:cpu"


def test_autotune_refuses_a_model_of_tpu_tile_sizes(tpu_tile_model, tmp_path):
    import graphcost

    out = tmp_path / "chosen.json"
    refused(run("autotune", "test_convert_apply_faults:moved_program", "--model",
                tpu_tile_model, "--out", out, *SMALL),
            tpu_tile_model, "tile:xla", "TPU tile sizes", "options", "options:cpu")
    assert not out.exists()
    fn, args = moved_program()
    with pytest.raises(UserError, match="trained on tile:xla"):
        graphcost.autotune(fn, args, tpu_tile_model)


def test_autotune_takes_a_model_of_compiler_options(options_model, tmp_path):
    out = tmp_path / "chosen.json"
    result = run("autotune", "test_convert_apply_faults:moved_program", "--model",
                 options_model, "--out", out, *SMALL)
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert saved["kind"] == "options"
    # every key is one apply reads or names the config by: none that editing leaves unread
    assert set(saved) == {"format", "program", "kind", "arguments", "layouts",
                          "compiler_options"}


# ------------------------------------------------------------------ a function JAX cannot trace

UNFIT = '''
import jax.numpy as jnp


def unfit(x, w):
    return x @ w  # (4, 8) @ (4, 2): the shapes do not fit


def make():
    return unfit, (jnp.ones((4, 8)), jnp.ones((4, 2)))


def programs():
    return [("unfit.000", *make())]
'''
#: what the error must name: the function, its file and JAX's first line
UNFIT_SAYS = ("JAX could not trace function 'unfit'", "unfit_prog.py:",
              "dot_general requires contracting dimensions to have the same shape")


@pytest.fixture(scope="module")
def unfit_prog(tmp_path_factory):
    """The module `unfit_prog`, importable while the tests of this module run."""
    folder = tmp_path_factory.mktemp("unfit")
    (folder / "unfit_prog.py").write_text(UNFIT)
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(folder))
        yield importlib.import_module("unfit_prog")


@pytest.mark.parametrize("command", [
    ["extract", "unfit_prog:make", "{tmp}/graph.npz"],
    ["measure", "unfit.000", "--programs", "unfit_prog:programs", "--kind", "options"],
    ["measure", "unfit.000", "--programs", "unfit_prog:programs", "--kind", "layout:random"],
    ["autotune", "unfit_prog:make", "--model", "{model}", "--out", "{tmp}/chosen.json",
     *SMALL],
    ["apply", "{tmp}/good.json", "unfit_prog:make"],
], ids=["extract", "measure options", "measure layout", "autotune", "apply"])
def test_a_function_jax_cannot_trace_is_named_with_its_file(command, unfit_prog, options_model,
                                                            tmp_path):
    (tmp_path / "good.json").write_text(json.dumps(GOOD))
    args = [a.format(tmp=tmp_path, model=options_model) for a in command]
    refused(run(*args), *UNFIT_SAYS)
    assert not (tmp_path / "graph.npz").exists()


def test_the_python_api_names_a_function_jax_cannot_trace(unfit_prog, options_model):
    import graphcost
    from graphcost.autotune import apply

    fn, args = unfit_prog.make()
    for call in (lambda: graphcost.autotune(fn, args, options_model),
                 lambda: apply(fn, args, GOOD)):
        with pytest.raises(UserError) as e:
            call()
        assert all(s in str(e.value) for s in UNFIT_SAYS), e.value
