"""`Consumer`: a streaming-pull subscriber with dedup and FIFO per group applied.

    consumer = Consumer(subscription, processor, concurrency=16)
    consumer.start()          # returns at once; messages flow to your handler
    ...
    consumer.stop()           # graceful: in-flight work finishes and is acked

    with Consumer(subscription, processor) as consumer:
        consumer.result()     # until stop(); raises what ended the stream (e.g. NotFound)

* **Flow control** bounds the messages held at once (``max_outstanding``).
* **Convoy**: one group's messages run serially in ``fifo_seq`` order, different groups in
  parallel up to ``concurrency`` (see :mod:`.convoy`); messages outside groups run in parallel.
* **Dedup** by ``dedup_key`` for messages outside groups; the FIFO gate's counter for grouped
  ones. Works whether or not the subscription has message ordering enabled: order comes from
  the toolkit's counters, not from the broker.
* A **sweeper** thread runs the gate's periodic work (parked heads, gap timeouts) for groups this
  process is not busy with.
* **``result()``**, like a future's: waits until ``stop()`` finished, or raises the error
  that ended the stream (a missing or forbidden subscription: NotFound, PermissionDenied, ...),
  which is also logged at ERROR when it happens (see :mod:`._stream_end`).
* **Graceful stop**: new deliveries are nacked, queued ones are nacked, running ones finish and
  are acked while the stream is still open, and only then is the stream closed - no ack lost.
* **An ``async def`` handler** (``MessageProcessor.from_settings`` gives an async processor for
  one): the same guarantees on one event loop of the consumer's own thread - the streaming pull
  hands each message to it, each group is a task chain (see
  :mod:`~pubsub_toolkit.consumer.subscriber_async`); ``start()``/``stop()`` stay sync.
"""

from __future__ import annotations

import inspect
import logging
import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from pubsub_toolkit._loop_thread import LoopThread
from pubsub_toolkit.consumer._acks import ack
from pubsub_toolkit.consumer._settle import (  # also importable from here, as before
    Consuming,
    OutcomeListener,
    nack_after,
    settle,  # noqa: F401 - importable from here, as before
    sweep_until,
    tell,
    to_message,
)
from pubsub_toolkit.consumer._stream_end import StreamEnd, close_stream
from pubsub_toolkit.consumer.convoy import ConvoyDispatcher
from pubsub_toolkit.consumer.processor_sync import SyncMessageProcessor, fifo_route
from pubsub_toolkit.core import consume
from pubsub_toolkit.core.fifo_policy import STREAMING_LEASE_HOLD
from pubsub_toolkit.message import Message

if TYPE_CHECKING:
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    from pubsub_toolkit.consumer.processor_async import AsyncMessageProcessor
    from pubsub_toolkit.consumer.subscriber_async import AsyncConsumer

logger = logging.getLogger(__name__)


