"""What the sync and the async ``@idempotent`` guard share: keys, settings, the message a
callback receives, holding deliveries back while a setting is wrong, and each call shape's
protocol - decided in :mod:`pubsub_toolkit.core.consume`, which each guard only drives.

Below both guards (:class:`pubsub_toolkit.decorators.Idempotent` and
:class:`pubsub_toolkit._idempotent_async.AsyncIdempotent`), so that the async one needs nothing
of :mod:`pubsub_toolkit.decorators`, which picks between the two (see there for the behaviour).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.cloudevent import message_from_event_data
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer._settle import nack_after, to_message
from pubsub_toolkit.core import consume
from pubsub_toolkit.core.consume import Answer, MissingKey
from pubsub_toolkit.errors import ConfigurationError, PermanentError, RedeliveryRequested
from pubsub_toolkit.message import Message

# The decorator's logger, as before this part left it: logging set up for it still applies.
logger = logging.getLogger("pubsub_toolkit.decorators")
# A missing or wrong setting stops every delivery until the process restarts with it: each
# message comes back after this long (a nack would redeliver it at once, in a tight loop), and
# the error is logged at most once per this long.
SETTING_RETRY_SECONDS = 60

KeyFunction = Callable[[Message], "str | None"]


class NackRequested(RedeliveryRequested):
    """Raised by :meth:`DeliveredMessage.nack`: the callback asked for a redelivery (counted
    toward poison like any failure; see :class:`~pubsub_toolkit.errors.RedeliveryRequested`)."""


@dataclass(frozen=True)
class DeliveredMessage(Message):
    """The message a decorated subscriber callback receives: a :class:`Message` with the
    client library's ``ack()``/``nack()`` so existing callbacks keep working.

    ``ack()`` does nothing: the decorator acks after the effect is recorded (an ack before
    that could lose it). ``nack()`` raises :class:`NackRequested`: the key is released and
    Pub/Sub delivers the message again.
    """

    def ack(self) -> None:
        """Nothing to do: the decorator acks once the effect is recorded."""

    def nack(self) -> None:
        """Ask for a redelivery (raises NackRequested; the decorator nacks)."""
        raise NackRequested(f"the handler nacked message {self.message_id}")


class Guarded(Protocol):
    """What :func:`idempotent` returns: the handler's own call shape, plus ``close()``."""

    def __call__(self, delivery: Any) -> Any: ...

    def close(self, timeout: float = 30.0) -> None:
        """Stop the FIFO sweeper (if one started)."""


class Guard:
    """The part of a decorated handler's guard that does not depend on sync or async: its
    options, the key of each message, and what to do without a key or a setting."""

    def __init__(
        self,
        handler: Callable[..., Any],
        *,
        consumer: str | None,
        key: KeyFunction | None,
        on_missing_key: MissingKey,
        settings: Settings | None,
        consumer_settings: ConsumerSettings | None,
        sweep_interval: float = 1.0,
    ) -> None:
        self._handler = handler
        self._consumer = consumer
        self._key = key
        self._on_missing_key = on_missing_key
        self._settings = settings
        self._consumer_settings = consumer_settings
        self._sweep_interval = sweep_interval
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._setting_error_said = float("-inf")  # time.monotonic() of the last such log

    def _hold_back(self, received: Any, exc: ConfigurationError) -> None:
        """No delivery can be handled without the setting: say so once a minute, not once per
        delivery, and let the message come back in a minute rather than at once."""
        now = time.monotonic()
        with self._lock:
            say = now - self._setting_error_said >= SETTING_RETRY_SECONDS
            if say:
                self._setting_error_said = now
        if say:
            logger.error(
                "cannot handle messages until the setting is fixed and the process restarted: "
                "%s (each message comes back in %d s; this is said once a minute)",
                exc,
                SETTING_RETRY_SECONDS,
            )
        received.modify_ack_deadline(SETTING_RETRY_SECONDS)
        received.drop()  # out of the client's lease management: back after the deadline

    # --- keys ----------------------------------------------------------------------------

    def _with_key(self, message: Message) -> Message | None:
        """``message`` with its dedup key stamped in, or None when it has none."""
        given = message.attributes.get(attr.DEDUP_KEY)
        if given is not None and (given.strip() or self._on_missing_key != "run"):
            return message  # even a blank one: the processor dead-letters it, as ingress does
        # None, or blank with on_missing_key="run" (lenient: a blank key is no key).
        found = self._key(message) if self._key is not None else None
        found = found if found and found.strip() else message.message_id
        if not found:
            return None
        return replace(message, attributes={**message.attributes, attr.DEDUP_KEY: found})

    # --- the two call shapes, decided in the core (both drivers run these) -----------------

    def _event_protocol(self, cloud_event: Any) -> consume.Protocol[object]:
        """What to do with a CloudEvent (see :func:`~pubsub_toolkit.core.consume.cloud_event`)."""
        try:
            message, unreadable = message_from_event_data(cloud_event.data), None
        except PermanentError as exc:
            message, unreadable = Message(repr(cloud_event.data).encode()), exc
        keyed = None if unreadable is not None else self._with_key(message)
        return consume.cloud_event(message, unreadable, keyed, self._on_missing_key)

    def _delivery_protocol(self, received: Any) -> consume.Protocol[None]:
        """What to do with a subscriber callback's message (see
        :func:`~pubsub_toolkit.core.consume.pubsub_delivery`)."""
        message = to_message(received)
        return consume.pubsub_delivery(message, self._with_key(message), self._on_missing_key)

    def _answer(self, received: Any, error: Exception | None) -> None:
        """Ack, hold back or nack ``received`` (:func:`~pubsub_toolkit.core.consume.answer`).
        Call it from the ``except`` block after a failure: a nack logs that traceback."""
        verdict = consume.answer(error)
        if verdict is Answer.ACK or error is None:
            received.ack()
        elif verdict is Answer.HOLD_BACK and isinstance(error, ConfigurationError):
            self._hold_back(received, error)
        else:
            nack_after(received, error)

    # --- wiring --------------------------------------------------------------------------

    def _resolved_settings(self) -> tuple[Settings, ConsumerSettings]:
        settings = self._settings or Settings.from_env()
        consumer = self._consumer_settings
        if consumer is None:
            consumer = (
                ConsumerSettings(consumer_id=self._consumer)
                if self._consumer
                else ConsumerSettings.from_env()
            )
        elif self._consumer:
            consumer = replace(consumer, consumer_id=self._consumer)
        return settings, consumer


def delivered(message: Message) -> DeliveredMessage:
    """``message`` as a decorated callback receives it (with ``ack()`` and ``nack()``)."""
    return DeliveredMessage(
        data=message.data,
        attributes=message.attributes,
        message_id=message.message_id,
        publish_time=message.publish_time,
        ordering_key=message.ordering_key,
    )
