"""The message processor's path, written once and without I/O: route, run once, retry, reject.

What :class:`~pubsub_toolkit.consumer.processor.MessageProcessor` decides for one message (see
:mod:`pubsub_toolkit.consumer.processor_sync` for the behaviour) as generator protocols in the
style of :mod:`.idempotent_run`: each *yields* the effect it needs and receives its result (or
has the effect's exception thrown in where it yielded). The sync processor performs them
(:func:`run`), :class:`~pubsub_toolkit.consumer.processor_async.AsyncMessageProcessor` awaits
them (:func:`run_async`), the blocking ones off the loop; neither decides anything.

* :class:`Deliver` / :class:`DeliverBatch` - the FIFO gate's delivery of a grouped message (or
  of a group's consecutive deliveries); replies its GateResult (a list of them);
* :class:`Process` - one message through :func:`process` again, with its own span (a batch
  that is not one group's); replies the outcome, or its exception as the reply;
* :class:`RunOnce` - the idempotent processor's run of ``run`` (a protocol of this module,
  driven by the same driver as the effect) once per key; replies the ProcessResult;
* :class:`RejectOnce` - the same over the processor's rejection records (a dead letter sent
  once per copy); replies its ProcessResult;
* :class:`CallHandler` - the user's handler (or the decorator's call); replies its return;
* :class:`DeadLetter` - publish to the dead-letter topic; replies the message id;
* :class:`ScheduleRetry` - a plain message's RetryLater copy through the delay path (Cloud
  Tasks); replies the task's name, PermanentError when the relay could not take the copy.

Decisions are logged directly through the scope's :class:`~.idempotent_run.Decisions` log and
the clock is read directly, as :mod:`.idempotent_run` does (the protocol runs between effects).

(About 430 lines: the eight effects both processors perform and every path of a message through
the processor - one, a batch, the decorator's call, RetryLater, reject - kept together so both
drivers read them in one place.)
"""

from __future__ import annotations

import logging
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from pubsub_toolkit import _drive
from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import Clock
from pubsub_toolkit.core.fifo_policy import GateOutcome, GateResult
from pubsub_toolkit.core.idempotent_run import Decisions, Outcome, ProcessResult
from pubsub_toolkit.envelope import check_delivered
from pubsub_toolkit.errors import PermanentError, RetryLater
from pubsub_toolkit.message import Message

# consumer.retry re-exports these two (the drivers' layer).
REASON_RETRY_LIMIT = "retry_limit"
RETRY_SCHEDULED = "retry_scheduled"  # the outcome of a RetryLater re-scheduled (ack)
DEAD_LETTERED = GateOutcome.DEAD_LETTERED.value  # one outcome for the gate's and the plain path
# The stored result of a plain message this consumer dead-lettered (a handler's PermanentError,
# RetryLater at its limit), followed by the replay_id of the copy that was (empty for the
# original): its redeliveries stay duplicates, but a `dlq replay` of it (the cause fixed) must
# run, which a bare None - also what a handler may return - cannot tell. Never handed to a
# caller (see _run_once).
DEAD_LETTERED_RESULT = "\x00dead_lettered:"
# A replay of a key dead-lettered here runs under the key plus this, one level per
# dead-lettering: the first replay to reach a level runs there, and a level whose handler ran
# ends the chain for every later copy, so the handler succeeds at most once per key.
REPLAYED_SUFFIX = "#replayed"
T = TypeVar("T")


# --- effects ----------------------------------------------------------------------------------

# Built on every delivery: immutable NamedTuples, as idempotent_run's effects, not frozen
# dataclasses (whose __init__ sets each field through object.__setattr__ at about twice the cost).


class Deliver(NamedTuple):
    """The FIFO gate's delivery of ``message`` at ``seq`` of ``group``. Replies a GateResult."""

    message: Message
    group: str
    seq: int


class DeliverBatch(NamedTuple):
    """The gate's delivery of ``group``'s ``(message, seq)`` pairs together (batch mode).
    Replies one GateResult or exception per delivery."""

    group: str
    deliveries: Sequence[tuple[Message, int]]


class Process(NamedTuple):
    """``message`` through the processor on its own (its own span). Replies the outcome; an
    exception is the caller's to nack for (thrown in)."""

    message: Message


class RunOnce(NamedTuple):
    """Drive ``run`` (this module's protocol, the same driver) as the dedup processor's effect
    for ``key``: once per key. Replies the ProcessResult."""

    key: str
    fingerprint: str
    context: Mapping[str, Any]
    run: Step[str | None]


