"""The convoy's queues, written once for the thread convoy and the asyncio one.

:class:`~pubsub_toolkit.consumer.convoy.ConvoyDispatcher` (``Consumer``, a thread pool) and
:class:`~pubsub_toolkit.consumer.subscriber_async.AsyncConsumer` (one event loop) both run
each FIFO group serially, in number order, groups beside each other. What they share is
decided here, without I/O or locking (the thread convoy holds its lock around every call; the
loop needs none):

* a group's deliveries wait sorted by number, then by arrival (duplicates of one number keep
  their order), so what arrived out of order in one pull reaches the gate in order and parks
  less;
* a group is *active* from its first delivery until a runner finds its queue empty - and
  :meth:`GroupQueues.take` frees it in that very step, so a delivery can never be queued for a
  group whose runner has just left (stranded);
* a batch is the head and the deliveries numbered right after it (consecutive, up to ``batch``).
"""

from __future__ import annotations

import bisect
from typing import Generic, NamedTuple, TypeVar

T = TypeVar("T")


class Queued(NamedTuple, Generic[T]):
    """One waiting delivery: its number, its arrival order, and the driver's ``item``.

    Sorted as the tuple it is - by number, then arrival, which is unique, so ``item`` is never
    compared. A named tuple rather than a frozen dataclass: one is made per delivery, and a
    frozen dataclass's ``__init__`` (``object.__setattr__`` per field) and generated ``__lt__``
    cost several times a tuple's (issue 26's 64-group consumer, CPU-bound)."""

    seq: int
    arrival: int
    item: T


class GroupQueues(Generic[T]):
    """Per-group queues of waiting deliveries (see the module)."""

    def __init__(self) -> None:
        self._queues: dict[str, list[Queued[T]]] = {}
        self._arrivals = 0

    def put(self, group: str, seq: int, item: T) -> bool:
        """Queue ``item`` as number ``seq`` of ``group``. True when the group was idle: the
        caller starts its runner (else the running one takes it in turn)."""
        self._arrivals += 1
        queued = Queued(seq, self._arrivals, item)
        queue = self._queues.get(group)
        if queue is not None:
            bisect.insort(queue, queued)
            return False
        self._queues[group] = [queued]
        return True

    def take(self, group: str, batch: int = 1) -> list[Queued[T]]:
        """The next deliveries of ``group`` for its runner: the head, and with ``batch`` > 1
        the ones numbered right after it. Empty: the group is idle again, as of this call."""
        queue = self._queues.get(group)
        if not queue:
            self._queues.pop(group, None)
            return []
        taken = [queue.pop(0)]
        while len(taken) < batch and queue and queue[0].seq == taken[-1].seq + 1:
            taken.append(queue.pop(0))
        return taken

    def forget(self, group: str) -> list[Queued[T]]:
        """``group``'s runner ended abnormally: the group is idle, its waiting deliveries are
        returned to be handed back (never left active with no runner)."""
        return self._queues.pop(group, [])

    def drain(self) -> list[Queued[T]]:
        """Every waiting delivery, to be handed back (the convoy is closing). The groups stay
        active until their runners, finding them empty, leave."""
        drained = [queued for queue in self._queues.values() for queued in queue]
        for queue in self._queues.values():
            queue.clear()
        return drained

    def active(self, group: str) -> bool:
        """True while ``group`` has deliveries waiting or a runner."""
        return group in self._queues
