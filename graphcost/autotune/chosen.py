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

from graphcost.atomic import write_text
from graphcost.errors import UserError
from graphcost.xla.configs import MAX_RANK, POINT_PRIMITIVES, ROLES, LayoutPlan, LayoutSpace
from graphcost.xla.options import CANDIDATE_KNOBS, OPTION_KNOBS

CONFIG_FORMAT = "graphcost-autotune/1"
POINT_KINDS = ("parameter", *dict.fromkeys(POINT_PRIMITIVES.values()))


def signature(layout: LayoutSpace) -> list[list[Any]]:
    """The shapes and dtypes of a program's argument leaves: a config fits only these."""
    return [[list(np.shape(x)), str(getattr(x, "dtype", type(x).__name__))]
            for x in layout.leaves]


def save_config(config: dict[str, Any], path: str | Path) -> Path:
    """Write a chosen config as JSON, whole or not at all (its folder made if needed)."""
    return write_text(json.dumps(config, indent=1) + "\n", path)


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a config `save_config` wrote; a UserError for any other file."""
    try:
        config = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"{path}: not a readable JSON autotune config ({e})") from None
    return check_config(config, str(path))


def _option_types() -> dict[str, tuple[type, ...]]:
    """The XLA option each knob sets, with the JSON types of its values."""
    types: dict[str, tuple[type, ...]] = {"xla_disable_hlo_passes": (str,)}
    for knob in (*OPTION_KNOBS, *CANDIDATE_KNOBS):
        if not knob.option.startswith("disable:"):
            found = tuple(dict.fromkeys(type(c) for c in knob.choices if c is not None))
            types[knob.option] = tuple(dict.fromkeys(types.get(knob.option, ()) + found))
    return types


_JSON_TYPES = {bool: "true/false", int: "whole number", float: "number", str: "string",
               list: "list", dict: "object", type(None): "null"}


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _is_int(value: Any) -> bool:
    return type(value) is int  # JSON true/false are no point numbers


def check_config(config: Any, source: str = "the config") -> dict[str, Any]:
    """`config` if it is a well-formed autotune config, else a UserError naming `source`,
    the key (`layouts[2].role`) and what it must be: a hand-edited file is refused here,
    not deep inside XLA."""

    def bad(key: str, expected: str, found: Any) -> UserError:
        return UserError(f"{source}: {key} must be {expected}, found {found!r}")

    if not isinstance(config, dict) or config.get("format") != CONFIG_FORMAT:
        found = config.get("format") if isinstance(config, dict) else type(config).__name__
        raise UserError(f"{source}: not a graphcost autotune config (format {found!r}, "
                        f"expected {CONFIG_FORMAT!r})")
    for key, kind in (("layouts", list), ("compiler_options", dict)):
        if key not in config:
            raise UserError(f"{source}: the key {key!r} is missing")
        if not isinstance(config[key], kind):
            raise UserError(f"{source}: {key} must be a JSON "
                            f"{_JSON_TYPES[kind]}, found a JSON {_json_type(config[key])}")
    if not isinstance(config.get("arguments", []), list | None):
        raise bad("arguments", "a list of [shape, dtype] or null", config["arguments"])
    seen: dict[tuple[int, str], int] = {}
    for i, e in enumerate(config["layouts"]):
        at = f"layouts[{i}]"
        if not isinstance(e, dict):
            raise bad(at, "an object with point, kind, index, role, major_to_minor", e)
        for key in ("point", "kind", "index", "role", "major_to_minor"):
            if key not in e:
                raise UserError(f"{source}: {at} has no key {key!r}")
        for key in ("point", "index"):
            if not _is_int(e[key]) or e[key] < 0:
                raise bad(f"{at}.{key}", "a whole number >= 0", e[key])
        if e["kind"] not in POINT_KINDS:
            raise bad(f"{at}.kind", f"one of {', '.join(POINT_KINDS)}", e["kind"])
        roles = ("out",) if e["kind"] == "parameter" else ROLES
        if e["role"] not in roles:
            raise bad(f"{at}.role", f"{' or '.join(map(repr, roles))} for a {e['kind']}",
                      e["role"])
        order = e["major_to_minor"]
        if (not isinstance(order, list) or not all(map(_is_int, order))
                or sorted(order) != list(range(len(order))) or not 2 <= len(order) <= MAX_RANK):
            raise bad(f"{at}.major_to_minor", f"an order of the axes 0..r-1 of a rank-r "
                      f"tensor, 2 <= r <= {MAX_RANK}, each axis once", order)
        first = seen.setdefault((e["point"], e["role"]), i)
        if first != i:
            raise UserError(f"{source}: {at} sets point {e['point']} role {e['role']!r} "
                            f"again (layouts[{first}] set it already)")
    types = _option_types()
    for name, value in config["compiler_options"].items():
        if name not in types:
            raise UserError(f"{source}: compiler_options.{name} is no option graphcost "
                            f"tunes (expected one of {', '.join(types)})")
        if type(value) not in types[name]:
            raise bad(f"compiler_options.{name}",
                      f"a JSON {' or '.join(_JSON_TYPES[t] for t in types[name])}", value)
    return config


def plan_of(layout: LayoutSpace, config: dict[str, Any],
            source: str = "the config") -> LayoutPlan:
    """The layout plan a config (`check_config`ed) names, checked against this program's
    points; errors name `source`, the config's file where it came from one."""
    if config.get("arguments") is not None and config["arguments"] != signature(layout):
        raise UserError(f"{source} was made for arguments of other shapes or dtypes: "
                         f"{config['arguments']} != {signature(layout)}")
    plan: LayoutPlan = {}
    for i, e in enumerate(config["layouts"]):
        p = e["point"]
        if p >= len(layout.points) or (layout.points[p].kind, layout.points[p].index) != (
                e["kind"], e["index"]):
            raise UserError(f"{source}: layouts[{i}] point {p} ({e['kind']} {e['index']}) "
                             "is not in this program: the config was made for another one")
        rank = layout.points[p].ranks.get(e["role"])
        if rank is None:
            raise UserError(f"{source}: layouts[{i}].role {e['role']!r}: {e['kind']} "
                             f"{e['index']} has only {', '.join(layout.points[p].ranks)}")
        if rank != len(e["major_to_minor"]):
            raise UserError(f"{source}: layouts[{i}].major_to_minor {e['major_to_minor']} "
                             f"orders {len(e['major_to_minor'])} axes, but the {e['role']!r} "
                             f"tensor of {e['kind']} {e['index']} has rank {rank}")
        plan[(p, e["role"])] = tuple(e["major_to_minor"])
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

    source = "the config" if isinstance(config, dict) else str(config)
    config = check_config(config, source) if isinstance(config, dict) else load_config(config)
    layout = LayoutSpace(fn, tuple(args))
    plan = plan_of(layout, config, source)
    exe = layout.compile(plan, config["compiler_options"] or None)
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
