"""Each card of the status page read on its own, with its own deadline.

A store that does not answer must cost its own cards, not the page: every part runs in a daemon
thread and :meth:`CardReader.read` waits for all of them up to one shared deadline. A part that
raised or did not finish in time comes back as :class:`Unavailable` with a sentence for its card
(``store unreachable: ConnectionError: ...``). A part whose previous read is still hanging is not
started again (at most one thread per part: a dead store does not pile up threads); its card
says it is still waiting.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pubsub_toolkit_cli.dashboard.monitoring import NotAvailable

logger = logging.getLogger(__name__)

CARD_TIMEOUT_S = 3.0  # the page answers within about this, whatever a backend does


@dataclass(frozen=True)
class Unavailable:
    """Why a card has no figure: shown on the card as ``reason``."""

    reason: str


@dataclass(frozen=True)
class Part:
    """One card's read: ``read()`` on ``backend`` (named in the card when it fails)."""

    backend: str
    read: Callable[[], Any]
    after: str | None = None  # a part whose read this one waits for (within the deadline)


class _Job:
    def __init__(self, read: Callable[[], Any], after: threading.Event | None, wait: float) -> None:
        self.done = threading.Event()
        self.started = time.monotonic()
        self.value: Any = None
        self.error: BaseException | None = None
        self._read = read
        self._after, self._wait = after, wait

    def run(self) -> None:
        try:
            if self._after is not None:
                self._after.wait(self._wait)  # its result feeds this read; never past the deadline
            self.value = self._read()
        except BaseException as exc:  # handed to the reader, which logs and shows it
            self.error = exc
        finally:
            self.done.set()


class CardReader:
    """Runs parts in parallel; remembers parts still running so they are not started twice."""

    def __init__(self, *, timeout: float = CARD_TIMEOUT_S) -> None:
        self.timeout = timeout
        self._lock = threading.Lock()
        self._running: dict[str, _Job] = {}

    def read(self, parts: Mapping[str, Part]) -> dict[str, Any]:
        """Each part's value, or :class:`Unavailable`."""
        jobs: dict[str, _Job | Unavailable] = {}
        with self._lock:
            for name, part in parts.items():
                previous = self._running.get(name)
                if previous is not None and not previous.done.is_set():
                    age = time.monotonic() - previous.started
                    jobs[name] = Unavailable(
                        f"{part.backend} unreachable: the previous read has not answered "
                        f"after {age:.0f} s"
                    )
                    continue
                earlier = jobs.get(part.after) if part.after else None
                after = earlier.done if isinstance(earlier, _Job) else None
                job = _Job(part.read, after, self.timeout)
                self._running[name] = job
                threading.Thread(target=job.run, name=f"status-{name}", daemon=True).start()
                jobs[name] = job
        deadline = time.monotonic() + self.timeout
        results: dict[str, Any] = {}
        for name, started in jobs.items():
            if isinstance(started, Unavailable):
                results[name] = started
                continue
            job, backend = started, parts[name].backend
            if not job.done.wait(max(deadline - time.monotonic(), 0.0)):
                logger.warning(
                    "status card %s: %s did not answer in %s s",
                    name.rpartition(":")[2],
                    backend,
                    self.timeout,
                )
                results[name] = Unavailable(
                    f"{backend} unreachable: no answer within {self.timeout:g} s"
                )
            elif isinstance(job.error, NotAvailable):
                results[name] = Unavailable(str(job.error))
            elif job.error is not None:
                logger.warning("status card %s failed", name.rpartition(":")[2], exc_info=job.error)
                results[name] = Unavailable(f"{backend} unreachable: {describe(job.error)}")
            else:
                results[name] = job.value
        return results


def describe(error: BaseException) -> str:
    """``Type: first line of the message`` (gRPC errors carry pages of detail)."""
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(error).__name__}: {first[:160]}" if first else type(error).__name__
