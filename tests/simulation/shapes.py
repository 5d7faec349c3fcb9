"""The consumer's shape: which of the library's entry points the final subscription feeds.

Drawn per schedule from a stream of its own (``shape:SEED``), so a seed's other draws never
change; never together with ``process_batch`` (its own shape). Each drives the real library:

* ``process`` - ``MessageProcessor.process`` (``+batch_handler``: a batch handler), as before;
* ``idempotent_callback`` - every delivery goes to a google-cloud-pubsub-style subscriber
  callback decorated with the public ``@idempotent``: the decorator's own dispatch, key
  stamping, ``DeliveredMessage`` and ack/nack decision run unchanged; the callback calls
  ``message.ack()`` on success; on a failure it raises, or ``nack()``s the transient ones
  (:data:`NACKS`, a third of the schedules each; ``RetryLater`` is always raised);
  ``idempotent_callback_nacks_all`` (``--shape``) always ``nack()``s every failure. The
  received message is the simulated Pub/Sub's delivery; its ``ack()``/``nack()`` is the
  answer the driver returns;
* ``idempotent_cloudevent`` - plain (non-FIFO) deliveries go to a functions-framework-style
  CloudEvent function (a real ``cloudevents`` ``CloudEvent``) decorated with ``@idempotent``:
  return = ack, raise (the handler's error, the decorator's 503) = nack. The decorator's
  CloudEvent path is dedup only (its docs: FIFO order needs a consumer that parks), so grouped
  messages go to ``MessageProcessor.process`` on the same processor, as a ``Consumer`` beside
  the function would;
* ``asyncio`` - ``AsyncMessageProcessor`` with an ``async def`` handler over the library's
  async memory stores (``AsyncMemoryDedupStore``/``AsyncMemoryFifoStore`` wrapping the
  process's faulty store views), its gate's sweeps through ``AsyncFifoGate``. See :func:`drive`
  for how a coroutine runs on the one-threaded virtual clock;
* ``consumer_convoy`` - ``Consumer``'s ``ConvoyDispatcher`` queues each delivery per group and
  runs it on the simulation's events (:mod:`.convoy`).

The one seam: ``@idempotent`` builds its processor from the environment on the first delivery
(real clients); the simulation hands it the processor the ``process`` shape builds over the
world's stores, with the process's clock (:func:`_guard`), and the world's sweeper stands in
for the decorator's sweeper thread.
"""

from __future__ import annotations

import asyncio
import base64
import enum
import random
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from cloudevents.http import CloudEvent

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.cloudevent import message_from_event_data
from pubsub_toolkit.consumer.gate_async import AsyncFifoGate
from pubsub_toolkit.consumer.processor import gate_policy
from pubsub_toolkit.consumer.processor_async import AsyncMessageProcessor
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.decorators import DeliveredMessage, _delivered, idempotent
from pubsub_toolkit.dedup.idempotent_async import AsyncIdempotentProcessor
from pubsub_toolkit.errors import RetryLater, TransientError
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.dedup.memory import AsyncMemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import AsyncMemoryFifoStore
from tests.simulation import components as c
from tests.simulation import convoy
from tests.simulation.faults import FaultPlan, Kind
from tests.simulation.process import Process

T = TypeVar("T")


class Shape(enum.StrEnum):
    PROCESS = "process"
    CALLBACK = "idempotent_callback"
    CALLBACK_NACKS_ALL = "idempotent_callback_nacks_all"  # forced only (--shape): see NACKS
    CLOUDEVENT = "idempotent_cloudevent"
    ASYNCIO = "asyncio"
    CONVOY = "consumer_convoy"


# Each new shape's share of the default mix (the rest: ``process``); modest, so a default
# schedule costs about what it did.
RATES: dict[Shape, float] = {
    Shape.CALLBACK: 0.06,
    Shape.CLOUDEVENT: 0.06,
    Shape.ASYNCIO: 0.08,
    Shape.CONVOY: 0.06,
}


