"""``@idempotent`` above an ``async def``: the decorator's two call shapes on an event loop.

* **functions-framework's ASGI server** (``@functions_framework.aio.cloud_event`` below
  ``@idempotent``): the guard is an ``async def`` awaited on the framework's loop - the async
  stores' clients are made on it at the first delivery. A duplicate returns the stored result;
  a key being run elsewhere raises Starlette's ``HTTPException(503)``, which Starlette answers
  without an ERROR traceback (a quiet redelivery); a handler error is a 500 and a redelivery.
* **a google-cloud-pubsub subscriber callback**: the client calls the guard on its threads; the
  guard hands the message to a background event loop owned by the decorated object (started on
  the first delivery, stopped by ``close()``) and returns. There the message goes through
  :class:`~pubsub_toolkit.consumer.processor_async.AsyncMessageProcessor` (dedup, or the async
  FIFO gate plus a sweeper task for grouped messages) and is acked or nacked when it is done.

Which shape a coroutine function gets is decided when it is decorated: one functions-framework
registered as a CloudEvent function (``functions_framework.aio.cloud_event`` or
``functions_framework.cloud_event`` below) gets the ``async def``; anything else is a callback
(a plain function; a CloudEvent reaching it from a sync server is run on its loop, blocking).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from pubsub_toolkit._guard import Guard, Guarded
from pubsub_toolkit._guard import delivered as _delivered
from pubsub_toolkit._loop_thread import LoopThread
from pubsub_toolkit.consumer._settle import sweep_until_async
from pubsub_toolkit.core import consume
from pubsub_toolkit.errors import ClaimInProgressError
from pubsub_toolkit.message import Message

if TYPE_CHECKING:
    from pubsub_toolkit.consumer.processor_async import AsyncMessageProcessor

logger = logging.getLogger("pubsub_toolkit.decorators")


def decorate_async(handler: Callable[..., Any], **options: Any) -> Guarded:
    """The guard for a coroutine function (see the module for which shape it gets)."""
    guard = AsyncIdempotent(handler, **options)
    if _registered_cloud_event(handler):

        @functools.wraps(handler)
        async def guarded_event(cloud_event: Any) -> Any:
            try:
                return await guard.on_cloud_event(cloud_event)
            except ClaimInProgressError:
                from starlette.exceptions import HTTPException  # functions_framework.aio's

                raise HTTPException(503, detail=consume.IN_PROGRESS) from None

        guarded_event.close = guard.close  # type: ignore[attr-defined]
        guarded_event.aclose = guard.aclose  # type: ignore[attr-defined]
        return cast(Guarded, guarded_event)

    @functools.wraps(handler)
    def guarded(delivery: Any) -> Any:
        if consume.is_subscriber_message(delivery):
            guard.on_pubsub_message(delivery)
            return None
        try:  # a CloudEvent from a sync server (Flask): run it on the guard's loop
            return guard.loop.run(guard.on_cloud_event(delivery))
        except ClaimInProgressError:
            import flask

            flask.abort(503, description=consume.IN_PROGRESS)

    guarded.close = guard.close  # type: ignore[attr-defined]
    return cast(Guarded, guarded)


def _registered_cloud_event(handler: Callable[..., Any]) -> bool:
    registry = sys.modules.get("functions_framework._function_registry")
    if registry is None:
        return False
    name = getattr(handler, "__name__", None)
    kind = registry.REGISTRY_MAP.get(name)
    return bool(kind == registry.CLOUDEVENT_SIGNATURE_TYPE)


class AsyncIdempotent(Guard):
    """The guard behind a decorated ``async def`` (keys and settings as the sync guard's)."""

    def __init__(self, handler: Callable[..., Any], **options: Any) -> None:
        super().__init__(handler, **options)
        self.loop = LoopThread("idempotent-loop")
        self._async_processor: AsyncMessageProcessor | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweep_task: asyncio.Task[None] | None = None

    def _processor_here(self) -> AsyncMessageProcessor:
        """The async processor, made on the running loop the first time (its clients bind to
        that loop: the framework's, or this guard's own for callbacks)."""
        if self._async_processor is None:
            from pubsub_toolkit.consumer.processor_async import AsyncMessageProcessor

            settings, consumer = self._resolved_settings()

            async def handle(message: Message) -> object:
                return await self._handler(_delivered(message))

            self._async_processor = AsyncMessageProcessor.from_settings(settings, consumer, handle)
        return self._async_processor

    # --- the two call shapes: the core decides (core.consume), this drives it on the loop ---

    async def on_cloud_event(self, cloud_event: Any) -> Any:
        """Returning acks, raising redelivers; ClaimInProgressError while held elsewhere."""
        self._processor_here()  # a missing setting raises here, before the event is read
        protocol = self._event_protocol(cloud_event)
        return await consume.run_async(protocol, lambda e: self._perform(e, cloud_event))

    def on_pubsub_message(self, received: Any) -> None:
        """Called on the client's threads: schedule the message on the loop, return."""
        if self._closing.is_set():
            received.nack()
            return
        self.loop.loop.call_soon_threadsafe(self._spawn, received)

    def _spawn(self, received: Any) -> None:
        task = asyncio.get_running_loop().create_task(self._handle(received))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, received: Any) -> None:
        try:
            self._processor_here()
            protocol = self._delivery_protocol(received)
            await consume.run_async(protocol, lambda e: self._perform(e, None))
        except Exception as exc:
            self._answer(received, exc)
        else:
            self._answer(received, None)

    async def _perform(self, effect: consume.Effect, cloud_event: Any) -> object:
        """Perform one effect of a delivery's protocol; ``cloud_event``: the CloudEvent the
        handler takes (None: a subscriber callback, which takes a DeliveredMessage)."""
        processor = self._processor_here()
        if type(effect) is consume.Process:
            return await processor.process(effect.message)
        if type(effect) is consume.RunOnce:
            ran: dict[str, Any] = {}

            async def call() -> object:
                ran["value"] = await self._handler(cloud_event)
                return ran["value"]

            _, stored = await processor.run_once(effect.message, call)
            return consume.Ran("value" in ran, ran.get("value"), stored)
        if type(effect) is consume.Reject:
            return await processor.reject(effect.message, effect.error)
        if type(effect) is consume.Unguarded:
            logger.warning(consume.UNGUARDED)
            handed = _delivered(effect.message) if cloud_event is None else cloud_event
            return await self._handler(handed)
        assert type(effect) is consume.StartSweeper
        if self._sweep_task is None:
            self._sweep_task = asyncio.create_task(self._sweep(processor))
        return None

    async def _sweep(self, processor: AsyncMessageProcessor) -> None:
        # Parked heads whose backoff ran out and gap timeouts happen between messages.
        await sweep_until_async(processor.gate, self._sweep_interval, self._closing.is_set, logger)

    async def _drain(self, timeout: float) -> None:
        if self._sweep_task is not None:
            self._sweep_task.cancel()
            await asyncio.gather(self._sweep_task, return_exceptions=True)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)
        if self._async_processor is not None:
            await self._async_processor.gate.release_held()  # held leases, given back
            await self._async_processor.aclose()

    async def aclose(self) -> None:
        """Close the store clients made on the caller's loop (a CloudEvent function's, e.g. at
        the ASGI app's shutdown)."""
        if self._async_processor is not None:
            await self._async_processor.aclose()

    def close(self, timeout: float = 30.0) -> None:
        """Stop taking messages, let running ones finish (up to ``timeout``), stop the loop."""
        self._closing.set()
        if self.loop.started:
            self.loop.run(self._drain(timeout), timeout=timeout + 5)
            self.loop.stop(timeout)
