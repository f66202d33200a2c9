"""Which configs compile to the same executable, so that they are timed once.

Two configs are one executable when their optimized HLO is the same and so is every
option that acts after HLO (docs/design.md §7). The HLO text is deterministic once the
`metadata={...}` attributes (op names: the named scopes we add to find configurable
nodes), the tables of source files, functions and stack frames they point into, and
the module name are removed. The bytes of a serialized
executable are not (one config compiled twice gives different bytes), so they cannot
be the key. Options that act only in LLVM code generation (vector width, ISA, fast
math, optimisation level, …) leave the HLO text unchanged, so every option except the
HLO pass list is part of the fingerprint: two configs that differ only in such an
option are kept apart even where the machine code happens to be the same.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

#: options whose whole effect is on the optimized HLO, so the HLO text already shows it
HLO_LEVEL_OPTIONS = frozenset({"xla_disable_hlo_passes"})

_METADATA = re.compile(r",?\s*metadata=\{(?:[^{}\"]|\"(?:[^\"\\]|\\.)*\")*\}")
_MODULE_NAME = re.compile(r"^HloModule [^\s,]+", re.M)
_DEBUG_TABLES = {"FileNames", "FunctionNames", "FileLocations", "StackFrames"}


def strip_hlo(text: str) -> str:
    """The optimized HLO text without metadata, source tables and module name: what the
    machine code depends on."""
    lines, in_table = [], False
    for line in _MODULE_NAME.sub("HloModule m", _METADATA.sub("", text)).splitlines():
        if line.strip() in _DEBUG_TABLES:
            in_table = True
        elif in_table and not line.strip():
            in_table = False
        elif not in_table:
            lines.append(line)
    return "\n".join(lines)


def fingerprint(hlo_text: str, options: Mapping[str, Any] | None = None) -> int:
    """A 63-bit key of an executable: equal keys, same machine code (see module doc)."""
    codegen = {k: v for k, v in (options or {}).items() if k not in HLO_LEVEL_OPTIONS}
    h = hashlib.sha256(strip_hlo(hlo_text).encode())
    h.update(json.dumps(codegen, sort_keys=True, default=str).encode())
    return int.from_bytes(h.digest()[:8], "little") >> 1  # fits int64, never negative
