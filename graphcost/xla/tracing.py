"""Where graphcost runs a user's function inside JAX (tracing it, lowering it): what
fails there is the user's code, and the error says so instead of a JAX traceback."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from graphcost.errors import UserError


def describe(fn: Callable) -> str:
    """`function 'NAME' (FILE:LINE)`: a user's function and where it is defined."""
    target = fn.func if isinstance(fn, functools.partial) else fn
    target = inspect.unwrap(target)  # a jax.jit or functools.wraps wrapper
    name = getattr(target, "__qualname__", None) or type(target).__name__
    code = getattr(target, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code is not None else ""
    return f"function {name!r}{where}"


@contextmanager
def tracing(fn: Callable) -> Iterator[None]:
    """Trace or lower the user's `fn` inside the block: an exception there is their code
    failing (shapes that do not fit, a Python branch on a traced value), a UserError
    naming the function, its file and the first line of the error. Compiling stays
    outside the block: XLA refusing a config of graphcost's own is no user error."""
    try:
        yield
    except UserError:
        raise
    except Exception as e:
        lines = str(e).strip().splitlines()
        raise UserError(f"JAX could not trace {describe(fn)}: {type(e).__name__}: "
                        f"{lines[0] if lines else '(no message)'}") from e
