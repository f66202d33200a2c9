"""Atomic file writing: nothing half-written is ever left under the final name."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


@contextmanager
def atomic_open(path: str | Path, mode: str = "wb", **kwargs) -> Iterator[IO]:
    """Open a temporary file beside `path`; on success it replaces `path` in one rename.

    On any error the temporary file is removed and `path` is left as it was. The file
    gets the usual permissions (0666 less the umask), not mkstemp's private 0600.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(obj: Any, path: str | Path) -> Path:
    """Write `obj` as indented JSON, atomically (numpy scalars written as floats)."""
    with atomic_open(path, "w") as f:
        json.dump(obj, f, indent=1, default=float)
    return Path(path)
