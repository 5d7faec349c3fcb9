"""`MessageProcessor`: one message through the consumer-side guarantees, for a sync or an
``async def`` handler - the choice between the two drivers, made above both.

:class:`MessageProcessor` is :class:`~.processor_sync.SyncMessageProcessor` (the FIFO gate or
dedup, then the handler; see :mod:`.processor_sync` for what it does with each message) with the
one constructor that picks: :meth:`MessageProcessor.from_settings` returns an
:class:`~.processor_async.AsyncMessageProcessor` for an ``async def`` handler. Neither driver
imports this module, so the async one reuses the sync one's parts without a cycle.
"""

from __future__ import annotations

import inspect
from typing import cast, overload

from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.processor_async import AsyncHandler, AsyncMessageProcessor
from pubsub_toolkit.consumer.processor_sync import (  # importable from here, as before
    BatchHandler,
    FifoAddress,
    Handler,
    SyncMessageProcessor,
    fifo_address,
    gate_policy,
)
from pubsub_toolkit.errors import ConfigurationError

__all__ = [
    "AsyncHandler",
    "BatchHandler",
    "FifoAddress",
    "Handler",
    "MessageProcessor",
    "fifo_address",
    "gate_policy",
]


class MessageProcessor(SyncMessageProcessor):
    """Applies the gate or dedup to one message and runs the user's handler."""

    @overload
    @classmethod
    def from_settings(  # type: ignore[overload-overlap]  # async first: the narrower
        cls, settings: Settings, consumer: ConsumerSettings, handler: AsyncHandler
    ) -> AsyncMessageProcessor: ...

    @overload
    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        consumer: ConsumerSettings,
        handler: Handler | BatchHandler,
        *,
        batch: int = 1,
    ) -> MessageProcessor: ...

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        consumer: ConsumerSettings,
        handler: Handler | BatchHandler | AsyncHandler,
        *,
        batch: int = 1,
    ) -> MessageProcessor | AsyncMessageProcessor:
        """Wire the store, gate, dead-lettering and dedup from settings (clients made once).
        For an ``async def`` handler: an ``AsyncMessageProcessor`` on the async stores, which
        ``Consumer`` runs on an event loop (``blocking()``: this class's sync call shape).

        ``batch`` > 1 (sync handlers): the handler takes a list - up to ``batch`` consecutive
        messages of one FIFO group, advanced past with one state write, or a list of one for
        a message outside groups. It must be all or nothing (one transaction): a failed batch
        runs again one message at a time."""
        call = getattr(handler, "__call__", None)  # noqa: B004 - an object's async __call__
        if inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call):
            if batch != 1:
                raise ConfigurationError("batch handlers are sync functions (def, not async def)")
            return AsyncMessageProcessor.from_settings(
                settings, consumer, cast(AsyncHandler, handler)
            )
        return cls._wired(settings, consumer, cast(Handler, handler), batch=batch)
