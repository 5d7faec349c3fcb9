"""The event trace: what happened, in order, so a failing seed can be read like a story.

Bounded (the last ``limit`` lines) for bulk runs; unbounded when one seed is replayed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable


class Trace:
    """Lines of ``"<true time> <text>"``; ``limit=None`` keeps every line."""

    def __init__(self, now: Callable[[], float], limit: int | None = 400) -> None:
        self._now = now
        self._lines: deque[str] = deque(maxlen=limit)
        self.dropped = 0

    def add(self, text: str) -> None:
        if self._lines.maxlen is not None and len(self._lines) == self._lines.maxlen:
            self.dropped += 1
        self._lines.append(f"{self._now():12.3f}s {text}")

    def lines(self) -> list[str]:
        return list(self._lines)

    def render(self, last: int | None = None) -> str:
        lines: Iterable[str] = self._lines if last is None else list(self._lines)[-last:]
        head = [f"... {self.dropped} earlier events not kept ..."] if self.dropped else []
        return "\n".join([*head, *lines])
