"""What a consumer does with one delivery, decided once for the sync and the asyncio drivers.

The ``@idempotent`` guard (:mod:`pubsub_toolkit.decorators` for a ``def``,
:mod:`pubsub_toolkit._idempotent_async` for an ``async def``) and the consumers
(:mod:`pubsub_toolkit.consumer.subscriber`, :mod:`~pubsub_toolkit.consumer.subscriber_async`)
used to take these decisions twice, once per driver. Here they are written once, without I/O:

* :func:`pubsub_delivery` and :func:`cloud_event` - the guard's two call shapes as generator
  protocols (the style of :mod:`pubsub_toolkit.stores.dedup.claims`): each *yields* the effect
  it needs (:class:`Reject`, :class:`Unguarded`, :class:`StartSweeper`, :class:`Process`,
  :class:`RunOnce`) and receives its result; :func:`run` and :func:`run_async` perform them;
* :func:`answer` - ack, nack or hold back a subscriber callback's delivery after its outcome;
  :func:`failure_outcome` - a nack's outcome (``retry`` or ``error``);
* :func:`sweep_pass` - which groups one pass of a FIFO sweeper visits;
* :func:`graceful_stop` - the order in which a consumer stops, so that no ack is lost;
* :func:`is_subscriber_message` - which call shape a delivery is.

An error of an effect passes through the driver unchanged (a failing handler, a dead-letter
topic that is not configured); the caller decides with :func:`answer`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Literal, TypeVar

from pubsub_toolkit import _drive
from pubsub_toolkit import attributes as attr
from pubsub_toolkit.errors import ConfigurationError, PermanentError, TransientError
from pubsub_toolkit.message import Message

T = TypeVar("T")
MissingKey = Literal["dead_letter", "run"]

# The guard's answer (HTTP 503) to a CloudEvent whose key another delivery is running now: any
# non-2xx is a redelivery, and a 503 is answered without an ERROR traceback.
IN_PROGRESS = "being processed elsewhere; deliver again later"
UNGUARDED = "message without a dedup key runs unguarded (on_missing_key='run')"
NO_KEY = "no dedup_key attribute, no key from the key function and no message id"
SWEEP_FAILED = "FIFO sweep failed; trying again next interval"


# --- effects ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reject:
    """Dead-letter ``message`` with ``error``'s reason (raises ``error`` without a dead-letter
    topic, so nothing is acked silently). Replies the outcome."""

    message: Message
    error: PermanentError


@dataclass(frozen=True, slots=True)
class Unguarded:
    """Log :data:`UNGUARDED` at WARNING and call the handler with the delivery, no guard
    (the user opted out with ``on_missing_key="run"``). Replies its return value."""

    message: Message


@dataclass(frozen=True, slots=True)
class StartSweeper:
    """Make sure the FIFO sweeper runs (parked heads and gap timeouts between messages)."""


@dataclass(frozen=True, slots=True)
class Process:
    """The processor's whole path for ``message``: FIFO gate or dedup, then the handler.
    Replies the outcome; raises to nack."""

    message: Message


@dataclass(frozen=True, slots=True)
class RunOnce:
    """The handler once per ``message``'s dedup key (no FIFO gate). Replies :class:`Ran`."""

    message: Message


@dataclass(frozen=True, slots=True)
class Ran:
    """What :class:`RunOnce` did: ``called`` when the handler ran here (its return value is
    ``value``), ``stored`` the result stored for the key (a duplicate's: the first run's)."""

    called: bool
    value: object = None
    stored: str | None = None


Effect = Reject | Unguarded | StartSweeper | Process | RunOnce
Protocol = Generator[Effect, object, T]


# --- the guard's two call shapes ------------------------------------------------------------


def is_subscriber_message(delivery: object) -> bool:
    """True for a google-cloud-pubsub subscriber callback's message (it has ``ack()`` and
    ``nack()``); anything else is a functions-framework CloudEvent."""
    return callable(getattr(delivery, "ack", None)) and callable(getattr(delivery, "nack", None))


def pubsub_delivery(
    message: Message, keyed: Message | None, on_missing_key: MissingKey
) -> Protocol[None]:
    """A subscriber callback's delivery: ``keyed`` is ``message`` with its dedup key stamped
    in (None: it has none). A grouped message starts the sweeper, then goes the processor's
    whole path; see :func:`answer` for what the caller does with the delivery after."""
    if keyed is None:
        yield from _unkeyed(message, on_missing_key)
        return
    if attr.FIFO_GROUP in keyed.attributes:
        yield StartSweeper()
    yield Process(keyed)