class RejectOnce(NamedTuple):
    """Drive ``run`` once per ``once`` in the processor's rejection records. Replies the
    ProcessResult."""

    once: str
    digest: str
    run: Step[str]


class CallHandler(NamedTuple):
    """Call the handler with ``argument`` (a message, or a list of one in batch mode; the
    decorator's call ignores it). Replies what it returned."""

    argument: object


class DeadLetter(NamedTuple):
    """Publish ``message`` to the dead-letter topic with ``reason``. Replies the message id."""

    message: Message
    reason: str
    detail: str
    dedup_key: str


class ScheduleRetry(NamedTuple):
    """Re-schedule ``message`` as ``consumer``'s attempt ``attempt``, due ``due`` (the delay
    path; see :func:`pubsub_toolkit.consumer.retry.retry_copy`). Replies the task's name;
    PermanentError (thrown in) when the copy cannot be held or published."""

    message: Message
    dedup_key: str
    consumer: str
    attempt: int
    due: datetime


Effect = (
    Deliver
    | DeliverBatch
    | Process
    | RunOnce
    | RejectOnce
    | CallHandler
    | DeadLetter
    | ScheduleRetry
)
# A reply's type is the effect's (Deliver: a GateResult, CallHandler: what it returned, ...).
Step = Generator[Effect, Any, T]


@dataclass(frozen=True, slots=True)
class Scope:
    """One processor as the protocol sees it: its consumer (the dedup namespace), its limits,
    what is configured (a dead-letter topic, a delay path, batch mode) and its log and clock."""

    consumer: str
    max_attempts: int
    dead_letters: bool
    scheduler: bool
    batch: bool
    log: Decisions
    clock: Clock


@dataclass(frozen=True)
class FifoAddress:
    """Where a message sits in its group."""

    group: str
    seq: int


# --- pure parts ---------------------------------------------------------------------------------


def fifo_address(message: Message) -> FifoAddress | None:
    """The message's group and number, or None for a message outside any group.

    The number is parsed by the same contract rule as at ingress (one canonical form, at most
    ``MAX_FIFO_SEQ``), so a number ingress would refuse is dead-lettered here too instead of
    crash-looping on a store that cannot hold it. So is a ``fifo_end`` other than ``"true"``:
    the gate must never guess whether a group ended. So are a blank key or group, and a number
    or an end without a group (:func:`~pubsub_toolkit.envelope.check_delivered`).
    """
    check_delivered(message.attributes)
    group = message.attributes.get(attr.FIFO_GROUP)
    raw_seq = message.attributes.get(attr.FIFO_SEQ)
    if group is None or raw_seq is None:
        return None
    address = FifoAddress(group, attr.parse_fifo_seq(raw_seq))
    attr.parse_fifo_end(message.attributes.get(attr.FIFO_END))
    return address


def fifo_route(message: Message) -> FifoAddress | None:
    """Where a consumer queues ``message``: its :func:`fifo_address`, or None - outside any
    group, or an address that breaks the contract (the processor dead-letters that one)."""
    try:
        return fifo_address(message)
    except PermanentError:
        return None


def retry_attempt(message: Message, consumer: str) -> int:
    """Which attempt of ``consumer`` this delivery is: ``retry_attempt`` when the copy was
    re-scheduled by this consumer, else 1 (another consumer's count is not ours).
    ContractViolation(``invalid_retry_attempt``) for a value not in canonical form."""
    raw = message.attributes.get(attr.RETRY_ATTEMPT)
    if raw is None or message.attributes.get(attr.RETRY_CONSUMER) != consumer:
        return 1
    return attr.parse_retry_attempt(raw)


def dedup_key(message: Message) -> str:
    """The key a message is deduplicated (and dead-lettered) by: its ``dedup_key``, else its id."""
    return message.attributes.get(attr.DEDUP_KEY) or message.message_id


# --- the protocols ------------------------------------------------------------------------------


def process(scope: Scope, message: Message) -> Step[str]:
    """One message: a grouped one through the gate, any other run once per dedup key (a
    RetryLater re-scheduled), a broken address dead-lettered. Returns the outcome (ack)."""
    try:
        address = fifo_address(message)
    except PermanentError as exc:
        return (yield from reject_in_order(scope, message, exc))
    if address is not None:
        result: GateResult = yield Deliver(message, address.group, address.seq)
        return result.outcome.value
    argument: object = [message] if scope.batch else message
    outcome, _ = yield from _run_once(scope, message, argument)
    return outcome


