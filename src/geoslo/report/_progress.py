"""A tiny progress line on stderr: label, done/total, elapsed, ETA.

On a terminal it redraws at most every 0.5 s; elsewhere (CI logs, pipes) it
stays silent until one final line.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TextIO

REDRAW_INTERVAL_S = 0.5


class Progress:
    """Progress of ``total`` steps; an iterator wrapper and a context manager.

    >>> with progress(None, total=3, label="runs") as bar:  # doctest: +SKIP
    ...     for _ in range(3):
    ...         bar.update()
    """

    def __init__(
        self,
        iterable: Iterable | None = None,
        total: int | None = None,
        label: str = "",
        *,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.iterable = iterable
        self.total = total
        self.label = label
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        self._clock = clock
        self._tty = _is_tty(self._stream)
        self._start_s = clock()
        self._last_draw_s = -float("inf")
        self._width = 0
        self._closed = False

    def update(self, steps: int = 1) -> None:
        """Count ``steps`` more steps done; redraw if 0.5 s have passed (terminal only)."""
        self.done += steps
        if not self._tty:
            return
        now_s = self._clock()
        if now_s - self._last_draw_s >= REDRAW_INTERVAL_S:
            self._last_draw_s = now_s
            self._draw(self.line(now_s), end="")

    def close(self) -> None:
        """Write the final line (once)."""
        if self._closed:
            return
        self._closed = True
        self._draw(self.line(self._clock(), final=True), end="\n")

    def line(self, now_s: float, final: bool = False) -> str:
        """The text of the progress line at time ``now_s``."""
        elapsed_s = now_s - self._start_s
        count = f"{self.done}/{self.total}" if self.total is not None else f"{self.done}"
        parts = [f"{self.label}:" if self.label else "", count]
        if self.total:
            parts.append(f"({100.0 * self.done / self.total:.0f}%)")
        parts.append(f"elapsed {_clock_text(elapsed_s)}")
        if final:
            return " ".join(p for p in parts if p)
        if self.total is not None and 0 < self.done <= self.total:
            eta_s = elapsed_s / self.done * (self.total - self.done)
            parts.append(f"ETA {_clock_text(eta_s)}")
        return " ".join(p for p in parts if p)

    def _draw(self, text: str, end: str) -> None:
        if self._tty:
            padded = text.ljust(self._width)
            self._width = len(text)
            self._stream.write("\r" + padded + end)
        else:
            self._stream.write(text + end)
        self._stream.flush()

    def __iter__(self) -> Iterator[Any]:
        if self.iterable is None:
            raise TypeError("progress(None, ...) is not iterable; use it as a context manager")
        try:
            for item in self.iterable:
                yield item
                self.update()
        finally:
            self.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def progress(
    iterable: Iterable | None = None,
    total: int | None = None,
    label: str = "",
    *,
    stream: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Progress:
    """Show progress on stderr: ``for x in progress(xs, len(xs), "sweep")`` or ``with``.

    ``total`` defaults to ``len(iterable)`` when it has one; without a total
    no ETA is shown. ``stream`` and ``clock`` exist for tests.
    """
    return Progress(iterable, total, label, stream=stream, clock=clock)


def _is_tty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):
        return False


def _clock_text(seconds: float) -> str:
    """``m:ss`` or ``h:mm:ss``."""
    whole = int(round(max(seconds, 0.0)))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
