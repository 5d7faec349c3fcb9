"""One message through the consumer-side guarantees, for an ``async def`` handler:
:class:`AsyncMessageProcessor` - :class:`~.processor.MessageProcessor`'s own routing (FIFO gate
for grouped messages, dedup by key for the rest, dead-lettering) run on the event loop over the
async stores (see :mod:`pubsub_toolkit._bridge`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from pubsub_toolkit._bridge import awaiting, run_sync
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.gate_async import AsyncFifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor, gate_policy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent_async import AsyncIdempotentProcessor
from pubsub_toolkit.errors import ConfigurationError, PermanentError
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog

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
    ) -> None:
        self.gate = gate
        self.dedup = dedup
        #: The sync processor this one drives (usable only inside ``run_sync``).
        self.sync = MessageProcessor(
            handler=awaiting(handler), dedup=dedup.sync, gate=gate.sync, dead_letters=dead_letters
        )

    @classmethod
    def from_settings(
        cls, settings: Settings, consumer: ConsumerSettings, handler: AsyncHandler
    ) -> AsyncMessageProcessor:
        """Wire the async stores (one client for both), gate, dead-lettering and dedup."""
        from pubsub_toolkit.producer.sink import PubSubSink

        dedup_store, fifo_store = async_stores(settings)
        log = DecisionLog(consumer.consumer_id)
        dead_letters = DeadLetterer(PubSubSink(), settings.dead_letter_topic, log)
        gate = AsyncFifoGate(
            fifo_store,
            consumer=consumer.consumer_id,
            handler=handler,
            dead_letters=dead_letters,
            policy=gate_policy(consumer, completed_retention=settings.dedup_ttl),
            log=log,
        )
        dedup = AsyncIdempotentProcessor(
            dedup_store,
            namespace=consumer.consumer_id,
            lease=settings.dedup_lease,
            ttl=settings.dedup_ttl,
            log=log,
        )
        return cls(handler=handler, dedup=dedup, gate=gate, dead_letters=dead_letters)

    async def process(self, message: Message) -> str:
        """Handle ``message``; return the outcome (ack). Raises TransientError to nack."""
        return await run_sync(self.sync.process, message)

    async def reject(self, message: Message, exc: PermanentError) -> str:
        """Dead-letter ``message`` with the error's reason (see MessageProcessor.reject)."""
        return await run_sync(self.sync.reject, message, exc)


def async_stores(settings: Settings) -> tuple[Any, Any]:
    """The async dedup store and FIFO store of ``settings.store_backend``, on one client."""
    if settings.store_backend == "redis":
        from pubsub_toolkit.stores.dedup.redis_async import AsyncRedisDedupStore, connect_async
        from pubsub_toolkit.stores.fifo_state.redis_async import AsyncRedisFifoStore

        if not settings.redis_url:
            raise ConfigurationError("store_backend redis needs redis_url (REDIS_URL)")
        client = connect_async(settings.redis_url, needed_by="the async Redis stores")
        return AsyncRedisDedupStore(client), AsyncRedisFifoStore(client)
    if settings.store_backend == "firestore":
        from google.cloud import firestore

        from pubsub_toolkit.stores.dedup.firestore_async import AsyncFirestoreDedupStore
        from pubsub_toolkit.stores.fifo_state.firestore_async import AsyncFirestoreFifoStore

        client = firestore.AsyncClient(database=settings.firestore_database)
        return (
            AsyncFirestoreDedupStore(client, collection=settings.dedup_collection),
            AsyncFirestoreFifoStore(client),
        )
    from pubsub_toolkit.stores.dedup.memory import AsyncMemoryDedupStore
    from pubsub_toolkit.stores.fifo_state.memory import AsyncMemoryFifoStore

    return AsyncMemoryDedupStore(), AsyncMemoryFifoStore()
