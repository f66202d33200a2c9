"""Settings dataclasses as users set them: `--set KEY=VALUE` checked against the fields.

Training and model settings are plain dataclasses whose comments document them. This
module turns a user's text into a field's type (or says which key or value is wrong and
lists the valid keys), checks value ranges, and reads each field's comment back as its
help text, so `graphcost train --help` and the error messages never drift from the code.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import math
import textwrap
import tokenize
import typing
from collections.abc import Callable, Mapping
from typing import Any

from graphcost.errors import SettingsError

#: a value rule: a predicate and what it says about valid values
Rule = tuple[Callable[[Any], bool], str]
POSITIVE: Rule = (lambda v: v > 0, "greater than 0")
AT_LEAST_1: Rule = (lambda v: v >= 1, "at least 1")
AT_LEAST_2: Rule = (lambda v: v >= 2, "at least 2 (configs are ranked against each other)")
NON_NEGATIVE: Rule = (lambda v: v >= 0, "at least 0")
AT_LEAST_MINUS_1: Rule = (lambda v: v >= -1, "at least -1 (-1: the default)")
FRACTION: Rule = (lambda v: 0 <= v < 1, "in [0, 1)")
UNIT: Rule = (lambda v: 0 < v <= 1, "in (0, 1]")

_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


def off_or_at_least(n: int) -> Rule:
    """A rule for a cap where 0 means none and a small value means nothing useful."""
    return (lambda v: v == 0 or v >= n, f"0 (no cap) or at least {n}")


def one_of(*choices: str) -> Rule:
    """A rule for a string setting with a fixed set of values."""
    return (lambda v: v in choices, "one of " + ", ".join(c or "''" for c in choices))


def field_types(cls: type) -> dict[str, str]:
    """Field name → 'int', 'float', 'bool' or 'str' (what a value is coerced to)."""
    hints = typing.get_type_hints(cls)
    return {f.name: getattr(hints[f.name], "__name__", str(hints[f.name]))
            for f in dataclasses.fields(cls)}


def coerce(key: str, kind: str, value: Any) -> Any:
    """`value` (text from the command line, or already typed) as a `kind` value."""
    def bad(expected: str) -> SettingsError:
        return SettingsError(f"setting '{key}' must be {expected}, got {value!r}")

    text = value.strip() if isinstance(value, str) else None
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if text is not None and text.lower() in _TRUE | _FALSE:
            return text.lower() in _TRUE
        raise bad("true or false")
    if kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            return int(text)  # type: ignore[arg-type]  (None: a typed non-int, refused)
        except (TypeError, ValueError):
            raise bad("an integer") from None
    if kind == "float":
        number = isinstance(value, int | float) and not isinstance(value, bool)
        try:
            x = float(value) if number else float(text)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise bad("a number") from None
        if not math.isfinite(x):
            raise bad("a finite number")
        return x
    if text is not None and len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]  # a quoted string, as Python would write it
    return text if text is not None else str(value)


def build(cls: type, values: Mapping[str, Any], base: Any = None, what: str = "setting") -> Any:
    """An instance of settings dataclass `cls` (from `base`, else the defaults) with
    `values` coerced to the fields' types; an unknown key is refused, listing the valid ones."""
    types = field_types(cls)
    unknown = sorted(set(values) - set(types))
    if unknown:
        raise SettingsError(f"unknown {what} '{unknown[0]}'; valid: {', '.join(types)}")
    typed = {k: coerce(k, types[k], v) for k, v in values.items()}
    return dataclasses.replace(base, **typed) if base is not None else cls(**typed)


def check(obj: Any, rules: Mapping[str, Rule]) -> None:
    """Refuse the first field whose value breaks its rule, naming it and the rule."""
    for name, (ok, expected) in rules.items():
        value = getattr(obj, name)
        if not ok(value):
            raise SettingsError(f"setting '{name}' must be {expected}, got {value!r}")


def field_docs(cls: type) -> dict[str, str]:
    """Each field's comment in the class source: on its line, else the lines just above
    (none when the source is not installed)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    lines = source.splitlines()
    docs = {}
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        doc = comments.get(node.lineno)
        if doc is None:
            above, i = [], node.lineno - 1
            while i in comments and lines[i - 1].strip().startswith("#"):
                above.insert(0, comments[i])
                i -= 1
            doc = " ".join(above)
        docs[node.target.id] = doc
    return docs


def describe(obj: Any) -> list[tuple[str, str]]:
    """(`name=default`, meaning) of every field of a settings instance (its values are
    the defaults shown) or class, for help text."""
    docs = field_docs(obj if isinstance(obj, type) else type(obj))
    values = obj() if isinstance(obj, type) else obj
    return [(f"{f.name}={getattr(values, f.name)!r}", docs.get(f.name, ""))
            for f in dataclasses.fields(values)]
