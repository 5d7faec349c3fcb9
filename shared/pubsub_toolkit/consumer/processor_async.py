"""One message through the consumer-side guarantees, for an ``async def`` handler:
:class:`AsyncMessageProcessor` - :class:`~.processor.MessageProcessor`'s own routing (FIFO gate
for grouped messages, dedup by key for the rest, dead-lettering) run on the event loop over the
async stores (see :mod:`pubsub_toolkit._bridge`).

Users rarely name it: ``MessageProcessor.from_settings(settings, consumer, handler)`` returns
one for an ``async def`` handler, ``Consumer`` runs it on its loop, and
:meth:`~AsyncMessageProcessor.blocking` gives sync callers (the ``functions/consumer``
template, a hand-written loop) the sync processor's call shape on a loop of its own."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from pubsub_toolkit._bridge import SyncDedupStore, awaiting, loop_clock, run_sync
from pubsub_toolkit._loop_thread import LoopThread
from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.gate_async import AsyncFifoGate
from pubsub_toolkit.consumer.processor_sync import SyncMessageProcessor, Wiring
from pubsub_toolkit.consumer.retry import RetryScheduler
from pubsub_toolkit.core.fifo_policy import GateResult
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent_async import AsyncIdempotentProcessor
from pubsub_toolkit.errors import PermanentError
from pubsub_toolkit.message import Message

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
        sync: one blocking call on the loop per such retry, like a dead-letter publish);
        ``clock`` dates it, as :class:`MessageProcessor`'s does."""
        self._clients: list[Any] = []  # the store clients from_settings made (aclose closes)
        self.gate = gate
        self.dedup = dedup
        #: The sync processor this one drives (usable only inside ``run_sync``).
        self.sync = SyncMessageProcessor(
            handler=awaiting(handler),
            dedup=dedup.driving(SyncDedupStore(dedup.store), loop_clock(dedup.clock)),
            gate=gate.sync,
            dead_letters=dead_letters,
            scheduler=scheduler,
            max_attempts=max_attempts,
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
        return await run_sync(self.sync.process, message)

    async def reject(self, message: Message, exc: PermanentError) -> str:
        """Dead-letter ``message`` with the error's reason (see MessageProcessor.reject)."""
        return await run_sync(self.sync.reject, message, exc)

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
