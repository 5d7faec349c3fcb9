"""The ``consumer_convoy`` shape: ``Consumer``'s dispatch - the real ``ConvoyDispatcher`` - run by
the simulation's events instead of threads.

``Consumer`` hands each delivery to its convoy: queued per FIFO group in number order, one
runner per group (the group *active* while it has work, freed when its queue is empty), other
groups and plain messages beside it; the delivery is acked or nacked when its turn has run. Here
the dispatcher's pool is the event loop: each task the convoy submits is an event now, which
another event may interleave with (a yield point inside a store call runs it nested), as
another pool thread would. The broker's delivery is answered ``DEFERRED`` and settled when the
work ran (:meth:`~tests.simulation.pubsub.Subscription.settler`); the convoy's ``cancel`` - the
net when work raises - is a nack, or nothing from a crashed process. A crash leaves the old
instance's queued work to run against a dead process: no answer, Pub/Sub's deadline decides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.consumer.convoy import ConvoyDispatcher
from pubsub_toolkit.errors import PermanentError
from pubsub_toolkit.message import Message
from tests.simulation import components as c
from tests.simulation.process import HandlerExit, Process
from tests.simulation.pubsub import Answer

CONCURRENCY = 4  # the convoy's pool size (unused: events have no limit, as the model's pool)


class EventPool:
    """A ``ThreadPoolExecutor``'s ``submit`` on the simulation's event loop."""

    def __init__(self, world: Any, process: Process) -> None:
        self._world, self._process = world, process

    def submit(self, fn: Callable[..., object], *args: object) -> None:
        self._world.loop.after(
            0.0, f"{self._process.name} convoy task", lambda: self._run(fn, args)
        )

    def _run(self, fn: Callable[..., object], args: tuple[object, ...]) -> None:
        try:
            fn(*args)
        except HandlerExit as exc:
            # The pool thread's task ended; its future holds the exception, the thread lives.
            self._world.trace.add(f"{self._process.name}: convoy task ended by {exc!r}")


def build(world: Any, process: Process) -> c.ConsumerApp:
    """A ``MessageProcessor`` consumer whose deliveries go through a convoy."""
    app = c.build_consumer(world, process)
    convoy = ConvoyDispatcher(CONCURRENCY)
    convoy._pool.shutdown(wait=False)  # never started a thread: no submit reached it
    convoy._pool = EventPool(world, process)  # type: ignore[assignment]
    slot_index = process.slot

    def submit(message: Message, attempt: int, settle: Callable[[Answer], None]) -> Answer:
        group = message.attributes.get(attr.FIFO_GROUP)
        try:
            seq = attr.parse_fifo_seq(message.attributes.get(attr.FIFO_SEQ, "0"))
        except PermanentError:
            seq = 0  # the processor dead-letters it when its turn comes

        def work() -> None:
            slot = world.consumers.slots[slot_index]
            mine = slot if slot.process is process else None
            world.drivers.in_convoy_task.append(True)
            try:
                answer = world.drivers.consume(mine, message, attempt) if mine else Answer.NONE
            except HandlerExit:
                # Unanswered: the streaming client stops extending its deadline, Pub/Sub
                # redelivers it. What was queued behind it is the convoy's to hand back.
                settle(Answer.NONE)
                raise
            finally:
                world.drivers.in_convoy_task.pop()
            settle(answer)

        def cancel() -> None:
            settle(Answer.NACK if process.alive else Answer.NONE)

        world.trace.add(f"{process.name}: convoy queues {message.message_id} ({group}#{seq})")
        convoy.submit(group, seq, work, cancel)
        return Answer.DEFERRED

    return c.ConsumerApp(app.processor, app.gate, app.deliver, submit)
