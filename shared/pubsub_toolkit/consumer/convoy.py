"""The convoy dispatcher: each FIFO group serially, different groups in parallel.

Work items are queued per group (kept sorted by sequence number, so what arrived out of order
in one pull is handed to the gate in order and parks less). A group with work is *active*: one
task on the pool drains its queue, and no second task runs that group at the same time. Items
without a group run on the pool directly. The pool's size bounds how many groups run at once.

With ``batch`` > 1 a group's runner takes up to ``batch`` queued items with consecutive numbers
at once and hands their payloads to ``run_batch`` (the consumer's batch mode: one handler call
and one advance of the group for them all); a lone item still runs its own ``work``.

The queues themselves - number order, when a group is active, which items make a batch - are
:class:`pubsub_toolkit.core.convoy.GroupQueues`, shared with the asyncio convoy of
:class:`~.subscriber_async.AsyncConsumer`; this module adds the threads and the lock.

Work that raises never wedges its group: the error is logged, the items it was running are
handed back with their ``cancel`` (the consumer's nack: redelivered, never acked unhandled) and
the group's runner goes on with its queue. (The consumer settles every delivery itself; this
is the net under a bug there, so ``cancel`` must be harmless on a delivery already settled - a
nack after an ack is.) So does work that raises a ``BaseException`` that is not an ``Exception``
(a handler's ``sys.exit()``): logged, its deliveries and the group's queue handed back, and it
goes on up.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from pubsub_toolkit.core.convoy import GroupQueues

Work = Callable[[], None]
logger = logging.getLogger(__name__)


class _Item(NamedTuple):
    """A submitted delivery's work (a named tuple, not a frozen dataclass: one per delivery,
    and a tuple is several times cheaper to make - see :class:`~.core.convoy.Queued`)."""

    seq: int
    work: Work
    cancel: Work
    payload: object = None


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
        self._queues: GroupQueues[_Item] = GroupQueues()
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
            if not self._queues.put(group, seq, _Item(seq, work, cancel, payload)):
                return  # the group's runner will pick it up
        self._pool.submit(self._run_group, group)

    def is_active(self, group: str) -> bool:
        """True while this process has work queued or running for ``group``."""
        with self._lock:
            return self._queues.active(group)

    def _run_single(self, work: Work, cancel: Work) -> None:
        item = _Item(0, work, cancel)
        try:
            self._guarded(None, [item])
        except BaseException:
            _hand_back_exited(None, [item])
            raise
        finally:
            self._done()

    def _run_group(self, group: str) -> None:
        items: list[_Item] = []
        try:
            while True:
                with self._lock:
                    # "Empty" frees the group in the same step, under the lock: a submit can
                    # never slip in between and be stranded.
                    items = [queued.item for queued in self._queues.take(group, self._batch)]
                if not items:
                    return
                try:
                    self._guarded(group, items)
                finally:
                    for _ in items:
                        self._done()
        except BaseException:
            # Not even an Exception (a handler's sys.exit(), or the thread going away): hand
            # back what it was running, leave the group free and its queued deliveries handed
            # back, never active with no runner.
            _hand_back_exited(group, items)
            with self._lock:
                stranded = self._queues.forget(group)
            for queued in stranded:
                queued.item.cancel()
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
            queued = self._queues.drain()
            self._in_flight -= len(queued)
        for waiting in queued:
            waiting.item.cancel()
        with self._lock:
            finished = self._idle.wait_for(lambda: self._in_flight == 0, timeout=timeout)
        self._pool.shutdown(wait=finished)
        return finished


def _hand_back_exited(group: str | None, items: list[_Item]) -> None:
    """Work raised a BaseException that is not an Exception: log it, and hand its deliveries
    back (``cancel``, the consumer's nack). The pool keeps the error in a future nobody reads,
    and a delivery left unsettled stays leased by google-cloud-pubsub for up to an hour
    (``max_lease_duration``), its group waiting behind it - silently."""
    where = "outside groups" if group is None else f"of group {group}"
    logger.exception(
        "work %s raised a BaseException; its %d deliveries are nacked for redelivery",
        where,
        len(items),
    )
    for item in items:
        item.cancel()