def process_batch(scope: Scope, messages: Sequence[Message]) -> Step[list[str | Exception]]:
    """Consecutive deliveries of one group to the gate together; anything else one at a time.
    Returns one outcome or exception (nack) per message, in order."""
    addresses = [fifo_route(message) for message in messages]
    groups = {a.group for a in addresses if a is not None}
    if len(groups) != 1 or None in addresses:
        outcomes: list[str | Exception] = []
        for message in messages:
            try:
                outcomes.append((yield Process(message)))
            except Exception as exc:  # the caller nacks it, and logs why
                outcomes.append(exc)
        return outcomes
    deliveries = [(m, a.seq) for m, a in zip(messages, addresses, strict=True) if a]
    results: list[GateResult | Exception] = yield DeliverBatch(groups.pop(), deliveries)
    return [r if isinstance(r, Exception) else r.outcome.value for r in results]


def run_once(scope: Scope, message: Message) -> Step[tuple[str, str | None]]:
    """The plain path with the caller's call as the handler (the decorator's CloudEvent path,
    which comes without :func:`fifo_address`): returns (outcome, stored result). A message
    whose key or group breaks the contract is dead-lettered, never run."""
    try:
        check_delivered(message.attributes)
    except PermanentError as exc:
        return (yield from reject(scope, message, exc)), None
    return (yield from _run_once(scope, message, None))


def _run_once(scope: Scope, message: Message, argument: object) -> Step[tuple[str, str | None]]:
    key = dedup_key(message)
    replay_id = message.attributes.get(attr.REPLAY_ID, "")
    while True:
        limited: list[str] = []  # the outcome of a dead letter run_handler sent (poison, refused)
        try:
            processed = yield from dedup_once(
                scope, message, run_handler(scope, message, argument, limited), key=key
            )
        except RetryLater as exc:  # below the limit: the claim is released, the copy re-scheduled
            return (yield from retry_later(scope, message, exc)), None
        if limited:
            return limited[0], None
        if processed.outcome is Outcome.MISMATCH:
            return DEAD_LETTERED, None
        result = processed.result
        if result is None or not result.startswith(DEAD_LETTERED_RESULT):
            return processed.outcome.value, result
        if not replay_id or result == DEAD_LETTERED_RESULT + replay_id:
            # A redelivery of the copy dead-lettered at this level: acked, not sent twice.
            return processed.outcome.value, None
        # A replay (the cause fixed, operate.md) of a message this consumer dead-lettered: its
        # record says so, not that the handler ran - run it, once, a level further on.
        key += REPLAYED_SUFFIX


def run_handler(
    scope: Scope, message: Message, argument: object, limited: list[str]
) -> Step[str | None]:
    """A plain message's effect under its dedup claim: the handler, called with ``argument``.
    Its PermanentError is dead-lettered with the error's reason and its RetryLater at the
    limit is poison (``limited`` gets the outcome), each recorded done (DEAD_LETTERED_RESULT
    and its replay_id) so no copy starts the count again or is dead-lettered twice, while a
    replay of it runs; its result is stored as text."""
    try:
        result = yield CallHandler(argument)
    except PermanentError as exc:
        # "It can never succeed" (errors.md): a dead letter and an ack, not a redelivery.
        # Without a dead-letter topic reject raises it: the claim is released, it comes again.
        limited.append((yield from reject(scope, message, exc)))
        return DEAD_LETTERED_RESULT + message.attributes.get(attr.REPLAY_ID, "")
    except RetryLater as exc:
        if not _at_retry_limit(scope, message):
            raise  # the claim is released; re-scheduled by _run_once
        limit = scope.max_attempts
        detail = f"RetryLater on attempt {limit} of {limit}: {exc}"
        limited.append(
            (yield from reject(scope, message, PermanentError(REASON_RETRY_LIMIT, detail)))
        )
        return DEAD_LETTERED_RESULT + message.attributes.get(attr.REPLAY_ID, "")
    return None if result is None else str(result)


def call_handler() -> Step[str | None]:
    """The handler as a dedup effect on its own (:meth:`SyncMessageProcessor.dedup_once`)."""
    result: str | None = yield CallHandler(None)
    return result


