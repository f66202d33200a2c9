"""The optimized HLO of a JAX function as a TpuGraphs graph (docs/design.md §7).

`jax.jit(fn).lower(*args).compile()` gives the executable XLA built for this machine;
its `HloModuleProto` (post-fusion, with layouts) goes through the very same
`formats.hlo.module_to_graph` as the TPU tuning records. With no runtimes measured,
the graph is written as a program graph (`formats.tuning.program_graph`): a layout
file with no configurable nodes and one placeholder config of runtime 1.0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from graphcost.errors import UserError
from graphcost.formats.hlo import HloGraph, hlo_bytes_to_graph
from graphcost.formats.npz import LayoutGraph
from graphcost.formats.tuning import program_graph
from graphcost.xla.programs import call_spec
from graphcost.xla.tracing import tracing


def _jax():
    try:
        import jax
    except ImportError as e:
        raise ImportError("extracting JAX programs needs JAX: pip install 'graphcost[xla]'") \
            from e
    return jax


def compiled_hlo_module(fn: Callable, args: Sequence[Any],
                        compiler_options: dict[str, Any] | None = None) -> bytes:
    """The serialized optimized `HloModuleProto` XLA compiles `fn(*args)` into."""
    jax = _jax()
    with tracing(fn):
        lowered = jax.jit(fn).lower(*args)
    compiled = lowered.compile(compiler_options) if compiler_options else lowered.compile()
    return module_bytes(compiled)


def module_bytes(compiled: Any) -> bytes:
    """The serialized optimized `HloModuleProto` of a compiled JAX executable."""
    modules = compiled.runtime_executable().hlo_modules()
    if not modules:
        raise RuntimeError("XLA returned an executable with no HLO module")
    return modules[0].as_serialized_hlo_module_proto()


def compiled_graph(compiled: Any, source: str = "<jax executable>") -> HloGraph:
    """Nodes, features and edges of a compiled JAX executable."""
    return hlo_bytes_to_graph(module_bytes(compiled), source=source)


def extract_hlo_graph(fn: Callable, args: Sequence[Any],
                      compiler_options: dict[str, Any] | None = None) -> HloGraph:
    """Nodes, features and edges of the compiled `fn(*args)`."""
    data = compiled_hlo_module(fn, args, compiler_options)
    return hlo_bytes_to_graph(data, source=getattr(fn, "__name__", "<jax function>"))


def extract_jax(fn: Callable, args: Sequence[Any], name: str | None = None,
                compiler_options: dict[str, Any] | None = None) -> LayoutGraph:
    """The compiled `fn(*args)` as a program graph ready for `write_graph`."""
    return program_graph(extract_hlo_graph(fn, args, compiler_options), name)


def load_program(spec: str) -> tuple[Callable, tuple]:
    """`module.path:function` -> the (callable, example_args) that function returns."""
    made, _ = call_spec(spec, "(callable, example_args)")
    if not (isinstance(made, tuple) and len(made) == 2 and callable(made[0])):
        raise UserError(f"{spec}: expected a function returning (callable, example_args), "
                        f"found {type(made).__name__} {made!r:.60}")
    fn, args = made
    return fn, tuple(args)
