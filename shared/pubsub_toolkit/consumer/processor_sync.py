"""One message through the consumer-side guarantees: FIFO gate or dedup, then the handler -
:class:`SyncMessageProcessor`, the orchestration that the public
:class:`~pubsub_toolkit.consumer.processor.MessageProcessor` is (and that
:class:`~pubsub_toolkit.consumer.processor_async.AsyncMessageProcessor` drives for an ``async
def`` handler; :mod:`.processor` chooses between the two, above both).

Shared by the streaming :class:`~pubsub_toolkit.consumer.subscriber.Consumer` and the serverless
``functions/consumer`` template, so both behave alike:

* a message with ``fifo_group`` and ``fifo_seq`` goes through the group's FIFO gate (whose
  last-processed counter is also its dedup marker);
* any other message is deduplicated by its ``dedup_key`` in the consumer's namespace;
* the return value means "ack"; a TransientError means "deliver again".

A handler that raises :class:`~pubsub_toolkit.errors.RetryLater` asks for the message again
after a delay. In a FIFO group the gate does it (the head waits parked, the group holds its
place). Any other message is re-scheduled through the delay path (:class:`RetryScheduler`,
Cloud Tasks and the relay in production) as a copy with ``retry_attempt`` (its attempt number)
and ``retry_consumer`` (this consumer), and acked: its dedup claim was released, so the copy
runs when it is due. Its task and release record are keyed ``dedup_key#retry:CONSUMER:ATTEMPT``
(:func:`~pubsub_toolkit.delay.cancel.fate_key`), never the message's own key, which a message
delayed once has already used; the copy keeps its ``dedup_key``. At the consumer's
``max_attempts`` it is dead-lettered ``retry_limit`` and recorded done. The relay publishes to
the final topic, so other subscriptions of it see the copy too: a key they already handled, so
their dedup acks it as a duplicate. Without a scheduler (no ``PUBSUB_TOOLKIT_TASKS_QUEUE``) the
delay cannot be honoured: the message is nacked with a WARNING (Pub/Sub's backoff applies,
nothing is acked).

In batch mode (``batch`` > 1) the handler takes lists; :meth:`SyncMessageProcessor.process_batch`
hands a group's consecutive deliveries to the gate together. (About 365 lines: the wiring from
settings, the two paths and the RetryLater handling share the processor's state.)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Self, cast

from pubsub_toolkit import attributes as attr
from pubsub_toolkit import tracing
from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.retry import (
    REASON_RETRY_LIMIT,
    RETRY_SCHEDULED,
    RetryScheduler,
    SchedulerFromSettings,
    retry_attempt,
    retry_copy,
)
from pubsub_toolkit.core.fifo_policy import GapPolicy, GatePolicy, PoisonPolicy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor, Outcome, ProcessResult
from pubsub_toolkit.envelope import check_delivered, check_publishable
from pubsub_toolkit.errors import PermanentError, RetryLater
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import HANDLER_DURATION, DecisionLog

Handler = Callable[[Message], object]
# batch > 1: the handler takes a list (consecutive messages of one group, or one message).
BatchHandler = Callable[[list[Message]], object]


@dataclass(frozen=True)
class FifoAddress:
    """Where a message sits in its group."""

    group: str
    seq: int


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


def gate_policy(
    consumer: ConsumerSettings, *, completed_retention: timedelta | None = None
) -> GatePolicy:
    """The FIFO gate's policy from a consumer's settings; ``completed_retention`` (how long a
    complete group's tombstone lasts) is the deployment's ``DEDUP_TTL``, which already has to
    outlive the redelivery window - None keeps the default (8 days, DEDUP_TTL's default)."""
    policy = GatePolicy(
        max_attempts=consumer.max_attempts,
        poison=PoisonPolicy(consumer.poison_policy),
        gap_timeout=consumer.gap_timeout,
        gap=GapPolicy(consumer.gap_policy),
        lease=consumer.lease,
        park=consumer.park,
        retry_backoff=consumer.retry_backoff,
        lease_hold=consumer.lease_hold,
    )
    if completed_retention is None:
        return policy
    return replace(policy, completed_retention=completed_retention)


@dataclass(frozen=True)
class Wiring:
    """What a processor built from settings is made of besides its stores (which
    :mod:`pubsub_toolkit.stores.factory` builds) - the same for the sync and the async
    processor, so the two ``from_settings`` cannot drift: one decision log, dead letters
    published under a ``send`` span, the gate's policy, the dedup lease and TTL, and the
    delay path a plain message's RetryLater goes through (None without one)."""

    consumer: str
    log: DecisionLog
    dead_letters: DeadLetterer
    policy: GatePolicy
    lease: timedelta
    ttl: timedelta
    scheduler: RetryScheduler | None
    max_attempts: int

    @classmethod
    def of(cls, settings: Settings, consumer: ConsumerSettings) -> Wiring:
        """The parts ``settings`` and ``consumer`` ask for (clients made once, here)."""
        from pubsub_toolkit.producer.sink import PubSubSink

        log = DecisionLog(consumer.consumer_id)
        sink = tracing.traced(PubSubSink(), hop="consumer")
        return cls(
            consumer=consumer.consumer_id,
            log=log,
            dead_letters=DeadLetterer(sink, settings.dead_letter_topic, log),
            policy=gate_policy(consumer, completed_retention=settings.dedup_ttl),
            lease=settings.dedup_lease,
            ttl=settings.dedup_ttl,
            scheduler=None if settings.delay is None else SchedulerFromSettings(settings.delay),
            max_attempts=consumer.max_attempts,
        )

    def processor(self) -> dict[str, Any]:
        """The processor's own keyword arguments (beside its handler, dedup and gate)."""
        return {
            "dead_letters": self.dead_letters,
            "scheduler": self.scheduler,
            "max_attempts": self.max_attempts,
        }


class SyncMessageProcessor:
    """Applies the gate or dedup to one message and runs the user's (sync) handler."""

    def __init__(
        self,
        *,
        handler: Handler,
        dedup: IdempotentProcessor,
        gate: FifoGate,
        dead_letters: DeadLetterer | None = None,
        scheduler: RetryScheduler | None = None,
        max_attempts: int = 5,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """``scheduler`` re-schedules a plain message whose handler raised RetryLater (None:
        such a message is nacked); ``max_attempts`` bounds those attempts (as the gate's)."""
        self._handler = handler
        self._dedup = dedup
        self.gate = gate
        self._dead_letters = dead_letters
        self._scheduler = scheduler
        self._max_attempts = max_attempts
        self._clock = clock
        # Dead-letters a mismatching copy once, however often it is redelivered.
        self._rejections = dedup.sibling(f"{dedup.namespace}-rejected", log=dedup.log)
        if gate.rejections is None:
            gate.rejections = self._rejections  # the gate's dead letters also happen once

    @classmethod
    def _wired(
        cls,
        settings: Settings,
        consumer: ConsumerSettings,
        handler: Handler | BatchHandler,
        *,
        batch: int = 1,
    ) -> Self:
        """Wire the store, gate, dead-lettering and dedup from settings (clients made once) for
        a sync handler: what ``MessageProcessor.from_settings`` builds for one (see there)."""
        from pubsub_toolkit.stores.factory import backend_from_settings

        backend = backend_from_settings(settings)  # one client for both stores
        wired = Wiring.of(settings, consumer)
        gate = FifoGate(
            backend.fifo_store(),
            consumer=wired.consumer,
            handler=cast(Handler, handler),
            dead_letters=wired.dead_letters,
            policy=wired.policy,
            log=wired.log,
            batch=batch,
        )
        dedup = IdempotentProcessor(
            backend.dedup_store(),
            namespace=wired.consumer,
            lease=wired.lease,
            ttl=wired.ttl,
            log=wired.log,
        )
        return cls(handler=cast(Handler, handler), dedup=dedup, gate=gate, **wired.processor())

    def process(self, message: Message) -> str:
        """Handle ``message``; return the outcome (ack). Raises TransientError to nack."""
        with tracing.handling(message, self._dedup.namespace, hop="consumer") as span:
            outcome = self._process(message)
            if span is not None:
                span.set_attribute(tracing.OUTCOME, outcome)
            return outcome

    def _process(self, message: Message) -> str:
        try:
            address = fifo_address(message)
        except PermanentError as exc:
            return self._reject_in_order(message, exc)
        if address is not None:
            return self.gate.deliver(message, address.group, address.seq).outcome.value

        handler: Callable[[Any], object] = self._handler
        one = [message] if self.gate.batch > 1 else message

        def timed() -> object:
            started = time.perf_counter()
            result = handler(one)
            self._dedup.log.metrics.observe(HANDLER_DURATION, time.perf_counter() - started)
            return result

        return self._run_once(message, timed)[0]  # checked above, by fifo_address

    def process_batch(self, messages: Sequence[Message]) -> list[str | Exception]:
        """Handle consecutive deliveries of one FIFO group together: in batch mode the run
        from the group's head goes to the handler as one list (see ``FifoGate``). One result
        per message, in order: an outcome (ack) or the exception to nack it for."""
        addresses = []
        for message in messages:
            try:
                addresses.append(fifo_address(message))
            except PermanentError:
                addresses.append(None)
        groups = {a.group for a in addresses if a is not None}
        if len(groups) != 1 or None in addresses:
            return [self._outcome(message) for message in messages]
        deliveries = [(m, a.seq) for m, a in zip(messages, addresses, strict=True) if a]
        results = self.gate.deliver_batch(groups.pop(), deliveries)
        return [r if isinstance(r, Exception) else r.outcome.value for r in results]

    def _outcome(self, message: Message) -> str | Exception:
        try:
            return self.process(message)
        except Exception as exc:  # the caller nacks it, and logs why
            return exc

    def run_once(self, message: Message, call: Callable[[], object]) -> tuple[str, str | None]:
        """The plain (non-FIFO) path with ``call`` as the effect: once per dedup key, a
        RetryLater re-scheduled (or poison at the limit). Returns (outcome, stored result).
        A message whose key or group breaks the contract is dead-lettered, never run (the
        decorator's CloudEvent path comes here without :func:`fifo_address`)."""
        try:
            check_delivered(message.attributes)
        except PermanentError as exc:
            return self.reject(message, exc), None
        return self._run_once(message, call)

    def _run_once(self, message: Message, call: Callable[[], object]) -> tuple[str, str | None]:
        limited: list[str] = []

        def effect() -> str | None:
            try:
                result = call()
            except RetryLater as exc:
                if not self._at_retry_limit(message):
                    raise  # the claim is released; re-scheduled below
                # The last attempt: poison, recorded done so no copy starts the count again.
                limited.append(self._retry_limit(message, exc))
                return None
            return None if result is None else str(result)

        try:
            processed = self.dedup_once(message, effect)
        except RetryLater as exc:
            return self.retry_later(message, exc), None
        if limited:
            return limited[0], None
        if processed.outcome is Outcome.MISMATCH:
            return "dead_lettered", None
        return processed.outcome.value, processed.result

    def retry_later(self, message: Message, exc: RetryLater) -> str:
        """Re-schedule a plain ``message`` whose handler raised ``exc`` (below the attempt
        limit, its claim released): a copy due in ``exc.delay``; returns the outcome (ack).

        Raises ``exc`` (nack) when no scheduler is configured; a copy Cloud Tasks cannot hold
        (too large, too far ahead) is dead-lettered with the scheduler's reason.
        """
        consumer = self._dedup.namespace
        key = message.attributes.get(attr.DEDUP_KEY) or message.message_id
        try:
            attempt = retry_attempt(message, consumer) + 1
        except PermanentError as error:
            return self.reject(message, error)
        log = self._dedup.log
        if self._scheduler is None:
            log.decision(
                "retry_later_unscheduled",
                f"RetryLater({exc.delay}) cannot be honoured: no delay path "
                "(PUBSUB_TOOLKIT_TASKS_QUEUE unset); nacked, Pub/Sub's retry backoff decides "
                "when it comes again",
                dedup_key=key,
                level=logging.WARNING,
            )
            raise exc
        copy = retry_copy(message, key, consumer, attempt)
        due = self._clock.now() + exc.delay
        try:
            check_publishable(copy.data, copy.attributes)  # the relay would refuse it
            self._scheduler.schedule(copy, due, key)
        except PermanentError as error:
            return self.reject(message, error)
        log.decision(
            RETRY_SCHEDULED,
            f"RetryLater: attempt {attempt} of {self._max_attempts} due "
            f"{attr.format_time(due)} (in {exc.delay})" + (f": {exc.reason}" if exc.reason else ""),
            dedup_key=key,
            retry_attempt=attempt,
        )
        return RETRY_SCHEDULED

    def _at_retry_limit(self, message: Message) -> bool:
        try:
            return retry_attempt(message, self._dedup.namespace) >= self._max_attempts
        except PermanentError:
            return False  # retry_later dead-letters the malformed count

    def _retry_limit(self, message: Message, exc: RetryLater) -> str:
        detail = f"RetryLater on attempt {self._max_attempts} of {self._max_attempts}: {exc}"
        return self.reject(message, PermanentError(REASON_RETRY_LIMIT, detail))

    def dedup_once(self, message: Message, effect: Callable[[], str | None]) -> ProcessResult:
        """Run ``effect`` once per ``message``'s dedup key (no FIFO gate): a duplicate returns
        the stored result, a reused key with other content is dead-lettered once (outcome
        MISMATCH). Raises ClaimInProgressError while another delivery holds the key."""
        key = message.attributes.get(attr.DEDUP_KEY) or message.message_id
        fingerprint = message.attributes.get(attr.CONTENT_SHA256) or attr.content_fingerprint(
            message.data, message.attributes
        )
        processed = self._dedup.process(
            key, fingerprint, effect, context={"message_id": message.message_id}
        )
        if processed.outcome is Outcome.MISMATCH:
            error = PermanentError(attr.REASON_FINGERPRINT_MISMATCH, f"dedup_key {key!r} reused")
            self._rejections.process(
                f"mismatch:{key}:{fingerprint}", fingerprint, lambda: self.reject(message, error)
            )
        return processed

    def _reject_in_order(self, message: Message, exc: PermanentError) -> str:
        """Dead-letter ``message``; if it still carries a valid group and number, first hand the
        gate a filler for that number (as ingress does for what it dead-letters), so the group
        moves past it instead of waiting for a message that will not come."""
        number = attr.fifo_number(message)
        if number is not None and self._dead_letters is not None:
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
            self.gate.deliver(
                Message(filler.data, filler.attributes, message_id=message.message_id), group, seq
            )
        return self.reject(message, exc)

    def reject(self, message: Message, exc: PermanentError) -> str:
        """Dead-letter ``message`` with the error's reason (raises it without a dead-letter
        topic, so nothing is acked silently)."""
        if self._dead_letters is None:
            raise exc
        key = message.attributes.get(attr.DEDUP_KEY) or message.message_id
        self._dead_letters.send(message, exc.reason, exc.detail, dedup_key=key)
        return "dead_lettered"