def draw(seed: int, plan: FaultPlan, forced: tuple[str, ...] = ()) -> Shape:
    """The schedule's consumer shape, from its own stream (``forced``: one of these)."""
    rng = random.Random(f"shape:{seed}")
    if plan.has(Kind.PROCESS_BATCH):
        return Shape.PROCESS
    if plan.has(Kind.HANDLER_EXIT) and not forced:
        return Shape.CONVOY  # the shape whose pool thread outlives a BaseException
    if forced:
        return Shape(rng.choice(sorted(forced)))
    roll = rng.random()
    for shape, rate in RATES.items():
        if roll < rate:
            return shape
        roll -= rate
    return Shape.PROCESS


def nacks_every_failure(seed: int, shape: Shape) -> bool:
    """Does the schedule's callback ``nack()`` every failure, a PermanentError included?"""
    if shape is Shape.CALLBACK_NACKS_ALL:
        return True
    return shape is Shape.CALLBACK and _nack_mode(seed) == "nack_all"


def _nack_mode(seed: int) -> str:
    return random.Random(f"shape-nack:{seed}").choice(NACKS)


def build(world: Any, process: Process, shape: Shape) -> c.ConsumerApp:
    """A consumer instance of ``shape`` for ``process``."""
    if shape is Shape.ASYNCIO:
        return _build_async(world, process)
    if shape is Shape.CONVOY:
        return convoy.build(world, process)
    if shape is Shape.PROCESS:
        return c.build_consumer(world, process)
    handle = world.handler_for(process)  # batch is 1 for these shapes (world.py)
    nack = _nack_mode(world.seed)
    if shape in (Shape.CALLBACK, Shape.CALLBACK_NACKS_ALL):
        callback = _callback(handle, "nack_all" if shape is Shape.CALLBACK_NACKS_ALL else nack)
        app = c.build_consumer(world, process, lambda m: callback(_delivered(m)))
        guarded = _guard(callback, app)
        return c.ConsumerApp(app.processor, app.gate, lambda m: _pull(guarded, m))
    app = c.build_consumer(world, process, handle)
    guarded = _guard(_function(handle), app)

    def deliver(message: Message) -> object:
        if attr.FIFO_GROUP in message.attributes:
            return app.processor.process(message)  # the Consumer beside the function
        return guarded(_cloud_event(message))

    return c.ConsumerApp(app.processor, app.gate, deliver)


# --- @idempotent ------------------------------------------------------------------------------


def _guard(handler: Callable[..., Any], app: c.ConsumerApp) -> Callable[[Any], Any]:
    """``@idempotent`` on ``handler``, over ``app``'s processor (see the module docstring)."""
    guarded = idempotent(consumer=c.CONSUMER_ID)(handler)
    guard = guarded.close.__self__  # type: ignore[attr-defined]  # the decorator's Idempotent
    guard._processor = app.processor
    guard._closing.set()  # no sweeper thread: the world sweeps each consumer's gate
    return guarded


# How the callback answers a failure: raise it, ``nack()`` the transient ones (its dependency
# down) and raise the rest, or ``nack()`` every failure (``except Exception: message.nack()``).
# The last found a defect: ``nack()`` raises NackRequested, a TransientError the gate never
# counted, so a poison message in a FIFO group was retried for ever with no ALERT (seeds 27,
# 44, 51, 63, 68, 83 of ``idempotent_callback_nacks_all``); a nack now counts as an attempt
# (``errors.RedeliveryRequested``).
NACKS = ("raise", "nack_transient", "nack_all")


def _callback(handle: Callable[[Message], None], nack: str) -> Callable[[DeliveredMessage], None]:
    """A subscriber callback written as users write them: ``ack()`` when done."""

    def callback(message: DeliveredMessage) -> None:
        try:
            handle(message)
        except RetryLater:
            raise  # the toolkit's own answer: never a nack
        except Exception as exc:
            transient = isinstance(exc, ConnectionError | TransientError)
            if nack == "raise" or (nack == "nack_transient" and not transient):
                raise
            message.nack()  # raises NackRequested: the decorator nacks
            raise AssertionError("nack() returned") from exc
        message.ack()

    return callback


class Received:
    """The simulated Pub/Sub's delivery to a streaming-pull callback: the message and the
    answer the callback's decorator gives (``ack``/``nack``; ``drop`` leaves it to the ack
    deadline)."""

    def __init__(self, message: Message) -> None:
        self.data = message.data
        self.attributes = dict(message.attributes)
        self.message_id = message.message_id
        self.publish_time = message.publish_time
        self.ordering_key = message.ordering_key
        self.answer: str | None = None

    def ack(self) -> None:
        self.answer = self.answer or "ack"

    def nack(self) -> None:
        self.answer = self.answer or "nack"

    def modify_ack_deadline(self, seconds: int) -> None:
        return None

    def drop(self) -> None:
        self.answer = self.answer or "drop"


