"""The package's structure (docs/design.md §8): one direction of flow between layers, small
modules, one loop."""

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "graphcost"


def modules() -> dict[str, ast.Module]:
    out = {}
    for f in PACKAGE.rglob("*.py"):
        parts = list(f.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = ast.parse(f.read_text())
    return out


def imports(mods: dict[str, ast.Module]) -> dict[str, set[str]]:
    """Module → graphcost modules it imports anywhere (also inside functions); a package
    stands for its `__init__`."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, tree in mods.items():
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # `from P import X`: module P.X when there is one, else P itself
                names = [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                while name and name not in mods:
                    name = name.rpartition(".")[0]
                if name and name != m:
                    edges[m].add(name)
    return edges


def test_no_import_cycles():
    edges = imports(modules())
    try:
        list(TopologicalSorter(edges).static_order())
    except CycleError as e:
        raise AssertionError(f"import cycle: {' -> '.join(e.args[1])}") from None


def test_models_never_import_training_and_formats_never_import_data():
    edges = imports(modules())
    for m, targets in edges.items():
        if m.startswith("graphcost.models"):
            assert not {t for t in targets if t.startswith("graphcost.train")}, m
        if m.startswith("graphcost.formats"):
            assert not {t for t in targets if t.startswith("graphcost.data")}, m


#: the layers of the map in docs/architecture.md, bottom first: a module imports its own
#: layer and those below, never one above (`xla/` makes collections from programs; a
#: model reads its option encoding from `xla.configs`, so `xla/` sits below `models/`)
LAYERS = (
    ("errors", "atomic", "children", "fields", "stats", "kinds", "progress", "graphcost"),
    ("formats",),
    ("data",),
    ("xla",),
    ("models",),
    ("train",),
    ("eval",),
    ("autotune",),
    ("bench", "demo"),
    ("cli", "__main__", "launch"),
)


def layer_of(module: str) -> int:
    part = module.split(".")[1] if "." in module else module
    return next(i for i, layer in enumerate(LAYERS) if part in layer)


def test_no_import_reaches_a_higher_layer():
    upward = sorted(f"{m} -> {t}" for m, targets in imports(modules()).items()
                    for t in targets if layer_of(t) > layer_of(m))
    assert not upward, upward


def test_every_module_belongs_to_a_layer():
    placed = {part for layer in LAYERS for part in layer}
    parts = {m.split(".")[1] if "." in m else m for m in modules()}
    assert parts <= placed, sorted(parts - placed)


def test_benchmarks_import_no_other_benchmark():
    siblings = sorted(f"{m} -> {t}" for m, targets in imports(modules()).items()
                      if m.startswith("graphcost.bench.")
                      for t in targets if t.startswith("graphcost.bench."))
    assert not siblings, siblings


def test_no_module_over_500_lines():
    long = {f.name: n for f in PACKAGE.rglob("*.py")
            if (n := len(f.read_text().splitlines())) > 500}
    assert not long


def test_exactly_one_module_steps_an_optimiser():
    """Optimiser steps (`opt.step()`, `optimizer.step()`) happen in the one training loop."""
    stepping = set()
    for m, tree in modules().items():
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "step" and isinstance(node.func.value, ast.Name)
                    and "opt" in node.func.value.id):
                stepping.add(m)
    assert stepping == {"graphcost.train.loop"}


def test_the_cli_demo_and_benches_take_their_model_lists_from_the_registry():
    """A list of models written by hand goes stale when a model is added (the `--model`
    help once missed two): no tuple, list, set, dict or text in the CLI, the demo or a
    bench names two or more registered models (a docstring may); `models/registry.py`
    lists them."""
    import re

    from graphcost.models.registry import MODELS

    names = set(MODELS)
    files = [*PACKAGE.joinpath("cli").glob("*.py"), *PACKAGE.joinpath("bench").glob("*.py"),
             PACKAGE / "demo.py"]
    found = []
    for path in files:
        tree = ast.parse(path.read_text())
        docs = {id(n.body[0].value) for n in ast.walk(tree)  # prose may name models
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
                and isinstance(n.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if id(node) in docs:
                continue
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                words = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            elif isinstance(node, ast.Dict):
                words = [e.value for e in node.values if isinstance(e, ast.Constant)]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                words = re.findall(r"[a-z][a-z-]*[a-z]", node.value)
            else:
                continue
            if len(names & {w for w in words if isinstance(w, str)}) >= 2:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not found, found


def test_the_cli_starts_without_torch_or_jax():
    """Every command module is imported when the CLI starts: one that imports torch or
    JAX at its top makes `graphcost info` cost hundreds of MB (they load when a command
    runs)."""
    import subprocess
    import sys

    probe = ("import sys, graphcost.cli; "
             "print(sorted(m for m in ('torch', 'jax') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                         text=True).stdout
    assert out.strip() == "[]"