def dedup_once(
    scope: Scope, message: Message, run: Step[str | None], *, key: str | None = None
) -> Step[ProcessResult]:
    """Run ``run`` once per ``message``'s dedup key (or ``key``): a duplicate returns the stored
    result, a reused key with other content is dead-lettered once (outcome MISMATCH). Returns
    the ProcessResult; ClaimInProgressError (from RunOnce) while another delivery holds the key."""
    key = dedup_key(message) if key is None else key
    fingerprint = message.attributes.get(attr.CONTENT_SHA256) or attr.content_fingerprint(
        message.data, message.attributes
    )
    processed: ProcessResult = yield RunOnce(
        key, fingerprint, {"message_id": message.message_id}, run
    )
    if processed.outcome is Outcome.MISMATCH:
        error = PermanentError(attr.REASON_FINGERPRINT_MISMATCH, f"dedup_key {key!r} reused")
        # Once per copy, and once per replay of it: a replay took the letter off the
        # dead-letter topic and cannot run either, so it must leave a new one.
        replay_id = message.attributes.get(attr.REPLAY_ID)
        once = f"mismatch:{key}:{fingerprint}" + (f":replay:{replay_id}" if replay_id else "")
        yield RejectOnce(once, fingerprint, reject(scope, message, error))
    return processed


def retry_later(scope: Scope, message: Message, exc: RetryLater) -> Step[str]:
    """Re-schedule a plain ``message`` whose handler raised ``exc`` (below the attempt limit,
    its claim released): a copy due in ``exc.delay``; returns the outcome (ack).

    Raises ``exc`` (nack) without a delay path; a copy the delay path cannot hold (too large,
    too far ahead) or a malformed attempt count is dead-lettered with its reason."""
    key = dedup_key(message)
    try:
        attempt = retry_attempt(message, scope.consumer) + 1
    except PermanentError as error:
        return (yield from reject(scope, message, error))
    if not scope.scheduler:
        scope.log.decision(
            "retry_later_unscheduled",
            f"RetryLater({exc.delay}) cannot be honoured: no delay path "
            "(PUBSUB_TOOLKIT_TASKS_QUEUE unset); nacked, Pub/Sub's retry backoff decides "
            "when it comes again",
            dedup_key=key,
            level=logging.WARNING,
        )
        raise exc
    due = scope.clock.now() + exc.delay
    try:
        yield ScheduleRetry(message, key, scope.consumer, attempt, due)
    except PermanentError as error:
        return (yield from reject(scope, message, error))
    scope.log.decision(
        RETRY_SCHEDULED,
        f"RetryLater: attempt {attempt} of {scope.max_attempts} due "
        f"{attr.format_time(due)} (in {exc.delay})" + (f": {exc.reason}" if exc.reason else ""),
        dedup_key=key,
        retry_attempt=attempt,
    )
    return RETRY_SCHEDULED


def _at_retry_limit(scope: Scope, message: Message) -> bool:
    try:
        return retry_attempt(message, scope.consumer) >= scope.max_attempts
    except PermanentError:
        return False  # retry_later dead-letters the malformed count


def reject_in_order(scope: Scope, message: Message, exc: PermanentError) -> Step[str]:
    """Dead-letter ``message``; if it still carries a valid group and number, first hand the
    gate a filler for that number (as ingress does for what it dead-letters), so the group
    moves past it instead of waiting for a message that will not come."""
    number = attr.fifo_number(message)
    if number is not None and scope.dead_letters:
        group, seq = number
        why = f"{attr.FILLER_DEAD_LETTERED}{exc.reason}"
        filler = attr.filler_message(
            group,
            seq,
            f"{group}#{seq}:{message.message_id}",
            why,
            epoch=message.attributes.get(attr.FIFO_EPOCH),
        )
        # Before the dead letter: a crash in between redelivers the message, whose filler
        # is then a duplicate - the other order would dead-letter it twice.
        yield Deliver(
            Message(filler.data, filler.attributes, message_id=message.message_id), group, seq
        )
    return (yield from reject(scope, message, exc))


def reject(scope: Scope, message: Message, exc: PermanentError) -> Step[str]:
    """Dead-letter ``message`` with the error's reason; returns the outcome. Raises ``exc``
    without a dead-letter topic, so nothing is acked silently."""
    if not scope.dead_letters:
        raise exc
    yield DeadLetter(message, exc.reason, exc.detail, dedup_key(message))
    return DEAD_LETTERED


# The drivers' loop is the one every protocol shares (pubsub_toolkit._drive).
run = _drive.run
run_async = _drive.run_async
