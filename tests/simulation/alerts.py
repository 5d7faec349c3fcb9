"""Capturing the library's decision log: ALERTs, takeovers and fencing, with true times.

The library logs every decision on the ``pubsub_toolkit.decisions`` logger with
``extra={"decision": {...}}`` (see :class:`pubsub_toolkit.observability.DecisionLog`). While a
schedule runs, :func:`capture` attaches a handler that keeps the records the checker needs -
those whose message says ``ALERT`` or whose fields carry ``alert``, plus ``taken_over`` and
``fenced`` - in the schedule's ledger. Everything else the library logs is silenced for the
run (100,000 schedules would otherwise flood stderr).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pubsub_toolkit.observability import LOGGER_NAME
from tests.simulation.ledger import Ledger

KEPT_OUTCOMES = frozenset({"taken_over", "fenced"})


def is_alert(text: str, payload: dict[str, Any]) -> bool:
    return "ALERT" in text or bool(payload.get("alert"))


class _Collector(logging.Handler):
    def __init__(self, ledger: Ledger, now: Callable[[], float]) -> None:
        super().__init__(level=logging.DEBUG)
        self._ledger = ledger
        self._now = now

    def emit(self, record: logging.LogRecord) -> None:
        payload = getattr(record, "decision", None)
        if not isinstance(payload, dict):
            return
        text = record.getMessage()
        if is_alert(text, payload) or payload.get("outcome") in KEPT_OUTCOMES:
            self._ledger.decision(self._now(), text, payload)


@contextmanager
def capture(ledger: Ledger, now: Callable[[], float]) -> Iterator[None]:
    """Collect decisions into ``ledger`` and silence the library's other logs meanwhile."""
    root = logging.getLogger(LOGGER_NAME)
    decisions = logging.getLogger(f"{LOGGER_NAME}.decisions")
    saved = (root.propagate, root.level, decisions.level, list(root.handlers))
    collector = _Collector(ledger, now)
    null = logging.NullHandler()
    root.propagate, root.handlers = False, [null]
    root.setLevel(logging.WARNING)
    decisions.setLevel(logging.INFO)
    decisions.addHandler(collector)
    try:
        yield
    finally:
        decisions.removeHandler(collector)
        root.propagate, _, _, root.handlers = saved[0], None, None, saved[3]
        root.setLevel(saved[1])
        decisions.setLevel(saved[2])