class Nacked(Exception):
    """The decorator nacked (or dropped) the delivery: the driver answers nack."""


def _pull(guarded: Callable[[Any], Any], message: Message) -> str:
    received = Received(message)
    guarded(received)
    if received.answer != "ack":
        raise Nacked(f"the decorated callback answered {received.answer}")
    return "ack"


def _function(handle: Callable[[Message], None]) -> Callable[[Any], str]:
    """A CloudEvent function (functions-framework's call shape): return = ack."""

    def function(cloud_event: Any) -> str:
        message = message_from_event_data(cloud_event.data)
        handle(message)
        return f"handled {message.message_id}"

    return function


def _cloud_event(message: Message) -> CloudEvent:
    """The Eventarc Pub/Sub event functions-framework would hand the function."""
    data = {
        "message": {
            "data": base64.b64encode(message.data).decode(),
            "attributes": dict(message.attributes),
            "messageId": message.message_id,
            "publishTime": attr.format_time(message.publish_time) if message.publish_time else None,
        },
        "subscription": "projects/sim/subscriptions/final",
    }
    source = "//pubsub.googleapis.com/" + c.FINAL
    return CloudEvent(
        {"type": "google.cloud.pubsub.topic.v1.messagePublished", "source": source}, data
    )


# --- asyncio ----------------------------------------------------------------------------------


def drive(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to its end on this thread, without an event loop.

    The simulation is one thread on a virtual clock, and a fault may run another delivery
    *inside* a store call; an asyncio loop cannot run inside a running one. Nothing here needs
    one: the async memory stores never suspend, the process's clock sleeps in virtual time
    (the async drivers keep a non-system clock's own sleep), and ``asyncio.sleep(0)`` (the
    handler's) yields ``None`` - resumed at once, as a loop with nothing else to run would. Any
    other suspension (a future) is a bug in the model: it raises.
    """
    while True:
        try:
            yielded = coroutine.send(None)
        except StopIteration as done:
            result: T = done.value
            return result
        if yielded is not None:
            coroutine.close()
            raise RuntimeError(f"the coroutine awaited {yielded!r}: nothing here suspends")


class _DrivenGate:
    """``AsyncFifoGate``'s sweeps as the world's sweeper calls a gate."""

    def __init__(self, gate: AsyncFifoGate) -> None:
        self._gate = gate

    def groups(self) -> list[str]:
        return drive(self._gate.groups())

    def sweep(self, group: str) -> Any:
        return drive(self._gate.sweep(group))


def _build_async(world: Any, process: Process) -> c.ConsumerApp:
    b = world.boundaries
    handle = world.handler_for(process)

    async def handler(message: Message) -> None:
        await asyncio.sleep(0)  # a suspension point, as a real async handler has
        handle(message)

    log = DecisionLog(c.CONSUMER_ID)
    sink = b.sink(process)
    dead_letters = (
        DeadLetterer(sink, c.DEAD_LETTERS, log) if world.config.gate_dead_letters else None
    )
    gate = AsyncFifoGate(
        AsyncMemoryFifoStore(store=b.store_view(process, "fifo")),
        consumer=c.CONSUMER_ID,
        handler=handler,
        dead_letters=dead_letters,
        policy=gate_policy(c.consumer_settings(world)),
        clock=process.clock,
        log=log,
    )
    dedup = AsyncIdempotentProcessor(
        AsyncMemoryDedupStore(store=b.store_view(process, "dedup")),
        namespace=c.CONSUMER_ID,
        lease=c.lease(world),
        ttl=c.TTL,
        log=log,
        clock=process.clock,
    )
    processor = AsyncMessageProcessor(
        handler=handler,
        dedup=dedup,
        gate=gate,
        dead_letters=dead_letters,
        scheduler=c.retry_scheduler(world, process),
        clock=process.clock,  # a RetryLater's due time on the virtual clock
    )
    return c.ConsumerApp(processor, _DrivenGate(gate), lambda m: drive(processor.process(m)))
