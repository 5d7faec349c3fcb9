"""Ingress: validate, deduplicate and route each message from the origin topic.

For each delivery:

1. validate the attribute contract - a violation goes to the dead-letter topic with a reason
   and is acked;
2. claim the dedup key in namespace ``ingress`` - a duplicate is acked, a reused key with
   different content is dead-lettered (``fingerprint_mismatch``) with an alert;
3. route: publish to the final topic now, or - when the message is due later - hand it to the
   scheduler (Cloud Tasks) - any due time in the future, so nothing is ever early. Without a
   scheduler (TASKS_QUEUE unset), a due-later message is dead-lettered with
   ``delayed_delivery_unavailable`` rather than delivered early.

``Ingress.handle`` returns normally when the message may be acked and raises
:class:`~pubsub_toolkit.errors.TransientError` when it must be delivered again.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.cloudevent import message_from_event_data
from pubsub_toolkit.config import Settings
from pubsub_toolkit.dead_letter import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor, Outcome
from pubsub_toolkit.dedup.store import DedupStore
from pubsub_toolkit.errors import PermanentError
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.observability import DecisionLog, Metrics
from pubsub_toolkit.publishing import MessageSink
from pubsub_toolkit.stats.store import DELIVERIES

INGRESS_NAMESPACE = "ingress"
REJECTED_NAMESPACE = "ingress-rejected"
REASON_DELAY_UNAVAILABLE = "delayed_delivery_unavailable"


class IngressOutcome(enum.StrEnum):
    """What ingress did with one delivery (every one of them means: ack)."""

    PUBLISHED = "published"
    SCHEDULED = "scheduled"
    DUPLICATE = "duplicate"
    DEAD_LETTERED = "dead_lettered"


@dataclass(frozen=True)
class IngressResult:
    outcome: IngressOutcome
    dedup_key: str | None
    detail: str = ""


class Scheduler(Protocol):
    """Parks a message until its due time (Cloud Tasks; see the delay package)."""

    def schedule(self, message: OutboundMessage, deliver_at: datetime, dedup_key: str) -> str:
        """Arrange for ``message`` to reach the final topic at ``deliver_at``; return a task id."""
        ...


class Ingress:
    """The ingress pipeline, independent of how messages arrive (CloudEvent, pull, tests)."""

    def __init__(
        self,
        *,
        store: DedupStore,
        sink: MessageSink,
        final_topic: str,
        dead_letter_topic: str,
        lease: timedelta,
        ttl: timedelta,
        scheduler: Scheduler | None = None,
        clock: Clock = SYSTEM_CLOCK,
        metrics: Metrics | None = None,
    ) -> None:
        self.log = DecisionLog(INGRESS_NAMESPACE, metrics)
        self._processor = IdempotentProcessor(
            store, namespace=INGRESS_NAMESPACE, lease=lease, ttl=ttl, log=self.log, clock=clock
        )
        self._sink = sink
        self._final_topic = final_topic
        self._dead_letters = DeadLetterer(sink, dead_letter_topic, self.log)
        self._rejections = IdempotentProcessor(
            store,
            namespace=REJECTED_NAMESPACE,
            lease=lease,
            ttl=ttl,
            log=DecisionLog(REJECTED_NAMESPACE),
        )
        self._scheduler = scheduler
        self._clock = clock

    @classmethod
    def from_settings(cls, settings: Settings) -> Ingress:
        """Wire the real store, publisher and (with TASKS_QUEUE) scheduler from ``settings``."""
        from pubsub_toolkit.dedup.factory import store_from_settings
        from pubsub_toolkit.delay.scheduler import CloudTasksScheduler
        from pubsub_toolkit.publishing import PubSubSink

        scheduler = None
        if settings.delay is not None:
            scheduler = CloudTasksScheduler.from_settings(settings.delay)

        return cls(
            store=store_from_settings(settings),
            sink=PubSubSink(timeout=settings.publish_timeout),
            final_topic=settings.final_topic,
            dead_letter_topic=settings.dead_letter_topic,
            lease=settings.dedup_lease,
            ttl=settings.dedup_ttl,
            scheduler=scheduler,
        )

    @property
    def metrics(self) -> Metrics:
        return self.log.metrics

    def handle_event_data(self, data: Any) -> IngressResult:
        """Handle a Pub/Sub CloudEvent's ``data``; a malformed event is dead-lettered whole."""
        try:
            message = message_from_event_data(data)
        except PermanentError as exc:
            self.metrics.increment(DELIVERIES)  # counted here: it never reaches handle()
            raw = json.dumps(data, default=str).encode()
            return self._reject(Message(raw), exc)
        return self.handle(message)

    def handle(self, message: Message) -> IngressResult:
        """Validate, deduplicate and route one delivery. Raises TransientError to redeliver."""
        self.metrics.increment(DELIVERIES)  # the dedup hit rate's denominator (stats/)
        try:
            envelope = attr.parse_envelope(message, now=self._clock.now())
        except PermanentError as exc:
            return self._reject(message, exc)
        # A replay from the dead-letter topic is claimed under its own key: the original key is
        # already recorded (as dead-lettered) and would drop it as a duplicate.
        replay_id = message.attributes.get(attr.REPLAY_ID)
        claim_key = (
            envelope.dedup_key if not replay_id else f"{envelope.dedup_key}#replay:{replay_id}"
        )
        processed = self._processor.process(
            claim_key,
            envelope.fingerprint,
            lambda: self._route(envelope),
            context={"message_id": message.message_id},
        )
        key = envelope.dedup_key
        if processed.outcome is Outcome.MISMATCH:
            detail = f"dedup_key {key!r} was first seen with different content"
            self._dead_letters.send(
                message, attr.REASON_FINGERPRINT_MISMATCH, detail, dedup_key=key
            )
            return IngressResult(
                IngressOutcome.DEAD_LETTERED, key, attr.REASON_FINGERPRINT_MISMATCH
            )
        if processed.outcome is Outcome.DUPLICATE:
            return IngressResult(IngressOutcome.DUPLICATE, key, processed.result or "")
        routed = processed.result or ""
        kind, _, detail = routed.partition(":")
        return IngressResult(_ROUTED_OUTCOMES[kind], key, detail)

    def _reject(self, message: Message, exc: PermanentError) -> IngressResult:
        """Dead-letter an invalid delivery once, however often Pub/Sub redelivers it.

        Invalid messages are deduplicated by message id *and* content in a separate namespace:
        their dedup_key may be the very thing that is wrong and must not be reserved, and a
        message id alone can repeat (the emulator restarts its ids at 1).
        """
        key = message.attributes.get(attr.DEDUP_KEY) or message.message_id or None
        fingerprint = attr.content_fingerprint(message.data, message.attributes)
        self._rejections.process(
            f"{message.message_id}:{fingerprint}",
            fingerprint,
            lambda: self._dead_letters.send(message, exc.reason, exc.detail, dedup_key=key),
            context={"message_id": message.message_id},
        )
        return IngressResult(IngressOutcome.DEAD_LETTERED, key, exc.reason)

    def _route(self, envelope: attr.Envelope) -> str:
        """The effect: publish now, schedule when due later, or dead-letter when it cannot be
        delivered. Returns ``"<outcome>:<detail>"``, stored as the dedup result, so a
        redelivery of a dead-lettered message is a duplicate rather than a second copy."""
        outbound = OutboundMessage(
            envelope.message.data,
            envelope.stamped_attributes(),
            ordering_key=envelope.fifo_group or "",
        )
        try:
            due = envelope.deliver_at
            # Any due time in the future is scheduled: publishing "almost due" messages at once
            # would deliver them early, which the contract never does.
            if due is not None and due > self._clock.now():
                if self._scheduler is None:
                    raise PermanentError(
                        REASON_DELAY_UNAVAILABLE,
                        f"message is due at {attr.format_time(due)} but no scheduler is configured",
                    )
                task = self._scheduler.schedule(outbound, due, envelope.dedup_key)
                return f"{IngressOutcome.SCHEDULED}:{task}"
            return f"{IngressOutcome.PUBLISHED}:{self._sink.publish(self._final_topic, outbound)}"
        except PermanentError as exc:
            self._dead_letters.send(
                envelope.message, exc.reason, exc.detail, dedup_key=envelope.dedup_key
            )
            return f"{IngressOutcome.DEAD_LETTERED}:{exc.reason}"


_ROUTED_OUTCOMES = {outcome.value: outcome for outcome in IngressOutcome}
