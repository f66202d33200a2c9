"""Autotune JAX programs with a trained cost model (docs/design.md §8: model + config space
(+ measurement) ─► best config).

    import graphcost
    result = graphcost.autotune(fn, args, budget=10)  # compiler options
    result = graphcost.autotune(fn, args, space="layout")  # layouts, the packaged model
    run = graphcost.autotune.apply(fn, args, result.config)

The package itself is callable (it *is* `autotune`), so `graphcost.autotune(...)` and
`graphcost.autotune.apply(...)` both work however it was imported. JAX and torch are
imported only when a function runs.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from graphcost.autotune.chosen import apply, how_to_apply, load_config, save_config
from graphcost.autotune.program import load_target
from graphcost.autotune.search import SearchResult, search
from graphcost.autotune.space import LayoutSearchSpace, OptionSearchSpace
from graphcost.autotune.tune import AutotuneResult, autotune, format_result

__all__ = ["AutotuneResult", "LayoutSearchSpace", "OptionSearchSpace", "SearchResult",
           "apply", "autotune", "format_result", "how_to_apply", "load_config",
           "load_target", "save_config", "search"]


class _CallableModule(types.ModuleType):
    """This package, callable as `autotune`."""

    def __call__(self, *args: Any, **kwargs: Any) -> AutotuneResult:
        return autotune(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