def cloud_event(
    message: Message,
    unreadable: PermanentError | None,
    keyed: Message | None,
    on_missing_key: MissingKey,
) -> Protocol[object]:
    """A CloudEvent function's delivery; returns what the guard returns (acks). ``message`` is
    the event's Pub/Sub message (its data's ``repr`` when ``unreadable`` says why it cannot be
    read: dead-lettered). Dedup only: FIFO order needs a consumer that can park messages."""
    if unreadable is not None:
        yield Reject(message, unreadable)
        return None
    if keyed is None:
        return (yield from _unkeyed(message, on_missing_key))
    ran = yield RunOnce(keyed)
    assert type(ran) is Ran
    # The handler's own return value when it ran; for a duplicate the first run's, as stored.
    return ran.value if ran.called else ran.stored


def _unkeyed(message: Message, on_missing_key: MissingKey) -> Protocol[object]:
    """A message without a key is never run unguarded by default: it is dead-lettered."""
    if on_missing_key == "run":
        return (yield Unguarded(message))
    yield Reject(message, PermanentError(attr.REASON_INVALID_DEDUP_KEY, NO_KEY))
    return None


class Answer(enum.Enum):
    """What a subscriber callback's guard answers Pub/Sub."""

    ACK = "ack"
    NACK = "nack"  # deliver again now (Pub/Sub's backoff)
    HOLD_BACK = "hold_back"  # out of lease management: back after the setting retry interval


def answer(error: BaseException | None) -> Answer:
    """The answer after the delivery's protocol ended (``error``: None, or what it raised). A
    missing or wrong setting stops every delivery until a restart: each is held back a while
    rather than nacked into a tight loop."""
    if error is None:
        return Answer.ACK
    if isinstance(error, ConfigurationError):
        return Answer.HOLD_BACK
    return Answer.NACK


def failure_outcome(error: BaseException) -> Literal["retry", "error"]:
    """A nacked delivery's outcome: ``retry`` for a TransientError (expected: said at INFO),
    ``error`` for anything else (logged with its traceback)."""
    return "retry" if isinstance(error, TransientError) else "error"


# --- the FIFO sweeper -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListGroups:
    """List the consumer's groups that have state. Replies ``list[str]``."""


@dataclass(frozen=True, slots=True)
class Sweep:
    """Run ``group``'s periodic work (a parked head whose backoff ran out, a gap timeout)."""

    group: str


def sweep_pass(
    stopping: Callable[[], bool], busy: Callable[[str], bool]
) -> Generator[ListGroups | Sweep, object, None]:
    """One pass of a sweeper: every group, unless the consumer is ``stopping()`` (the pass
    ends) or ``busy(group)`` (this process has its work queued or running: that delivery
    does the group's work, a sweep beside it would only contend for its lease)."""
    groups = yield ListGroups()
    assert isinstance(groups, list)
    for group in groups:
        if stopping():
            return
        if not busy(group):
            yield Sweep(group)


# --- a consumer's graceful stop ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RefuseNew:
    """From now on, nack every new delivery (another consumer, or our restart, takes it)."""


@dataclass(frozen=True, slots=True)
class Drain:
    """Nack the queued deliveries; wait up to ``timeout`` seconds for the running ones to finish
    and be settled. Replies True when they all finished."""

    timeout: float


@dataclass(frozen=True, slots=True)
class CloseStream:
    """Cancel the streaming pull and wait (up to ``timeout``) for it to end."""

    timeout: float


@dataclass(frozen=True, slots=True)
class StopSweeper:
    """Stop the FIFO sweeper (a thread joined up to ``timeout``, a task cancelled)."""

    timeout: float


@dataclass(frozen=True, slots=True)
class ReleaseHeld:
    """Give back the group leases held between deliveries."""


@dataclass(frozen=True, slots=True)
class CloseClient:
    """Close the subscriber client."""


StopEffect = RefuseNew | Drain | CloseStream | StopSweeper | ReleaseHeld | CloseClient


def graceful_stop(timeout: float) -> Generator[StopEffect, object, bool]:
    """A consumer's ``stop()``; returns True when every running delivery finished in time."""
    yield RefuseNew()
    finished = yield Drain(timeout)
    # Only now: the running deliveries were acked on a stream still open - an ack sent after
    # the stream closed would be lost, and the message delivered again.
    yield CloseStream(timeout)
    yield StopSweeper(timeout)
    # Held leases given back: another consumer runs those groups at once, not after a lease.
    yield ReleaseHeld()
    yield CloseClient()
    return finished is True


def never(_: object = None) -> bool:
    """A ``stopping``/``busy`` for a sweeper that has no such notion (always False)."""
    return False


# --- drivers ---------------------------------------------------------------------------------

E = TypeVar("E")


# The drivers' loop is the one every protocol shares (pubsub_toolkit._drive).
run = _drive.run
run_async = _drive.run_async
