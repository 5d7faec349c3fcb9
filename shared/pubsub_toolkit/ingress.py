"""Ingress: validate, deduplicate and route each message from the origin topic.

For each delivery:

1. validate the attribute contract - a violation goes to the dead-letter topic with a reason
   and is acked;
2. claim the dedup key in namespace ``ingress`` - a duplicate is acked, a reused key with
   different content is dead-lettered (``fingerprint_mismatch``) with an alert;
3. route: publish to the final topic now, or - when the message is due later - hand it to the
   scheduler (Cloud Tasks). Without a scheduler, a due-later message is dead-lettered with
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

INGRESS_NAMESPACE = "ingress"
REASON_DELAY_UNAVAILABLE = "delayed_delivery_unavailable"
# Due times closer than this are published at once: a task round trip would only add latency.
DEFAULT_SCHEDULE_THRESHOLD = timedelta(seconds=1)


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
        schedule_threshold: timedelta = DEFAULT_SCHEDULE_THRESHOLD,
    ) -> None:
        self.log = DecisionLog(INGRESS_NAMESPACE, metrics)
        self._processor = IdempotentProcessor(
            store, namespace=INGRESS_NAMESPACE, lease=lease, ttl=ttl, log=self.log
        )
        self._sink = sink
        self._final_topic = final_topic
        self._dead_letters = DeadLetterer(sink, dead_letter_topic, self.log)
        self._scheduler = scheduler
        self._clock = clock
        self._threshold = schedule_threshold

    @classmethod
    def from_settings(cls, settings: Settings, *, scheduler: Scheduler | None = None) -> Ingress:
        """Wire the real store and Pub/Sub publisher from ``settings`` (clients created once)."""
        from pubsub_toolkit.dedup.factory import store_from_settings
        from pubsub_toolkit.publishing import PubSubSink

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
            raw = json.dumps(data, default=str).encode()
            self._dead_letters.send(Message(raw), exc.reason, exc.detail, dedup_key=None)
            return IngressResult(IngressOutcome.DEAD_LETTERED, None, exc.reason)
        return self.handle(message)

    def handle(self, message: Message) -> IngressResult:
        """Validate, deduplicate and route one delivery. Raises TransientError to redeliver."""
        try:
            envelope = attr.parse_envelope(message, now=self._clock.now())
        except PermanentError as exc:
            key = message.attributes.get(attr.DEDUP_KEY, message.message_id) or None
            self._dead_letters.send(message, exc.reason, exc.detail, dedup_key=key)
            return IngressResult(IngressOutcome.DEAD_LETTERED, key, exc.reason)
        try:
            processed = self._processor.process(
                envelope.dedup_key, envelope.fingerprint, lambda: self._route(envelope)
            )
        except PermanentError as exc:
            self._dead_letters.send(message, exc.reason, exc.detail, dedup_key=envelope.dedup_key)
            return IngressResult(IngressOutcome.DEAD_LETTERED, envelope.dedup_key, exc.reason)
        if processed.outcome is Outcome.MISMATCH:
            self._dead_letters.send(
                message,
                attr.REASON_FINGERPRINT_MISMATCH,
                f"dedup_key {envelope.dedup_key!r} was first seen with different content",
                dedup_key=envelope.dedup_key,
            )
            return IngressResult(
                IngressOutcome.DEAD_LETTERED, envelope.dedup_key, attr.REASON_FINGERPRINT_MISMATCH
            )
        if processed.outcome is Outcome.DUPLICATE:
            return IngressResult(
                IngressOutcome.DUPLICATE, envelope.dedup_key, processed.result or ""
            )
        routed = processed.result or ""
        outcome = (
            IngressOutcome.SCHEDULED if routed.startswith("task:") else IngressOutcome.PUBLISHED
        )
        return IngressResult(outcome, envelope.dedup_key, routed)

    def _route(self, envelope: attr.Envelope) -> str:
        """The effect: publish now, or schedule when due later. Returns what was done."""
        outbound = OutboundMessage(
            envelope.message.data,
            envelope.stamped_attributes(),
            ordering_key=envelope.fifo_group or "",
        )
        due = envelope.deliver_at
        if due is not None and due - self._clock.now() > self._threshold:
            if self._scheduler is None:
                raise PermanentError(
                    REASON_DELAY_UNAVAILABLE,
                    f"message is due at {attr.format_time(due)} but no scheduler is configured",
                )
            return "task:" + self._scheduler.schedule(outbound, due, envelope.dedup_key)
        return "message:" + self._sink.publish(self._final_topic, outbound)
