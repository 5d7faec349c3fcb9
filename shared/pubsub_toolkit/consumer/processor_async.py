"""One message through the consumer-side guarantees, for an ``async def`` handler:
:class:`AsyncMessageProcessor` - :class:`~.processor.MessageProcessor`'s routing (FIFO gate for
grouped messages, dedup by key for the rest, a RetryLater re-scheduled, dead-lettering), the one
protocol of :mod:`pubsub_toolkit.core.process`, driven on the event loop: the gate
(:class:`~.gate_async.AsyncFifoGate`), the dedup processor
(:class:`~pubsub_toolkit.dedup.idempotent_async.AsyncIdempotentProcessor`) and the handler
awaited in the caller's task, the blocking clients - the Cloud Tasks re-schedule and the
dead-letter publish - in a worker thread (``asyncio.to_thread``), so nothing blocks the loop.
No greenlet is involved.

Users rarely name it: ``MessageProcessor.from_settings(settings, consumer, handler)`` returns
one for an ``async def`` handler, ``Consumer`` runs it on its loop, and
:meth:`~AsyncMessageProcessor.blocking` gives sync callers (the ``functions/consumer``
template, a hand-written loop) the sync processor's call shape on a loop of its own."""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, assert_never

from pubsub_toolkit import tracing
from pubsub_toolkit._loop_thread import LoopThread
from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.gate_async import AsyncFifoGate, handler_call, off_loop
from pubsub_toolkit.consumer.processor_sync import Wiring, publishable_retry
from pubsub_toolkit.consumer.retry import RetryScheduler
from pubsub_toolkit.core import process as protocol
from pubsub_toolkit.core.fifo_policy import GateResult
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent_async import AsyncIdempotentProcessor
from pubsub_toolkit.errors import PermanentError
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import HANDLER_DURATION

T = TypeVar("T")
AsyncHandler = Callable[[Message], Awaitable[object]]


