"""The relay's last attempts, decided without I/O: hand the message to a task of its own, or
dead-letter it - never lose it, never both.

Why each end is right is told in :mod:`pubsub_toolkit.delay.last_attempt`, which performs them
(the scheduler's creates, the dead letter, the filler, the ALERTs). Here are the decisions:

* :func:`hand_over` - whether a next task may be made at all (a scheduler, a hop a body may
  carry, not too long past due), then the creates: a generator that *yields*
  :class:`CreateTask` and receives :class:`Created`, :class:`Refused` or :class:`InDoubt`,
  returning a :class:`HandOverVerdict` (made, not made, or unconfirmed);
* :func:`on_failure` - which path a transient failure takes on Cloud Tasks' attempts;
* :func:`last_attempt` - the end of a failed attempt: answer 5xx again, answer 2xx for a
  message this process published, rescheduled, handed to the operator, or dead-lettered;
* :func:`give_up_reason` - the dead letter's reason for a failure.
"""

from __future__ import annotations

import enum
from collections.abc import Generator
from dataclasses import dataclass
from datetime import timedelta

from pubsub_toolkit.errors import StoreUnavailableError

REASON_STORE_UNAVAILABLE = "relay_store_unavailable"
REASON_RETRIES_EXHAUSTED = "relay_retries_exhausted"
# The filler's reason for a FIFO number handed to the operator (its hand-over task in doubt).
REASON_HANDOVER_UNCONFIRMED = "relay_handover_unconfirmed"
# Creates of the next task tried per attempt: the name is fixed, so a create that timed out
# after Cloud Tasks applied it is answered AlreadyExists by the next try.
CONTINUE_TRIES = 3
# How far past the hand-over limit a last attempt still creates the next task's name again.
# Longer than any wait between the last two attempts (the queue's max_backoff: 300 s deployed,
# Cloud Tasks' default 1 h) and between duplicate runs, so a create the attempt before it (or a
# duplicate run) left in doubt inside the limit is settled by AlreadyExists, never refused on
# time and dead-lettered beside the release of the task it made.
HANDOVER_GRACE = timedelta(hours=2)


class HandOver(enum.StrEnum):
    """What the hand-over to a next task did with the message."""

    MADE = "made"  # the next task exists (created, or AlreadyExists): it has the message
    NOT_MADE = "not_made"  # known not made (refused, no scheduler, past the limit): dead-letter
    UNCONFIRMED = "unconfirmed"  # may exist: handed to the operator in an ALERT, no dead letter


@dataclass(frozen=True, slots=True)
class CreateTask:
    """Create the next hop's task (its name fixed by the message and the hop). Replies
    :class:`Created`, :class:`Refused` or :class:`InDoubt`."""

    hop: int


@dataclass(frozen=True, slots=True)
class Created:
    """The task exists (created now, or AlreadyExists)."""


@dataclass(frozen=True, slots=True)
class Refused:
    """Cloud Tasks refused the request as it is: another try is refused the same."""

    error: str


@dataclass(frozen=True, slots=True)
class InDoubt:
    """The create failed in a way that may have applied it (a timeout, an outage)."""

    error: str


CreateReply = Created | Refused | InDoubt


@dataclass(frozen=True)
class HandOverVerdict:
    """How the hand-over ended: ``why_not`` (not made: for the dead letter's detail);
    ``tried``: the creates were tried, and ``error`` is the failure of the last one (not made:
    the refusal) or the one that may have made the task (unconfirmed)."""

    handed: HandOver
    hop: int
    why_not: str = ""
    tried: bool = False
    error: str = ""


