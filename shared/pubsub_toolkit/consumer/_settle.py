"""Settling a delivery, shared by every consumer: the sync and async ``Consumer`` and the
decorator's subscriber callback - ack or nack as the delivery's ``settle`` span, an outcome
told to a listener, a google-cloud-pubsub message read as our :class:`Message`, and the FIFO
sweeper's loop (a thread's and a task's, over one pass decided in
:func:`pubsub_toolkit.core.consume.sweep_pass`).

Below both consumers, so that the async one needs nothing of the sync one (which picks it).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

from pubsub_toolkit import tracing
from pubsub_toolkit.consumer._acks import ack
from pubsub_toolkit.core import consume
from pubsub_toolkit.message import Message
from pubsub_toolkit.tracing import RECEIVE

# The subscriber's logger, as before these helpers left it: logging set up for it still applies.
logger = logging.getLogger("pubsub_toolkit.consumer.subscriber")
OutcomeListener = Callable[[Message, str], None]


def nack_after(received: Any, exc: Exception) -> str:
    """Nack ``received`` after ``exc`` and return the outcome: ``retry`` for a TransientError
    (expected: one INFO line), ``error`` for anything else (logged with its traceback). Call it
    from the ``except`` block, so the traceback is the one being handled."""
    outcome = consume.failure_outcome(exc)
    if outcome == "retry":
        logger.info("redelivering %s: %s", received.message_id, exc)
    else:
        logger.exception("handler error on %s; redelivering", received.message_id)
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


class Consuming:
    """A consumer's handling of one delivery, around its ``with`` block (which sets
    ``outcome``, the processor's; acked): the ``receive`` span; the ack, or after an exception
    the nack (see :func:`settle`; the exception goes no further); the outcome told to
    ``listener``. One body for the sync and the async consumer, whose blocks differ only by an
    ``await``. (Not an exception: a BaseException - the thread or task going away - leaves
    through the span unsettled, as it came.)

    A class rather than a ``@contextmanager`` generator: it runs once per delivery, and the
    generator's machinery (its frame, ``next`` on entry and on exit, the wrapper object) cost
    about as much as the rest of the settling (issue 26's 64-group consumer, CPU-bound)."""

    __slots__ = ("_listener", "_message", "_received", "_span", "_subscription", "outcome")

    def __init__(
        self,
        subscription: str,
        received: Any,
        message: Message,
        listener: OutcomeListener | None,
    ) -> None:
        self._subscription, self._received = subscription, received
        self._message, self._listener = message, listener
        self.outcome = "ack"

    def __enter__(self) -> Consuming:
        span = tracing.handling(
            self._message, self._subscription, hop="consumer", operation=RECEIVE
        )
        span.__enter__()
        self._span = span
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> bool:
        span = self._span
        if exc is not None and not isinstance(exc, Exception):
            span.__exit__(kind, exc, tb)
            return False
        try:
            if exc is None:
                settle(self._subscription, self._received, self._message)
                outcome = self.outcome
            else:  # handled here: settle logs it with this traceback
                outcome = settle(self._subscription, self._received, self._message, exc)
        except BaseException as failure:
            span.__exit__(type(failure), failure, failure.__traceback__)
            raise
        span.__exit__(None, None, None)
        tell(self._listener, self._message, outcome)
        return True


def _sweep_effect(gate: Any, effect: consume.ListGroups | consume.Sweep) -> object:
    if isinstance(effect, consume.Sweep):
        return gate.sweep(effect.group)
    return gate.groups()


async def _sweep_effect_async(gate: Any, effect: consume.ListGroups | consume.Sweep) -> object:
    if isinstance(effect, consume.Sweep):
        return await gate.sweep(effect.group)
    return await gate.groups()


def sweep_until(
    gate: Any,
    interval: float,
    closing: threading.Event,
    log: logging.Logger,
    busy: Callable[[str], bool] = consume.never,
) -> None:
    """A sweeper thread: a pass over ``gate``'s groups every ``interval`` seconds until
    ``closing`` is set; a failed pass is logged on ``log`` and tried again at the next."""
    while not closing.wait(interval):
        try:
            consume.run(consume.sweep_pass(closing.is_set, busy), lambda e: _sweep_effect(gate, e))
        except Exception:
            log.exception(consume.SWEEP_FAILED)


async def sweep_until_async(
    gate: Any,
    interval: float,
    closing: Callable[[], bool],
    log: logging.Logger,
    busy: Callable[[str], bool] = consume.never,
) -> None:
    """:func:`sweep_until` as a task on the running loop, over an async gate."""
    while not closing():
        await asyncio.sleep(interval)
        try:
            await consume.run_async(
                consume.sweep_pass(closing, busy), lambda e: _sweep_effect_async(gate, e)
            )
        except Exception:
            log.exception(consume.SWEEP_FAILED)
