"""The chosen config of an autotuning run: its JSON file, compiling a program with it,
and how to do the same by hand with JAX.

A config names the program's argument shapes (`signature`), its layouts by configurable
point and its compiler options; `apply` refuses a config made for another program.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from graphcost.errors import UserError
from graphcost.xla.configs import LayoutPlan, LayoutSpace

CONFIG_FORMAT = "graphcost-autotune/1"


def signature(layout: LayoutSpace) -> list[list[Any]]:
    """The shapes and dtypes of a program's argument leaves: a config fits only these."""
    return [[list(np.shape(x)), str(getattr(x, "dtype", type(x).__name__))]
            for x in layout.leaves]


def save_config(config: dict[str, Any], path: str | Path) -> Path:
    """Write a chosen config as JSON (its folder made if needed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=1) + "\n")
    return path


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a config `save_config` wrote; a UserError for any other file."""
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: not a readable JSON autotune config ({e})") from None
    if not isinstance(config, dict) or config.get("format") != CONFIG_FORMAT:
        found = config.get("format") if isinstance(config, dict) else type(config).__name__
        raise UserError(f"{path}: not a graphcost autotune config (format {found!r}, "
                        f"expected {CONFIG_FORMAT!r})")
    return config


def plan_of(layout: LayoutSpace, config: dict[str, Any]) -> LayoutPlan:
    """The layout plan a config names, checked against this program's points."""
    if config.get("arguments") is not None and config["arguments"] != signature(layout):
        raise UserError("the config was made for arguments of other shapes or dtypes: "
                         f"{config['arguments']} != {signature(layout)}")
    plan: LayoutPlan = {}
    for e in config.get("layouts", []):
        p = int(e["point"])
        if p >= len(layout.points) or (layout.points[p].kind, layout.points[p].index) != (
                e["kind"], int(e["index"])):
            raise UserError(f"the config's point {p} ({e['kind']} {e['index']}) is not in "
                             "this program: it was made for another one")
        plan[(p, e["role"])] = tuple(int(i) for i in e["major_to_minor"])
    return plan


def apply(fn: Callable, args: Sequence[Any], config: dict[str, Any] | str | Path) -> Callable:
    """`fn` compiled with a config's layouts and compiler options: call it like `fn`.

    The compiled executable is the `compiled` attribute of the returned callable. A call
    hands the argument leaves straight to it, so it costs what a `jax.jit` call costs
    (`graphcost bench apply`; placing every argument with `jax.device_put` first, as
    this did before, cost 3-4x that on a small MLP). An argument whose layout the config
    moved is relaid out by every call, as autotuning's timing is not: place such
    arguments once with `place(*args)` (the `place` attribute), as the timing does.
    """
    import jax

    if not isinstance(config, dict):
        config = load_config(config)
    layout = LayoutSpace(fn, tuple(args))
    plan = plan_of(layout, config)
    exe = layout.compile(plan, config.get("compiler_options") or None)
    out_tree = jax.tree.structure(jax.eval_shape(fn, *args))
    flatten, unflatten = jax.tree.leaves, jax.tree.unflatten

    def compiled(*call_args: Any) -> Any:
        return unflatten(out_tree, exe(*flatten(call_args)))

    def place(*call_args: Any) -> tuple:
        """The arguments, each moved once into the layout the executable expects."""
        leaves = [jax.device_put(x, f) for x, f in
                  zip(flatten(call_args), exe.input_formats[0], strict=True)]
        return tuple(unflatten(jax.tree.structure(tuple(call_args)), leaves))

    compiled.compiled = exe  # type: ignore[attr-defined]
    compiled.place = place  # type: ignore[attr-defined]
    return compiled


def agrees_with_jit(fn: Callable, args: Sequence[Any], run: Callable) -> bool:
    """Whether `run(*args)` (e.g. from `apply`) gives plain `jax.jit(fn)`'s outputs, to
    within their dtypes' precision: a config may change speed, never results."""
    import jax

    from graphcost.xla.timing import outputs_agree

    got = jax.tree.leaves(jax.block_until_ready(run(*args)))
    want = jax.tree.leaves(jax.jit(fn)(*args))
    return outputs_agree(got, want)


def how_to_apply(config: dict[str, Any], path: str = "CONFIG.json") -> str:
    """Plain instructions: the graphcost helper, and the same thing by hand with JAX."""
    lines = ["apply it:",
             "  from graphcost.autotune import apply",
             f"  run = apply(fn, args, {path!r})   # run(*args) is fn(*args), compiled so"]
    params = [e for e in config["layouts"] if e["kind"] == "parameter"]
    inner = [e for e in config["layouts"] if e["kind"] != "parameter"]
    if params:
        lines.append("  args = run.place(*args)   # once: arguments in the tuned layouts "
                     "(else every call relays them out)")
    if params or inner or config["compiler_options"]:
        lines.append("or by hand with JAX:")
    for e in params:
        lines.append(f"  argument leaf {e['index']}: in_shardings Format(Layout("
                     f"{tuple(e['major_to_minor'])}), sharding) in jax.jit(...)")
    for e in inner:
        what = {"in": "lhs", "kernel": "rhs", "out": "result"}[e["role"]]
        lines.append(f"  {e['kind']} #{e['index']} (trace order), {what}: "
                     f"with_layout_constraint(x, Layout({tuple(e['major_to_minor'])}))")
    if config["compiler_options"]:
        lines.append(f"  jax.jit(fn).lower(*args).compile({config['compiler_options']!r})")
    if not (params or inner or config["compiler_options"]):
        lines.append("  (the default configuration: plain jax.jit(fn) is already the best "
                     "measured)")
    return "\n".join(lines)
