"""Progress a person can read: a live bar on a terminal, whole lines elsewhere.

A tqdm bar redraws itself with carriage returns; under `nohup`, CI or a pipe every redraw
lands in the log as one more frame (hundreds per epoch). So the bar is drawn only when
standard error is a terminal; elsewhere each update is one plain line with the same
figures (`lines=True`), or nothing where the caller prints its own line per unit of work.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO


def on_terminal(stream: TextIO | None = None) -> bool:
    """Whether `stream` (standard error by default) is a terminal a bar can redraw."""
    stream = sys.stderr if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or file-like stream without a tty
        return False


class Progress:
    """Counts done units of `total`: a tqdm bar on a terminal; elsewhere, when `lines`,
    one line `desc n/total unit k=v ...` per update, at most one per `every_s` seconds
    (the last always), and nothing otherwise. Disabled, it counts and prints nothing."""

    def __init__(self, total: int, desc: str = "", unit: str = "it", initial: int = 0,
                 enabled: bool = True, lines: bool = True, every_s: float = 0.0,
                 leave: bool = True, stream: TextIO | None = None):
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.stream = sys.stderr if stream is None else stream
        self.start = time.perf_counter()
        self.every_s, self._last_line = every_s, float("-inf")
        self.figures: dict[str, Any] = {}
        self.bar = None
        self.lines = enabled and lines
        if enabled and on_terminal(self.stream):
            from tqdm import tqdm

            self.lines = False
            self.bar = tqdm(total=total, desc=desc, unit=unit, initial=initial, leave=leave,
                            dynamic_ncols=True, file=self.stream)

    @property
    def elapsed(self) -> float:
        """Seconds since the work started."""
        return time.perf_counter() - self.start

    def set_postfix(self, **figures: Any) -> None:
        """The figures shown after the count (on the bar, or in the next line)."""
        self.figures = figures
        if self.bar is not None:
            self.bar.set_postfix(figures, refresh=False)

    def update(self, n: int = 1) -> None:
        """`n` more units done."""
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.lines:
            now = time.perf_counter()
            if now - self._last_line >= self.every_s or self.n >= self.total:
                self._last_line = now
                print(self.line(), file=self.stream, flush=True)

    def line(self) -> str:
        """The plain line for the count so far."""
        figures = " ".join(f"{k}={v}" for k, v in self.figures.items())
        head = f"{self.desc} " if self.desc else ""
        return f"{head}{self.n}/{self.total} {self.unit}" + (f" {figures}" if figures else "")

    def iterate(self, items: Iterable) -> Iterator:
        """`items`, counting each as it is taken."""
        for item in items:
            yield item
            self.update()

    def close(self) -> None:
        """Take the bar off the screen (a finished one stays when `leave`)."""
        if self.bar is not None:
            self.bar.close()
