"""The convoy dispatcher: each FIFO group serially, different groups in parallel.

Work items are queued per group (kept sorted by sequence number, so what arrived out of order
in one pull is handed to the gate in order and parks less). A group with work is *active*: one
task on the pool drains its queue, and no second task runs that group at the same time. Items
without a group run on the pool directly. The pool's size bounds how many groups run at once.

With ``batch`` > 1 a group's runner takes up to ``batch`` queued items with consecutive numbers
at once and hands their payloads to ``run_batch`` (the consumer's batch mode: one handler call
and one advance of the group for them all); a lone item still runs its own ``work``.

Work that raises never wedges its group: the error is logged, the items it was running are
handed back with their ``cancel`` (the consumer's nack: redelivered, never acked unhandled) and
the group's runner goes on with its queue. (The consumer settles every delivery itself; this
is the net under a bug there, so ``cancel`` must be harmless on a delivery already settled - a
nack after an ack is.)
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

Work = Callable[[], None]
logger = logging.getLogger(__name__)


@dataclass(order=True)
class _Item:
    seq: int
    order: int  # arrival order breaks ties (duplicates of one number)
    work: Work = field(compare=False)
    cancel: Work = field(compare=False)
    payload: object = field(compare=False, default=None)


class ConvoyDispatcher:
    """Runs submitted work: per group in sequence order, one at a time; groups in parallel."""

    def __init__(
        self,
        concurrency: int,
        *,
        batch: int = 1,
        run_batch: Callable[[list[object]], None] | None = None,
    ) -> None:
        self._batch = batch if run_batch is not None else 1
        self._run_batch = run_batch
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="convoy")
        self._lock = threading.Lock()
        self._queues: dict[str, list[_Item]] = {}
        self._active: set[str] = set()
        self._arrivals = 0
        self._idle = threading.Condition(self._lock)
        self._in_flight = 0
        self._closed = False

    def submit(
        self, group: str | None, seq: int, work: Work, cancel: Work, payload: object = None
    ) -> None:
        """Queue ``work``; ``cancel`` runs instead if the dispatcher closes first. ``payload``
        is what ``run_batch`` gets for the item when it runs in a batch."""
        with self._lock:
            if self._closed:
                cancel()
                return
            self._in_flight += 1
            if group is None:
                self._pool.submit(self._run_single, work, cancel)
                return
            self._arrivals += 1
            bisect.insort(
                self._queues.setdefault(group, []),
                _Item(seq, self._arrivals, work, cancel, payload),
            )
            if group in self._active:
                return  # the group's runner will pick it up
            self._active.add(group)
        self._pool.submit(self._run_group, group)

    def is_active(self, group: str) -> bool:
        """True while this process has work queued or running for ``group``."""
        with self._lock:
            return group in self._active

    def _run_single(self, work: Work, cancel: Work) -> None:
        try:
            self._guarded(None, [_Item(0, 0, work, cancel)])
        finally:
            self._done()

    def _run_group(self, group: str) -> None:
        try:
            while True:
                with self._lock:
                    queue = self._queues.get(group)
                    if not queue:
                        # Deciding "empty" and leaving the active set under one lock: a submit
                        # can never slip between them and be stranded.
                        self._queues.pop(group, None)
                        self._active.discard(group)
                        return
                    items = [queue.pop(0)]
                    while len(items) < self._batch and queue and queue[0].seq == items[-1].seq + 1:
                        items.append(queue.pop(0))
                try:
                    self._guarded(group, items)
                finally:
                    for _ in items:
                        self._done()
        except BaseException:
            # Not even an Exception (the thread is going away): leave the group free and its
            # queued deliveries handed back, never active with no runner.
            with self._lock:
                stranded = self._queues.pop(group, [])
                self._active.discard(group)
            for item in stranded:
                item.cancel()
                self._done()
            raise

    def _guarded(self, group: str | None, items: list[_Item]) -> None:
        """Run ``items`` (one, or a batch); if that raises, log it and cancel them all."""
        try:
            if len(items) == 1 or self._run_batch is None:
                items[0].work()
            else:
                self._run_batch([item.payload for item in items])
        except Exception:
            where = "outside groups" if group is None else f"of group {group}"
            logger.exception(
                "work %s (#%s-#%s) raised; its %d deliveries are nacked for redelivery and "
                "the convoy goes on",
                where,
                items[0].seq,
                items[-1].seq,
                len(items),
            )
            for item in items:
                try:
                    item.cancel()
                except Exception:
                    logger.exception("handing back a delivery of group %s failed", group)

    def _done(self) -> None:
        with self._lock:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.notify_all()

    def close(self, timeout: float | None = None) -> bool:
        """Refuse new work, cancel queued work, wait for running work; True if all finished."""
        with self._lock:
            self._closed = True
            queued = [item for queue in self._queues.values() for item in queue]
            for queue in self._queues.values():
                queue.clear()
            self._in_flight -= len(queued)
        for item in queued:
            item.cancel()
        with self._lock:
            finished = self._idle.wait_for(lambda: self._in_flight == 0, timeout=timeout)
        self._pool.shutdown(wait=finished)
        return finished
