"""Group commit: concurrent calls from one instance share one round trip to the store.

With the Python clients, each store round trip costs real CPU in the client (request building,
syscalls, the GIL hand-off) - about as much as the server spends on it. When several threads
write at once, :class:`Coalescer` hands their operations to one ``flush`` (a Firestore batch, a
Redis pipeline). When nothing else is waiting, an operation goes alone at once: no timer, no
background thread, no added latency - and a caller that passes ``alone`` (the same operation as
a plain call, say ``client.set(...)``) skips the batching machinery altogether then: no
Operation, no Event, no pipeline object, just the call, because building a one-command batch
costs the client about as much CPU as the round trip itself. A waiting caller leads the next
flush, and leadership passes to the oldest waiter after each flush, so no caller is kept
serving others.

A flush never holds two operations on the same key (document, Redis key): a Firestore batch
refuses two inserts of one document and would apply two updates with the same precondition
both, so the second waits for the next flush and sees the first one's result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any


class Operation:
    """One caller's operation and, once flushed, its result or error."""

    __slots__ = ("apply", "done", "error", "key", "lead", "result", "wakeup")

    def __init__(self, key: str | None, apply: Callable[[Any], object]) -> None:
        self.key = key
        self.apply = apply  # adds the operation to a batch/pipeline handed in by the flush
        # A bare lock used as a one-token semaphore, released when the operation is finished
        # or handed leadership: a threading.Event (a Condition, a lock per wait) costs several
        # times more client CPU per operation, and every coalesced operation waits once.
        self.wakeup = threading.Lock()
        self.wakeup.acquire()
        self.lead = False  # leader on arrival
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None

    def finish(self, *, result: Any = None, error: BaseException | None = None) -> None:
        """Record the outcome and wake the caller; the first outcome given is the one kept."""
        if self.done:
            return
        self.result, self.error = result, error
        self.done = True
        self.wakeup.release()


Flush = Callable[[Sequence[Operation]], None]


class Coalescer:
    """Runs operations through ``flush``, sharing flushes between concurrent callers.

    ``flush(operations)`` must call ``finish`` on every operation it is given; if it raises,
    every unfinished operation of that flush fails with the exception.

    ``on_idle``, if given, runs when leadership ends because nobody waits (after a flush or an
    ``alone`` call), under the coalescer's lock: no flush or ``alone`` call runs meanwhile, and
    the next one starts after it. A store returns what it kept for back-to-back flushes there
    (the Redis dedup store: its pooled connection).
    """

    def __init__(
        self,
        flush: Flush,
        *,
        max_batch: int = 100,
        on_idle: Callable[[], None] | None = None,
    ) -> None:
        self._flush = flush
        self._max_batch = max_batch
        self._on_idle = on_idle
        self._lock = threading.Lock()
        self._queue: list[Operation] = []
        self._leader_active = False

    def run(
        self,
        apply: Callable[[Any], object],
        *,
        key: str | None = None,
        alone: Callable[[], Any] | None = None,
    ) -> Any:
        """Submit one operation; wait until flushed; return its result or raise.

        Operations with the same ``key`` never share a flush; ``None`` conflicts with nothing.
        With ``alone``, when no flush is running and nobody waits, ``alone()`` runs instead of a
        one-operation flush (its result or exception is the caller's); callers arriving
        meanwhile queue as behind any flush and the first of them leads the next one.
        """
        solo: Callable[[], Any] | None = None
        operation: Operation | None = None
        with self._lock:  # one locked section per call, whichever way it goes
            # Nobody leads means nobody waits either: a queued operation always has a leader
            # (arrival makes one, every flush hands leadership on or clears it).
            if alone is not None and not self._leader_active:
                self._leader_active = True
                solo = alone
            else:
                operation = Operation(key, apply)
                self._queue.append(operation)
                if not self._leader_active:
                    self._leader_active = operation.lead = True
        if operation is None:
            assert solo is not None  # the lock's one other outcome
            try:
                return solo()
            finally:
                self._hand_over()
        # Each wake-up token is consumed once: the one that says "finished" (then we are done)
        # or "lead the next flush" (which finishes us, as the oldest waiter, in its batch). A
        # leader finishing its own operation leaves one token that nobody needs.
        lead = operation.lead
        while True:
            if not lead:
                operation.wakeup.acquire()
                if operation.done:
                    break
            lead = False
            self._lead_one_flush()
            if operation.done:
                break
        if operation.error is not None:
            raise operation.error
        return operation.result

    def _take_batch(self) -> list[Operation]:
        batch: list[Operation] = []
        keys: set[str] = set()
        for operation in self._queue:
            if len(batch) == self._max_batch:
                break
            if operation.key is None:
                batch.append(operation)
            elif operation.key not in keys:
                keys.add(operation.key)
                batch.append(operation)
        taken = {id(o) for o in batch}
        self._queue = [o for o in self._queue if id(o) not in taken]
        return batch

    def _lead_one_flush(self) -> None:
        with self._lock:
            batch = self._take_batch()
        try:
            self._flush(batch)
        except BaseException as exc:
            for operation in batch:
                if not operation.done:
                    operation.finish(error=exc)
        finally:
            for operation in batch:
                if not operation.done:  # a flush that forgot one must not strand its caller
                    operation.finish(error=RuntimeError("flush did not finish the operation"))
            self._hand_over()

    def _hand_over(self) -> None:
        """Pass leadership to the oldest waiter, or end it when nobody waits."""
        with self._lock:
            if self._queue:
                self._queue[0].wakeup.release()  # its token: lead the next flush
                return
            try:
                if self._on_idle is not None:
                    self._on_idle()
            finally:
                self._leader_active = False
