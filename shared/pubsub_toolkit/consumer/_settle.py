"""Settling a delivery, shared by every consumer: the sync and async ``Consumer`` and the
decorator's subscriber callback - ack or nack as the delivery's ``settle`` span, an outcome
told to a listener, a google-cloud-pubsub message read as our :class:`Message`.

Below both consumers, so that the async one needs nothing of the sync one (which picks it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pubsub_toolkit import tracing
from pubsub_toolkit.consumer._acks import ack
from pubsub_toolkit.errors import TransientError
from pubsub_toolkit.message import Message

# The subscriber's logger, as before these helpers left it: logging set up for it still applies.
logger = logging.getLogger("pubsub_toolkit.consumer.subscriber")
OutcomeListener = Callable[[Message, str], None]


def nack_after(received: Any, exc: Exception) -> str:
    """Nack ``received`` after ``exc`` and return the outcome: ``retry`` for a TransientError
    (expected: one INFO line), ``error`` for anything else (logged with its traceback). Call it
    from the ``except`` block, so the traceback is the one being handled."""
    if isinstance(exc, TransientError):
        logger.info("redelivering %s: %s", received.message_id, exc)
        outcome = "retry"
    else:
        logger.exception("handler error on %s; redelivering", received.message_id)
        outcome = "error"
    received.nack()
    return outcome


def settle(subscription: str, received: Any, message: Message, exc: Exception | None = None) -> str:
    """Ack ``received`` - or, after ``exc``, nack it (see :func:`nack_after`, whose outcome is
    returned) - as the delivery's ``settle`` span. Call it from the ``except`` block for a
    failure, so the logged traceback is the one being handled."""
    with tracing.settling(subscription, message, hop="consumer", ack=exc is None):
        if exc is not None:
            return nack_after(received, exc)
        ack(received)
        return "ack"


def tell(listener: OutcomeListener | None, message: Message, outcome: str) -> None:
    """Give ``listener`` a settled message's outcome. A listener that raises is logged and
    changes nothing: the message stays acked or nacked as decided, its group goes on."""
    if listener is None:
        return
    try:
        listener(message, outcome)
    except Exception:
        logger.exception(
            "on_outcome listener raised on %s (outcome %s); the message stays settled as decided",
            message.message_id,
            outcome,
        )


def to_message(received: Any) -> Message:
    """Our Message from a google-cloud-pubsub received message."""
    return Message(
        data=received.data,
        attributes=dict(received.attributes),
        message_id=received.message_id,
        publish_time=received.publish_time,
        ordering_key=received.ordering_key or "",
    )
