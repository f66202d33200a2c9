"""The one error type for bad input files: it names the file, the key and what was expected."""

from __future__ import annotations

from pathlib import Path

from graphcost.errors import UserError


class GraphFileError(UserError):
    """A graph file that cannot be used, with where and why."""

    def __init__(self, path: str | Path, key: str, expected: str):
        self.path = str(path)
        self.key = key
        self.expected = expected
        super().__init__(f"{self.path}: key '{key}': expected {expected}")