class Consumer:
    """Streaming pull + convoy dispatch + the processor's guarantees."""

    def __init__(
        self,
        subscription: str,
        processor: SyncMessageProcessor | AsyncMessageProcessor,
        *,
        concurrency: int = 16,
        max_outstanding: int = 1000,
        sweep_interval: timedelta = timedelta(seconds=1),
        subscriber: pubsub_v1.SubscriberClient | None = None,
        on_outcome: OutcomeListener | None = None,
    ) -> None:
        """``subscriber``: the google-cloud-pubsub client to pull with (one is made when None).
        The consumer owns it either way: :meth:`stop` closes it after the stream (a client
        you share with other subscriptions: pass none, let the consumer make its own)."""
        self.subscription = subscription
        self._async: AsyncConsumer | None = None
        self._loop: LoopThread | None = None
        if inspect.iscoroutinefunction(processor.process):  # an async handler's processor
            from pubsub_toolkit.consumer.subscriber_async import AsyncConsumer

            self._loop = LoopThread("consumer-loop")
            self._async = AsyncConsumer(
                subscription,
                cast("AsyncMessageProcessor", processor),
                concurrency=concurrency,
                max_outstanding=max_outstanding,
                sweep_interval=sweep_interval,
                subscriber=subscriber,
                on_outcome=on_outcome,
            )
        self._processor = processor
        self._concurrency = concurrency
        self._max_outstanding = max_outstanding
        self._sweep_interval = sweep_interval.total_seconds()
        self._subscriber = subscriber
        self._on_outcome = on_outcome
        # A streaming consumer gets a group's messages one after another: holding the lease
        # between them makes each one state write, not two (unless the settings chose).
        processor.gate.use_lease_hold(STREAMING_LEASE_HOLD)
        # Batch mode (a gate built with batch > 1): a group's queued consecutive deliveries go
        # to the processor together.
        batch = 1 if self._async is not None else cast(SyncMessageProcessor, processor).gate.batch
        self._dispatcher = ConvoyDispatcher(
            concurrency, batch=batch, run_batch=self._process_batch if batch > 1 else None
        )
        self._closing = threading.Event()
        self._stream: Any = None
        self._sweeper: threading.Thread | None = None
        self._end = self._async.end if self._async is not None else StreamEnd(subscription)
        self._stop_lock = threading.Lock()
        self._stopped: bool | None = None  # stop()'s answer, once it ran

    def start(self) -> None:
        """Open the stream and start the sweeper; returns at once."""
        if self._async is not None and self._loop is not None:
            self._loop.run(self._async.start())
            return
        from google.cloud import pubsub_v1  # type: ignore[attr-defined]

        if self._subscriber is None:
            self._subscriber = pubsub_v1.SubscriberClient()
        flow = pubsub_v1.types.FlowControl(max_messages=self._max_outstanding)
        self._stream = self._subscriber.subscribe(
            self.subscription, self._on_message, flow_control=flow
        )
        self._end.watch(self._stream, self._closing.is_set)
        self._sweeper = threading.Thread(target=self._sweep_loop, name="fifo-sweeper", daemon=True)
        self._sweeper.start()

    def stream_error(self) -> BaseException | None:
        """The error that ended the stream (e.g. a missing subscription), if it ended."""
        return self._end.error()

    def result(self, timeout: float | None = None) -> None:
        """Block until the consumer ends, like a future: return once :meth:`stop` finished;
        raise the error that ended the stream on its own - NotFound for a missing
        subscription, PermissionDenied, ... (logged at ERROR when it happened; leaving the
        ``with`` block then stops the rest gracefully). TimeoutError after ``timeout``."""
        self._end.result(timeout)

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop gracefully; True when every in-flight message finished within ``timeout``.
        Stopping again (leaving ``with`` after a ``stop()``) returns the first answer."""
        with self._stop_lock:
            if self._stopped is None:
                try:
                    self._stopped = self._stop(timeout)
                finally:
                    self._end.stopped()
            return self._stopped

    def _stop(self, timeout: float) -> bool:
        if self._async is not None and self._loop is not None:
            if not self._loop.started:
                return True
            try:
                return self._loop.run(self._async.stop(timeout), timeout=2 * timeout + 5)
            finally:
                # This loop ends here: a handler still running is cancelled first, so its
                # cleanup runs (left pending, it would be destroyed with the loop).
                self._loop.run(self._async.cancel_running(timeout), 2 * timeout + 5)
                # Its clients are bound to this loop, which ends here.
                aclose = getattr(self._processor, "aclose", None)
                if aclose is not None:
                    self._loop.run(aclose(), timeout)
                self._loop.stop(timeout)
        return consume.run(consume.graceful_stop(timeout), self._stopping)

    def _stopping(self, effect: consume.StopEffect) -> object:
        """Perform one step of :func:`~pubsub_toolkit.core.consume.graceful_stop`."""
        if isinstance(effect, consume.RefuseNew):
            self._closing.set()
        elif isinstance(effect, consume.Drain):
            return self._dispatcher.close(timeout=effect.timeout)
        elif isinstance(effect, consume.CloseStream) and self._stream is not None:
            close_stream(self._stream, effect.timeout)
        elif isinstance(effect, consume.StopSweeper) and self._sweeper is not None:
            self._sweeper.join(timeout=effect.timeout)
        elif isinstance(effect, consume.ReleaseHeld) and self._processor.gate is not None:
            self._processor.gate.release_held()
        elif isinstance(effect, consume.CloseClient) and self._subscriber is not None:
            self._subscriber.close()
        return None

    def __enter__(self) -> Consumer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- delivery -------------------------------------------------------------------------

    def _on_message(self, received: Any) -> None:
        if self._closing.is_set():
            received.nack()  # stopping: let another consumer (or our restart) take it
            return
        message = to_message(received)
        address = fifo_route(message)
        self._dispatcher.submit(
            address.group if address else None,
            address.seq if address else 0,
            lambda: self._process(received, message),
            received.nack,
            (received, message),
        )

    def _process(self, received: Any, message: Message) -> None:
        with Consuming(self.subscription, received, message, self._on_outcome) as consumed:
            consumed.outcome = cast(SyncMessageProcessor, self._processor).process(message)

    def _process_batch(self, payloads: list[object]) -> None:
        deliveries = cast("list[tuple[Any, Message]]", payloads)
        processor = cast(SyncMessageProcessor, self._processor)
        try:
            results = processor.process_batch([message for _received, message in deliveries])
        except Exception as exc:
            # Nothing of the batch is settled yet (e.g. the store is unreachable): each one
            # is nacked - what did run is a duplicate when it comes back, the rest runs then.
            logger.exception(
                "batch of %d deliveries failed before any was settled (%s); all nacked for "
                "redelivery",
                len(deliveries),
                type(exc).__name__,
            )
            results = [exc] * len(deliveries)
        for (received, message), result in zip(deliveries, results, strict=True):
            if isinstance(result, Exception):
                outcome = nack_after(received, result)
            else:
                ack(received)
                outcome = result
            tell(self._on_outcome, message, outcome)

    def _sweep_loop(self) -> None:
        gate = cast(SyncMessageProcessor, self._processor).gate
        sweep_until(gate, self._sweep_interval, self._closing, logger, self._dispatcher.is_active)
