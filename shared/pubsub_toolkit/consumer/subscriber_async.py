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
import bisect
import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pubsub_toolkit import tracing
from pubsub_toolkit.consumer._settle import OutcomeListener, settle, tell, to_message
from pubsub_toolkit.consumer._stream_end import StreamEnd
from pubsub_toolkit.consumer.processor_sync import fifo_address
from pubsub_toolkit.core.fifo_policy import STREAMING_LEASE_HOLD
from pubsub_toolkit.errors import PermanentError
from pubsub_toolkit.message import Message
from pubsub_toolkit.tracing import RECEIVE

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
        self._queues: dict[str, list[tuple[int, int, Any, Message]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._arrivals = 0
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
        self._closing = True
        for queue in self._queues.values():
            for *_, received, _message in queue:
                received.nack()
            queue.clear()
        finished = True
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=timeout)
            finished = not pending
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        gate = self._processor.gate
        if gate is not None:
            await gate.release_held()  # another consumer runs those groups at once
        if self._stream is not None:
            # The client's shutdown blocks (it joins its own threads): not on the loop.
            await asyncio.to_thread(self._close_stream, timeout)
        return finished

    def _close_stream(self, timeout: float) -> None:
        self._stream.cancel()
        try:
            self._stream.result(timeout=timeout)
        except Exception:  # the stream ends with CancelledError by design
            logger.debug("stream closed", exc_info=True)
        if self._subscriber is not None:
            self._subscriber.close()

    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def is_active(self, group: str) -> bool:
        """True while this process has work queued or running for ``group``."""
        return group in self._queues

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
        try:
            address = fifo_address(message)
        except PermanentError:
            address = None  # the processor dead-letters it
        if address is None:
            self._spawn(self._run_one(received, message))
            return
        self._arrivals += 1
        queue = self._queues.get(address.group)
        item = (address.seq, self._arrivals, received, message)
        if queue is not None:
            bisect.insort(queue, item, key=lambda i: (i[0], i[1]))  # its runner picks it up
            return
        self._queues[address.group] = [item]
        self._spawn(self._run_group(address.group))

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
        queue = self._queues[group]
        try:
            while queue:
                _, _, received, message = queue.pop(0)
                async with self._slots:
                    await self._guarded(received, message)
        finally:
            # Empty and gone in one step of the loop: no submit can slip in between. (Were
            # the task cancelled, what is still queued is handed back, not stranded.)
            for *_, received, _message in self._queues.pop(group, []):
                received.nack()

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
        with tracing.handling(message, self.subscription, hop="consumer", operation=RECEIVE):
            try:
                outcome = await self._processor.process(message)
            except Exception as exc:
                outcome = settle(self.subscription, received, message, exc)
            else:
                settle(self.subscription, received, message)
        tell(self._on_outcome, message, outcome)

    async def _sweep_loop(self) -> None:
        gate = self._processor.gate
        while not self._closing:
            await asyncio.sleep(self._sweep_interval)
            try:
                for group in await gate.groups():
                    if self._closing:
                        return
                    if not self.is_active(group):
                        await gate.sweep(group)
            except Exception:
                logger.exception("FIFO sweep failed; trying again next interval")