class AsyncMessageProcessor:
    """Applies the gate or dedup to one message and awaits the user's ``async def`` handler."""

    def __init__(
        self,
        *,
        handler: AsyncHandler,
        dedup: AsyncIdempotentProcessor,
        gate: AsyncFifoGate,
        dead_letters: DeadLetterer | None = None,
        scheduler: RetryScheduler | None = None,
        max_attempts: int = 5,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``scheduler`` re-schedules a RetryLater outside FIFO groups (its Cloud Tasks call is
        sync: run in a worker thread, like a dead-letter publish); ``clock`` dates it, as
        :class:`MessageProcessor`'s does."""
        self._clients: list[Any] = []  # the store clients from_settings made (aclose closes)
        self._handler = handler
        self.gate = gate
        self.dedup = dedup
        self._dead_letters = dead_letters
        self._scheduler = scheduler
        self._max_attempts = max_attempts
        self._clock = clock
        # Dead-letters a mismatching copy once, however often it is redelivered.
        self._rejections = dedup.sibling(f"{dedup.namespace}-rejected", log=dedup.log)
        if gate.rejections is None:
            gate.rejections = self._rejections  # the gate's dead letters also happen once
        # The protocol's view of this processor, made once (per delivery it was a measurable
        # share of the sync path's cost): its parts are fixed once constructed.
        self._scope = protocol.Scope(
            consumer=dedup.namespace,
            max_attempts=max_attempts,
            dead_letters=dead_letters is not None,
            scheduler=scheduler is not None,
            batch=False,  # batch handlers are sync functions
            log=dedup.log,
            clock=clock,
        )

    @classmethod
    def from_settings(
        cls, settings: Settings, consumer: ConsumerSettings, handler: AsyncHandler
    ) -> AsyncMessageProcessor:
        """Wire the async stores (one client for both; made by the stores' one factory, as the
        sync processor's: see :func:`~pubsub_toolkit.stores.factory.async_stores_from_settings`),
        gate, dead-lettering and dedup - the parts besides the stores are the sync
        processor's :class:`~.processor_sync.Wiring`."""
        from pubsub_toolkit.stores.factory import async_stores_from_settings

        stores = async_stores_from_settings(settings)
        wired = Wiring.of(settings, consumer)
        gate = AsyncFifoGate(
            stores.fifo,
            consumer=wired.consumer,
            handler=handler,
            dead_letters=wired.dead_letters,
            policy=wired.policy,
            log=wired.log,
        )
        dedup = AsyncIdempotentProcessor(
            stores.dedup,
            namespace=wired.consumer,
            lease=wired.lease,
            ttl=wired.ttl,
            log=wired.log,
        )
        processor = cls(handler=handler, dedup=dedup, gate=gate, **wired.processor())
        processor._clients = [] if stores.client is None else [stores.client]
        return processor

    async def process(self, message: Message) -> str:
        """Handle ``message``; return the outcome (ack). Raises TransientError to nack."""
        with tracing.handling(message, self.dedup.namespace, hop="consumer") as span:
            outcome = await self._run(protocol.process(self._scope, message), self._timed)
            if span is not None:
                span.set_attribute(tracing.OUTCOME, outcome)
            return outcome

    async def _timed(self, argument: object) -> object:
        started = time.perf_counter()
        result = await self._handler(argument)  # type: ignore[arg-type]  # a Message here
        self.dedup.log.metrics.observe(HANDLER_DURATION, time.perf_counter() - started)
        return result

    async def run_once(
        self, message: Message, call: Callable[[], Awaitable[object]]
    ) -> tuple[str, str | None]:
        """The plain path with ``call`` as the effect (see MessageProcessor.run_once): once
        per dedup key, a RetryLater re-scheduled; returns (outcome, stored result)."""
        return await self._run(protocol.run_once(self._scope, message), lambda _: call())

    async def reject(self, message: Message, exc: PermanentError) -> str:
        """Dead-letter ``message`` with the error's reason (see MessageProcessor.reject)."""
        return await self._run(protocol.reject(self._scope, message, exc), self._timed)

    # --- the driver ----------------------------------------------------------------------

    async def _run(self, step: protocol.Step[T], call: Callable[[object], Awaitable[object]]) -> T:
        """Drive one protocol of :mod:`~pubsub_toolkit.core.process` on this loop; ``call`` is
        the handler (the decorator's call on its path)."""
        return await protocol.run_async(step, lambda effect: self._perform(effect, call))

    async def _perform(
        self, effect: protocol.Effect, call: Callable[[object], Awaitable[object]]
    ) -> Any:
        match effect:
            case protocol.Deliver(message, group, seq):
                return await self.gate.deliver(message, group, seq)
            case protocol.CallHandler(argument):
                return await handler_call(call(argument))
            case protocol.RunOnce(key, fingerprint, context, run):
                return await self.dedup.process(
                    key, fingerprint, lambda: self._run(run, call), context=context
                )
            case protocol.RejectOnce(once, digest, run):
                return await self._rejections.process(once, digest, lambda: self._run(run, call))
            case protocol.DeadLetter():
                return await off_loop(lambda: self._dead_letter(effect))
            case protocol.ScheduleRetry():
                return await off_loop(lambda: self._schedule(effect))
            case protocol.DeliverBatch():
                raise TypeError("the asyncio processor has no batch mode")
            case protocol.Process(message):
                return await self.process(message)
            case _:
                assert_never(effect)

    def _dead_letter(self, effect: protocol.DeadLetter) -> str:
        """The dead-letter publish (a blocking client: run off the loop)."""
        assert self._dead_letters is not None  # the protocol asks only with a topic
        return self._dead_letters.send(
            effect.message, effect.reason, effect.detail, dedup_key=effect.dedup_key
        )

    def _schedule(self, effect: protocol.ScheduleRetry) -> str:
        """The Cloud Tasks re-schedule (a blocking client: run off the loop)."""
        assert self._scheduler is not None  # the protocol asks only with a delay path
        copy = publishable_retry(effect)
        return self._scheduler.schedule(copy, effect.due, effect.dedup_key)

    async def aclose(self) -> None:
        """Close the store clients :meth:`from_settings` made (on the loop that used them)."""
        while self._clients:
            client = self._clients.pop()
            closed = client.aclose() if hasattr(client, "aclose") else client.close()
            if inspect.isawaitable(closed):
                await closed

    def blocking(self) -> BlockingProcessor:
        """This processor with :class:`MessageProcessor`'s sync call shape, run on a loop
        thread of its own (for sync callers; never call it from a running loop)."""
        return BlockingProcessor(self)


class BlockingProcessor:
    """An :class:`AsyncMessageProcessor` for sync callers: ``process``, ``reject`` and
    ``gate.sweep``/``gate.groups`` block until done on one background loop, which the async
    stores' clients live on (they bind to the loop that first uses them)."""

    def __init__(self, processor: AsyncMessageProcessor) -> None:
        self.processor = processor
        self.loop = LoopThread("async-processor")
        self.gate = _BlockingGate(processor.gate, self.loop)

    def process(self, message: Message) -> str:
        """Handle ``message``; return the outcome (ack). Raises TransientError to nack."""
        return self.loop.run(self.processor.process(message))

    def reject(self, message: Message, exc: PermanentError) -> str:
        """Dead-letter ``message`` with the error's reason."""
        return self.loop.run(self.processor.reject(message, exc))

    def close(self, timeout: float = 30.0) -> None:
        """Close the store clients and stop the background loop."""
        if self.loop.started:
            self.loop.run(self.processor.aclose(), timeout)
        self.loop.stop(timeout)


class _BlockingGate:
    def __init__(self, gate: AsyncFifoGate, loop: LoopThread) -> None:
        self._gate, self._loop = gate, loop

    def sweep(self, group: str) -> GateResult:
        return self._loop.run(self._gate.sweep(group))

    def groups(self) -> list[str]:
        return self._loop.run(self._gate.groups())
