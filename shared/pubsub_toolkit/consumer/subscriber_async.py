"""`AsyncConsumer`: streaming pull into one event loop, for ``async def`` handlers.

    async with AsyncConsumer(subscription, AsyncMessageProcessor(...), concurrency=64) as c:
        await c.result()  # until stop(); raises what ended the stream (e.g. NotFound)

google-cloud-pubsub delivers on its own threads; each callback only hands the message to the
loop (``call_soon_threadsafe``) and returns. On the loop, an **asyncio convoy** keeps each group
serial in ``fifo_seq`` order (one task per active group drains that group's sorted queue),
groups and ungrouped messages run concurrently up to ``concurrency`` at once (a semaphore), and
each message is acked or nacked on the client's own message object when it is done (both are
non-blocking, thread-safe calls). A **sweeper task** runs the gate's periodic work for groups
this process is not busy with. **Graceful stop**: new deliveries and queued ones are nacked,
running ones finish and are acked, then the stream is closed. ``await result()`` waits for
that stop, or raises the error that ended the stream on its own (logged at ERROR when it
happens: see :mod:`._stream_end`).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pubsub_toolkit.consumer._settle import (
    Consuming,
    OutcomeListener,
    sweep_until_async,
    to_message,
)
from pubsub_toolkit.consumer._stream_end import StreamEnd, close_stream
from pubsub_toolkit.consumer.processor_sync import fifo_route
from pubsub_toolkit.core import consume
from pubsub_toolkit.core.convoy import GroupQueues
from pubsub_toolkit.core.fifo_policy import STREAMING_LEASE_HOLD
from pubsub_toolkit.message import Message

if TYPE_CHECKING:
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    from pubsub_toolkit.consumer.processor_async import AsyncMessageProcessor

logger = logging.getLogger(__name__)


class AsyncConsumer:
    """Streaming pull + an asyncio convoy + the async processor's guarantees."""

    def __init__(
        self,
        subscription: str,
        processor: AsyncMessageProcessor,
        *,
        concurrency: int = 64,
        max_outstanding: int = 1000,
        sweep_interval: timedelta = timedelta(seconds=1),
        subscriber: pubsub_v1.SubscriberClient | None = None,
        on_outcome: OutcomeListener | None = None,
    ) -> None:
        self.subscription = subscription
        self._processor = processor
        # Hold a group's lease between its deliveries (see Consumer), unless the settings chose.
        processor.gate.use_lease_hold(STREAMING_LEASE_HOLD)
        self._concurrency = concurrency
        self._max_outstanding = max_outstanding
        self._sweep_interval = sweep_interval.total_seconds()
        self._subscriber = subscriber
        self._on_outcome = on_outcome
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots: asyncio.Semaphore | None = None
        self._queues: GroupQueues[tuple[Any, Message]] = GroupQueues()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False
        self._stream: Any = None
        self._sweeper: asyncio.Task[None] | None = None
        self.end = StreamEnd(subscription)  # how the stream ended (Consumer's result() too)

    async def start(self) -> None:
        """Open the stream and start the sweeper on the running loop; returns at once."""
        from google.cloud import pubsub_v1  # type: ignore[attr-defined]

        self._loop = asyncio.get_running_loop()
        self._slots = asyncio.Semaphore(self._concurrency)
        if self._subscriber is None:
            self._subscriber = pubsub_v1.SubscriberClient()
        flow = pubsub_v1.types.FlowControl(max_messages=self._max_outstanding)
        self._stream = self._subscriber.subscribe(
            self.subscription, self._on_message, flow_control=flow
        )
        self.end.watch(self._stream, lambda: self._closing)
        self._sweeper = asyncio.create_task(self._sweep_loop(), name="fifo-sweeper")

    def stream_error(self) -> BaseException | None:
        """The error that ended the stream (e.g. a missing subscription), if it ended."""
        return self.end.error()

    async def result(self, timeout: float | None = None) -> None:
        """Wait until the consumer ends, like an awaited future: return once :meth:`stop`
        finished; raise the error that ended the stream on its own - NotFound for a missing
        subscription, PermissionDenied, ... (logged at ERROR when it happened). TimeoutError
        after ``timeout`` seconds."""
        if self._loop is None and not self.end.future.done():
            self.end.result(0)  # not started: its RuntimeError
        # Shielded: a caller's timeout or cancellation must not cancel the end itself.
        ended = asyncio.shield(asyncio.wrap_future(self.end.future))
        await asyncio.wait_for(ended, timeout)

    async def stop(self, timeout: float = 30.0) -> bool:
        """Stop gracefully; True when every in-flight message finished within ``timeout``."""
        if self._closing:
            return True  # stopped already (or stopping)
        try:
            return await self._stop(timeout)
        finally:
            self.end.stopped()

    async def _stop(self, timeout: float) -> bool:
        return await consume.run_async(consume.graceful_stop(timeout), self._stopping)

    async def _stopping(self, effect: consume.StopEffect) -> object:
        """Perform one step of :func:`~pubsub_toolkit.core.consume.graceful_stop`."""
        if isinstance(effect, consume.RefuseNew):
            self._closing = True
        elif isinstance(effect, consume.Drain):
            for waiting in self._queues.drain():
                received, _message = waiting.item
                received.nack()
            if self._tasks:
                _, pending = await asyncio.wait(set(self._tasks), timeout=effect.timeout)
                return not pending
            return True
        elif isinstance(effect, consume.CloseStream) and self._stream is not None:
            # The client's shutdown blocks (it joins its own threads): not on the loop.
            await asyncio.to_thread(close_stream, self._stream, effect.timeout)
        elif isinstance(effect, consume.StopSweeper) and self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        elif isinstance(effect, consume.ReleaseHeld) and self._processor.gate is not None:
            await self._processor.gate.release_held()
        elif isinstance(effect, consume.CloseClient) and self._subscriber is not None:
            await asyncio.to_thread(self._subscriber.close)
        return None

    async def cancel_running(self, timeout: float) -> None:
        """Cancel the deliveries still running - after a stop that timed out, on a loop about
        to end - and give their cleanup up to ``timeout`` seconds. A task left pending on a
        loop that ends is destroyed, its handler's ``finally`` and ``async with`` cleanup never
        run; cancelled, the handler can clean up. Its message stays unsettled (the run is not
        recorded): Pub/Sub delivers it again."""
        running = {task for task in self._tasks if not task.done()}
        for task in running:
            task.cancel()
        if running:
            await asyncio.wait(running, timeout=timeout)

    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def is_active(self, group: str) -> bool:
        """True while this process has work queued or running for ``group``."""
        return self._queues.active(group)

    # --- delivery (the client's threads hand over; everything else runs on the loop) ------

    def _on_message(self, received: Any) -> None:
        loop = self._loop
        if self._closing or loop is None or loop.is_closed():
            received.nack()
            return
        loop.call_soon_threadsafe(self._accept, received)

    def _accept(self, received: Any) -> None:
        if self._closing:
            received.nack()  # stopping: let another consumer (or our restart) take it
            return
        message = to_message(received)
        address = fifo_route(message)
        if address is None:
            self._spawn(self._run_one(received, message))
            return
        if self._queues.put(address.group, address.seq, (received, message)):
            self._spawn(self._run_group(address.group))  # else its runner picks it up

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_one(self, received: Any, message: Message) -> None:
        assert self._slots is not None
        async with self._slots:
            await self._guarded(received, message)

    async def _run_group(self, group: str) -> None:
        """One group's convoy: its queue in sequence order, one message at a time."""
        assert self._slots is not None
        try:
            # take() frees the group when it finds it empty, in that step of the loop: no
            # submit can slip in between.
            while taken := self._queues.take(group):
                received, message = taken[0].item
                async with self._slots:
                    await self._guarded(received, message)
        finally:
            # Were the task cancelled, what is still queued is handed back, not stranded.
            for waiting in self._queues.forget(group):
                waiting.item[0].nack()

    async def _guarded(self, received: Any, message: Message) -> None:
        """``_process``, which settles the message itself; should it raise all the same, the
        error is logged and the message nacked (a nack after an ack is harmless), and the
        group goes on."""
        try:
            await self._process(received, message)
        except Exception:
            logger.exception("consuming %s raised; nacked for redelivery", message.message_id)
            received.nack()

    async def _process(self, received: Any, message: Message) -> None:
        with Consuming(self.subscription, received, message, self._on_outcome) as consumed:
            consumed.outcome = await self._processor.process(message)

    async def _sweep_loop(self) -> None:
        await sweep_until_async(
            self._processor.gate,
            self._sweep_interval,
            lambda: self._closing,
            logger,
            self.is_active,
        )
