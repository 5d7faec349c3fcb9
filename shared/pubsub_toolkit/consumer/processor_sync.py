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
hands a group's consecutive deliveries to the gate together.

Every decision above is :mod:`pubsub_toolkit.core.process`'s, a protocol of effects (deliver to
the gate, run once, call the handler, schedule a retry, dead-letter) that this class performs
(its :meth:`~SyncMessageProcessor._perform`) and that the asyncio processor awaits: the two
processors cannot drift apart.

(About 310 lines, a third of them this overview: the behaviour users rely on is described
here once, beside the wiring from settings that the sync and asyncio processors share.)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import partial
from typing import Any, Self, TypeVar, assert_never, cast

from pubsub_toolkit import tracing
from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.retry import RetryScheduler, SchedulerFromSettings, retry_copy
from pubsub_toolkit.core import process as protocol
from pubsub_toolkit.core.fifo_policy import GapPolicy, GatePolicy, PoisonPolicy
from pubsub_toolkit.core.process import (  # importable from here, as before
    FifoAddress,
    fifo_address,
    fifo_route,
)
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor, ProcessResult
from pubsub_toolkit.envelope import check_publishable
from pubsub_toolkit.errors import PermanentError, RetryLater
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.observability import HANDLER_DURATION, DecisionLog

__all__ = [
    "BatchHandler",
    "FifoAddress",
    "Handler",
    "SyncMessageProcessor",
    "Wiring",
    "fifo_address",
    "fifo_route",
    "gate_policy",
    "publishable_retry",
]

T = TypeVar("T")

Handler = Callable[[Message], object]
# batch > 1: the handler takes a list (consecutive messages of one group, or one message).
BatchHandler = Callable[[list[Message]], object]


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


def publishable_retry(effect: protocol.ScheduleRetry) -> OutboundMessage:
    """The copy a :class:`~pubsub_toolkit.core.process.ScheduleRetry` re-schedules, checked as
    the relay will check it (PermanentError when it could not be published) - for both
    processors' drivers."""
    copy = retry_copy(effect.message, effect.dedup_key, effect.consumer, effect.attempt)
    check_publishable(copy.data, copy.attributes)
    return copy


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
        # One call shape for a handler and a batch handler (the argument is a list in batch
        # mode); cast once here, not per delivery (a runtime cast builds its generic alias).
        self._handler = cast(Callable[[object], object], handler)
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
        # The protocol's view of this processor, made once (per delivery it was a measurable
        # share of the sync path's cost): its parts are fixed once constructed.
        self._scope = protocol.Scope(
            consumer=dedup.namespace,
            max_attempts=max_attempts,
            dead_letters=dead_letters is not None,
            scheduler=scheduler is not None,
            batch=gate.batch > 1,
            log=dedup.log,
            clock=clock,
        )

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
            outcome = self._run(protocol.process(self._scope, message), self._timed)
            if span is not None:
                span.set_attribute(tracing.OUTCOME, outcome)
            return outcome

    def _timed(self, argument: object) -> object:
        started = time.perf_counter()
        result = self._handler(argument)
        self._dedup.log.metrics.observe(HANDLER_DURATION, time.perf_counter() - started)
        return result

    def process_batch(self, messages: Sequence[Message]) -> list[str | Exception]:
        """Handle consecutive deliveries of one FIFO group together: in batch mode the run
        from the group's head goes to the handler as one list (see ``FifoGate``). One result
        per message, in order: an outcome (ack) or the exception to nack it for."""
        return self._run(protocol.process_batch(self._scope, messages), self._timed)

    def run_once(self, message: Message, call: Callable[[], object]) -> tuple[str, str | None]:
        """The plain (non-FIFO) path with ``call`` as the effect: once per dedup key, a
        RetryLater re-scheduled (or poison at the limit). Returns (outcome, stored result).
        A message whose key or group breaks the contract is dead-lettered, never run (the
        decorator's CloudEvent path comes here without :func:`fifo_address`)."""
        return self._run(protocol.run_once(self._scope, message), lambda _: call())

    def retry_later(self, message: Message, exc: RetryLater) -> str:
        """Re-schedule a plain ``message`` whose handler raised ``exc`` (below the attempt
        limit, its claim released): a copy due in ``exc.delay``; returns the outcome (ack).

        Raises ``exc`` (nack) when no scheduler is configured; a copy Cloud Tasks cannot hold
        (too large, too far ahead) is dead-lettered with the scheduler's reason.
        """
        return self._run(protocol.retry_later(self._scope, message, exc), self._timed)

    def dedup_once(self, message: Message, effect: Callable[[], str | None]) -> ProcessResult:
        """Run ``effect`` once per ``message``'s dedup key (no FIFO gate): a duplicate returns
        the stored result, a reused key with other content is dead-lettered once (outcome
        MISMATCH). Raises ClaimInProgressError while another delivery holds the key."""
        run = protocol.dedup_once(self._scope, message, protocol.call_handler())
        return self._run(run, lambda _: effect())

    def reject(self, message: Message, exc: PermanentError) -> str:
        """Dead-letter ``message`` with the error's reason (raises it without a dead-letter
        topic, so nothing is acked silently)."""
        return self._run(protocol.reject(self._scope, message, exc), self._timed)

    # --- the driver ----------------------------------------------------------------------

    def _run(self, step: protocol.Step[T], call: Callable[[object], object]) -> T:
        """Drive one protocol of :mod:`~pubsub_toolkit.core.process`; ``call`` is the handler
        (the decorator's call on its path)."""
        # partial, not a lambda: the loop calls it per effect, and a partial adds no frame.
        return protocol.run(step, partial(self._perform, call))

    def _perform(self, call: Callable[[object], object], effect: protocol.Effect) -> Any:
        match effect:
            case protocol.Deliver(message, group, seq):
                return self.gate.deliver(message, group, seq)
            case protocol.CallHandler(argument):
                return call(argument)
            case protocol.RunOnce(key, fingerprint, context, run):
                return self._dedup.process(
                    key, fingerprint, partial(self._run, run, call), context=context
                )
            case protocol.RejectOnce(once, digest, run):
                return self._rejections.process(once, digest, partial(self._run, run, call))
            case protocol.DeadLetter(message, reason, detail, key):
                assert self._dead_letters is not None  # the protocol asks only with a topic
                return self._dead_letters.send(message, reason, detail, dedup_key=key)
            case protocol.ScheduleRetry():
                assert self._scheduler is not None  # the protocol asks only with a delay path
                copy = publishable_retry(effect)
                return self._scheduler.schedule(copy, effect.due, effect.dedup_key)
            case protocol.DeliverBatch(group, deliveries):
                return self.gate.deliver_batch(group, deliveries)
            case protocol.Process(message):
                return self.process(message)
            case _:
                assert_never(effect)
