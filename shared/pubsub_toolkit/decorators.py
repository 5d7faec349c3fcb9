"""``@idempotent``: dedup - and FIFO order - for a handler you already have, in two lines.

The same decorator fits the two places Pub/Sub code already lives::

    @idempotent(consumer="billing")            # above functions-framework's own decorator
    @functions_framework.cloud_event
    def charge(cloud_event): ...

    subscriber.subscribe(subscription, callback=idempotent(consumer="billing")(callback))

What it does with each delivery:

* **a functions-framework CloudEvent function** (an Eventarc Pub/Sub trigger): the first
  delivery of a key runs the function and stores its return value; a duplicate returns that
  stored value without running it (functions-framework then acks); a delivery whose key is
  being run elsewhere right now is answered 503 - a quiet redelivery, logged once at INFO -
  and a function that raises releases the key and is redelivered. Dedup only: FIFO order
  needs a consumer that can park messages (the subscriber callback below, ``Consumer``, or
  ``functions/consumer``).
* **a google-cloud-pubsub subscriber callback**: the same dedup, plus the FIFO gate when the
  message carries ``fifo_group`` (early numbers are parked and run in order; a background
  sweeper retries parked heads and acts on gap timeouts). The decorator acks and nacks: the
  callback gets a :class:`DeliveredMessage` whose ``ack()`` does nothing (the decorator acks
  once the effect is recorded) and whose ``nack()`` asks for a redelivery.

**The key** is the message's ``dedup_key`` attribute (ingress stamps one on every message; a
blank one is dead-lettered as ``invalid_dedup_key``, as at ingress - with
``on_missing_key="run"`` it counts as missing), else what the ``key`` function returns, else
the Pub/Sub message id. A delivery with none of them is never run unguarded: it is
dead-lettered as ``invalid_dedup_key`` (or raises without a dead-letter topic) unless
``on_missing_key="run"`` says to run it anyway. The handler sees the
key as ``message.dedup_key``: pass it downstream as an ``Idempotency-Key`` header.

Stores, topics and policies come from the environment on the first delivery
(:meth:`Settings.from_env`, :meth:`ConsumerSettings.from_env`), or from the ``settings`` and
``consumer_settings`` you pass. A missing or wrong setting is an ERROR naming the variable, once
a minute; a subscriber's messages meanwhile come back a minute later, not in a tight loop.

**An ``async def``** gets an async guard (:mod:`pubsub_toolkit._idempotent_async`): awaited on
the loop of ``functions_framework.aio`` for a CloudEvent function, or, for a subscriber
callback, run on an event loop of the decorated object's own thread (``close()`` stops it),
over the async stores. What both guards share is in :mod:`pubsub_toolkit._guard`.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections.abc import Callable
from typing import Any, cast

from pubsub_toolkit import tracing
from pubsub_toolkit._guard import (  # the shared parts, also importable from here as before
    SETTING_RETRY_SECONDS,
    DeliveredMessage,
    Guard,
    Guarded,
    KeyFunction,
    NackRequested,
)
from pubsub_toolkit._guard import delivered as _delivered
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer._settle import sweep_until
from pubsub_toolkit.core import consume
from pubsub_toolkit.core.consume import MissingKey
from pubsub_toolkit.errors import ClaimInProgressError

__all__ = [
    "SETTING_RETRY_SECONDS",
    "DeliveredMessage",
    "Guarded",
    "Idempotent",
    "KeyFunction",
    "MissingKey",
    "NackRequested",
    "idempotent",
]

logger = logging.getLogger(__name__)


def idempotent(
    consumer: str | None = None,
    *,
    key: KeyFunction | None = None,
    on_missing_key: MissingKey = "dead_letter",
    settings: Settings | None = None,
    consumer_settings: ConsumerSettings | None = None,
) -> Callable[[Callable[..., Any]], Guarded]:
    """Make a CloudEvent function or a subscriber callback run once per key (see the module).

    ``consumer`` names this consumer's dedup namespace and FIFO state (default:
    PUBSUB_TOOLKIT_CONSUMER_ID). The result is a plain function (functions-framework accepts nothing
    else) with a ``close()`` that stops the FIFO sweeper of a subscriber callback.
    """
    if on_missing_key not in ("dead_letter", "run"):
        raise ValueError(f"on_missing_key={on_missing_key!r} is not 'dead_letter' or 'run'")

    def decorate(handler: Callable[..., Any]) -> Guarded:
        if inspect.iscoroutinefunction(handler):
            from pubsub_toolkit._idempotent_async import decorate_async

            return decorate_async(
                handler,
                consumer=consumer,
                key=key,
                on_missing_key=on_missing_key,
                settings=settings,
                consumer_settings=consumer_settings,
            )
        guard = Idempotent(
            handler,
            consumer=consumer,
            key=key,
            on_missing_key=on_missing_key,
            settings=settings,
            consumer_settings=consumer_settings,
        )

        @functools.wraps(handler)
        def guarded(delivery: Any) -> Any:
            return guard(delivery)

        guarded.close = guard.close  # type: ignore[attr-defined]
        return cast(Guarded, guarded)

    return decorate


class Idempotent(Guard):
    """The guard behind a decorated (sync) handler; called as the platform calls the original."""

    def __init__(self, handler: Callable[..., Any], **options: Any) -> None:
        """``options``: as :class:`~pubsub_toolkit._guard.Guard` takes them."""
        super().__init__(handler, **options)
        self._processor: Any = None  # MessageProcessor, built on the first delivery
        self._sweeper: threading.Thread | None = None

    # --- the two call shapes: the core decides (core.consume), this drives it in sync ------

    def __call__(self, delivery: Any) -> Any:
        if consume.is_subscriber_message(delivery):
            self._on_pubsub_message(delivery)
            return None
        return self._on_cloud_event(delivery)

    def _on_cloud_event(self, cloud_event: Any) -> Any:
        """functions-framework: returning acks, raising redelivers, 503 is a quiet retry."""
        self._get_processor()  # a missing setting raises here, before the event is read
        protocol = self._event_protocol(cloud_event)
        try:
            return consume.run(protocol, lambda effect: self._perform(effect, cloud_event))
        except ClaimInProgressError:
            import flask  # functions-framework runs on Flask

            # Any non-2xx makes Pub/Sub deliver again; an HTTPException is answered without
            # Flask's ERROR traceback (the dedup decision log said "in_progress" at INFO).
            flask.abort(503, description=consume.IN_PROGRESS)

    def _on_pubsub_message(self, received: Any) -> None:
        """A streaming-pull callback: ack when handled, deduplicated or dead-lettered."""
        try:
            self._get_processor()
            consume.run(self._delivery_protocol(received), lambda e: self._perform(e, None))
        except Exception as exc:
            self._answer(received, exc)
        else:
            self._answer(received, None)

    def _perform(self, effect: consume.Effect, cloud_event: Any) -> object:
        """Perform one effect of a delivery's protocol; ``cloud_event``: the CloudEvent the
        handler takes (None: a subscriber callback, which takes a DeliveredMessage)."""
        processor = self._get_processor()
        if type(effect) is consume.Process:
            return processor.process(effect.message)
        if type(effect) is consume.RunOnce:
            ran: dict[str, Any] = {}

            def call() -> object:
                ran["value"] = self._handler(cloud_event)
                return ran["value"]

            with tracing.handling(effect.message, processor.gate.consumer, hop="consumer"):
                _, stored = processor.run_once(effect.message, call)
            return consume.Ran("value" in ran, ran.get("value"), stored)
        if type(effect) is consume.Reject:
            return processor.reject(effect.message, effect.error)
        if type(effect) is consume.Unguarded:
            logger.warning(consume.UNGUARDED)
            return self._handler(_delivered(effect.message) if cloud_event is None else cloud_event)
        assert type(effect) is consume.StartSweeper
        self._start_sweeper(processor)
        return None

    # --- wiring --------------------------------------------------------------------------

    def _get_processor(self) -> Any:
        with self._lock:
            if self._processor is None:
                from pubsub_toolkit.consumer.processor import MessageProcessor

                settings, consumer = self._resolved_settings()
                self._processor = MessageProcessor.from_settings(
                    settings, consumer, lambda message: self._handler(_delivered(message))
                )
            return self._processor

    def _start_sweeper(self, processor: Any) -> None:
        with self._lock:
            if self._sweeper is None and not self._closing.is_set():
                self._sweeper = threading.Thread(
                    target=self._sweep_loop,
                    args=(processor.gate,),
                    name="fifo-sweeper",
                    daemon=True,
                )
                self._sweeper.start()

    def _sweep_loop(self, gate: Any) -> None:
        # Parked heads whose backoff ran out and gap timeouts happen between messages.
        sweep_until(gate, self._sweep_interval, self._closing, logger)

    def close(self, timeout: float = 30.0) -> None:
        """Stop the FIFO sweeper (if one started) and give back the leases it holds."""
        self._closing.set()
        if self._sweeper is not None:
            self._sweeper.join(timeout=timeout)
        if self._processor is not None:
            self._processor.gate.release_held()
