"""Group commit: concurrent calls from one instance share one round trip to the store.

With the Python clients, each store round trip costs real CPU in the client (request building,
syscalls, the GIL hand-off) - about as much as the server spends on it. When several threads
write at once, :class:`Coalescer` hands their operations to one ``flush`` (a Firestore batch, a
Redis pipeline). When nothing else is waiting, an operation goes alone at once: no timer, no
background thread, no added latency. A waiting caller leads the next flush, and leadership
passes to the oldest waiter after each flush, so no caller is kept serving others.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any


class Operation:
    """One caller's operation and, once flushed, its result or error."""

    __slots__ = ("apply", "error", "lead", "ready", "result")

    def __init__(self, apply: Callable[[Any], object]) -> None:
        self.apply = apply  # adds the operation to a batch/pipeline handed in by the flush
        self.ready = threading.Event()
        self.lead = False
        self.result: Any = None
        self.error: BaseException | None = None

    def finish(self, *, result: Any = None, error: BaseException | None = None) -> None:
        self.result, self.error = result, error
        self.lead = False
        self.ready.set()


Flush = Callable[[Sequence[Operation]], None]


class Coalescer:
    """Runs operations through ``flush``, sharing flushes between concurrent callers.

    ``flush(operations)`` must call ``finish`` on every operation it is given.
    """

    def __init__(self, flush: Flush, *, max_batch: int = 100) -> None:
        self._flush = flush
        self._max_batch = max_batch
        self._lock = threading.Lock()
        self._queue: list[Operation] = []
        self._leader_active = False

    def run(self, apply: Callable[[Any], object]) -> Any:
        """Submit one operation, wait until it is flushed, return its result or raise."""
        operation = Operation(apply)
        with self._lock:
            self._queue.append(operation)
            operation.lead = not self._leader_active
            self._leader_active = True
        if not operation.lead:
            operation.ready.wait()
        if operation.lead:  # set on arrival, or handed over by the previous leader
            self._lead_one_flush()
            operation.ready.wait()
        if operation.error is not None:
            raise operation.error
        return operation.result

    def _lead_one_flush(self) -> None:
        with self._lock:
            batch = self._queue[: self._max_batch]
            del self._queue[: self._max_batch]
        try:
            self._flush(batch)
        except BaseException as exc:
            for operation in batch:
                if not operation.ready.is_set():
                    operation.finish(error=exc)
        finally:
            with self._lock:
                if self._queue:
                    successor = self._queue[0]
                    successor.lead = True
                    successor.ready.set()
                else:
                    self._leader_active = False