def hand_over(
    *,
    hop: int,
    max_hop: int,
    has_scheduler: bool,
    overdue: timedelta,
    limit: timedelta,
    final: bool,
) -> Generator[CreateTask, CreateReply, HandOverVerdict]:
    """Hand a message to the task of its next hop ``hop`` (see the module doc).

    ``overdue``: how long past its due time it is now; past ``limit`` (``DEDUP_TTL``) it is not
    handed over - the last attempt (``final``) up to :data:`HANDOVER_GRACE` past it still
    creates the name again: a time-based refusal must not override a create that may have
    been applied (the attempt before the last hands over inside the limit and leaves a doubt
    to this one).
    """
    if not has_scheduler:
        return HandOverVerdict(HandOver.NOT_MADE, hop, "no scheduler to make a task with")
    if hop > max_hop:
        why = f"its hop {hop - 1} is the last a task body may carry"
        return HandOverVerdict(HandOver.NOT_MADE, hop, why)
    if overdue >= (limit + HANDOVER_GRACE if final else limit):
        why = (
            f"it is {_days(overdue)} past its due time: handed over only until DEDUP_TTL "
            f"({_days(limit)}) past it"
        )
        return HandOverVerdict(HandOver.NOT_MADE, hop, why)
    doubt: str | None = None  # a failure that may have made the task
    error = ""
    for _ in range(CONTINUE_TRIES):
        reply = yield CreateTask(hop)
        if isinstance(reply, Created):
            return HandOverVerdict(HandOver.MADE, hop, tried=True)
        error = reply.error
        if isinstance(reply, Refused):
            break  # refused as it is: another try is refused the same
        doubt = reply.error
    if doubt is not None:
        # The last attempt but one answers 5xx: the last creates the same name again
        # (AlreadyExists if it was made). The last hands the message to the operator.
        return HandOverVerdict(HandOver.UNCONFIRMED, hop, tried=True, error=doubt)
    why = f"Cloud Tasks refused its next task ({error})"
    return HandOverVerdict(HandOver.NOT_MADE, hop, why, tried=True, error=error)


class LastEnd(enum.StrEnum):
    """How a failed last (or last but one) attempt ends."""

    RETRY = "retry"  # answer 5xx again: the last attempt decides
    PUBLISHED = "published"  # this process published it: 2xx, no dead letter
    RESCHEDULED = "rescheduled"  # a task of the relay's own has it: 2xx
    TO_OPERATOR = "to_operator"  # its task may exist: the operator has it; a FIFO number filled
    DEAD_LETTER = "dead_letter"  # no task: dead-letter it (a FIFO number filled)
    DEAD_LETTER_BODY = "dead_letter_body"  # no message to hand over: dead-letter the body


@dataclass(frozen=True, slots=True)
class HandOverNow:
    """Hand the message over (:func:`hand_over`). Replies the :class:`HandOver`."""


def last_attempt(
    *, final: bool, parsed: bool, published_here: bool
) -> Generator[HandOverNow, HandOver, LastEnd]:
    """Decide a failed attempt that Cloud Tasks deletes after (``final``), or the one before.

    ``parsed``: the task body is a message (else only its bytes can be dead-lettered - a second
    copy of its once-only dead letter, which needed the store, beats none). ``published_here``:
    this process put it on the final topic (the store may not have recorded it): answered 2xx
    on the last attempt, never dead-lettered - and not handed over on the one before.

    The last attempt but one answers 2xx only for a task known made: a create in doubt is
    answered 5xx, so the last attempt - Cloud Tasks' own retry - creates the same name again
    and learns the outcome. The last attempt never answers 5xx (the task would be lost): a
    task the queue has, or may have, is never dead-lettered too.
    """
    if not parsed:
        return LastEnd.DEAD_LETTER_BODY if final else LastEnd.RETRY
    if published_here:
        return LastEnd.PUBLISHED if final else LastEnd.RETRY
    handed = yield HandOverNow()
    if not final:
        if handed is not HandOver.MADE:
            return LastEnd.RETRY
        return LastEnd.RESCHEDULED
    if handed is not HandOver.NOT_MADE:
        return LastEnd.TO_OPERATOR if handed is HandOver.UNCONFIRMED else LastEnd.RESCHEDULED
    return LastEnd.DEAD_LETTER


class OnFailure(enum.StrEnum):
    """What a transient failure of a release request leads to."""

    RETRY = "retry"  # answer 5xx: Cloud Tasks tries again
    HAND_OVER_EARLY = "hand_over_early"  # the last attempt but one: hand over (2xx if made)
    LAST_ATTEMPT = "last_attempt"  # Cloud Tasks deletes the task after this answer


def on_failure(*, last: bool, last_but_one: bool) -> OnFailure:
    """Which path a transient failure takes, from :mod:`pubsub_toolkit.delay.attempts`'
    answers for the request's attempt number."""
    if not last:
        if last_but_one:
            return OnFailure.HAND_OVER_EARLY
        return OnFailure.RETRY
    return OnFailure.LAST_ATTEMPT


def give_up_reason(failure: Exception) -> str:
    """The dead-letter reason for a last attempt's failure: the store unreachable, or any
    other transient failure (the final topic, the next hop, a release claimed elsewhere)."""
    if isinstance(failure, StoreUnavailableError):
        return REASON_STORE_UNAVAILABLE
    return REASON_RETRIES_EXHAUSTED


def _days(span: timedelta) -> str:
    return f"{span.total_seconds() / 86_400:.1f} days"
