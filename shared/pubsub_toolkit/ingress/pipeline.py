"""Ingress: validate, deduplicate and route each message from the origin topic.

For each delivery:

1. validate the attribute contract - a violation goes to the dead-letter topic with a reason
   and is acked;
2. claim the dedup key in namespace ``ingress`` - a duplicate is acked, a reused key with
   different content is dead-lettered (``fingerprint_mismatch``) with an alert;
3. route: publish to the final topic now, or - when the message is due later - hand it to the
   scheduler (Cloud Tasks) - any due time in the future, so nothing is ever early. Without a
   scheduler (PUBSUB_TOOLKIT_TASKS_QUEUE unset), a due-later message is dead-lettered with
   ``delayed_delivery_unavailable`` rather than delivered early.

FIFO numbers never go missing (fillers), a message already due is released through its fate
record, and a ``replay_id`` is honoured only when minted: see :mod:`pubsub_toolkit.core.ingress`.

``Ingress.handle`` returns normally when the message may be acked and raises
:class:`~pubsub_toolkit.errors.TransientError` when it must be delivered again.

Every choice above is made in :mod:`pubsub_toolkit.core.ingress` (and the release under the
fate record in :mod:`pubsub_toolkit.core.release`), from values; this module reads the
delivery, claims, publishes, schedules and dead-letters as those decisions say.

(About 350 lines: the effects of every routing case - claims in three namespaces, publishes,
schedules, dead letters and fillers, each with its decision log - in one class.)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pubsub_toolkit import attributes as attr
from pubsub_toolkit import tracing
from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.cloudevent import message_from_event_data, message_from_push_body
from pubsub_toolkit.config import Settings
from pubsub_toolkit.core import ingress as core
from pubsub_toolkit.core import release as releasing
from pubsub_toolkit.core.fate import RELAY_NAMESPACE, Claimed, fate_key, fate_ttl, replayed_key
from pubsub_toolkit.core.ingress import (
    REASON_DELAY_UNAVAILABLE,
    DeadLetter,
    IngressOutcome,
    IngressResult,
    Route,
    Routed,
    Scheduler,
)
from pubsub_toolkit.core.release import Filler, Release, mismatch_detail
from pubsub_toolkit.dead_letters.replay import REASON_FORGED_REPLAY, is_minted
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor, Outcome
from pubsub_toolkit.delay.cancel import is_cancelled, release_once, run_release
from pubsub_toolkit.envelope import Envelope, as_replay, parse_envelope
from pubsub_toolkit.errors import PermanentError
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.observability import DecisionLog, Metrics
from pubsub_toolkit.producer.sink import MessageSink
from pubsub_toolkit.stores.dedup.base import DedupStore
from pubsub_toolkit.stores.stats.base import DELIVERIES

INGRESS_NAMESPACE = "ingress"
ORIGIN = "origin"  # the span's destination: the origin topic's push subscription
REJECTED_NAMESPACE = "ingress-rejected"
__all__ = [
    "INGRESS_NAMESPACE",
    "ORIGIN",
    "REASON_DELAY_UNAVAILABLE",
    "REJECTED_NAMESPACE",
    "Ingress",
]


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
        self._store = store
        self._sink = tracing.forwarding(sink, hop="ingress")
        self._final_topic = final_topic
        self._dead_letters = DeadLetterer(self._sink, dead_letter_topic, self.log)
        self._rejections = self._processor.sibling(
            REJECTED_NAMESPACE, log=DecisionLog(REJECTED_NAMESPACE)
        )
        # A release lives as long as a cancel tombstone, not DEDUP_TTL: cancel() must find it
        # however late it is asked.
        self._releases = self._processor.sibling(RELAY_NAMESPACE, ttl=fate_ttl(ttl))
        self._scheduler = scheduler
        self._clock = clock

    @classmethod
    def from_settings(cls, settings: Settings) -> Ingress:
        """Wire the real store, publisher and (with PUBSUB_TOOLKIT_TASKS_QUEUE) scheduler from
        ``settings``."""
        from pubsub_toolkit.delay.scheduler import CloudTasksScheduler
        from pubsub_toolkit.producer.sink import PubSubSink
        from pubsub_toolkit.stores.factory import dedup_store_from_settings

        scheduler = None
        if settings.delay is not None:
            scheduler = CloudTasksScheduler.from_settings(settings.delay)

        return cls(
            store=dedup_store_from_settings(settings),
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

    def handle_push_body(self, body: bytes) -> IngressResult:
        """Handle one push request's body; one that holds no Pub/Sub message is dead-lettered
        as it came, with the reason."""
        try:
            message = message_from_push_body(body)
        except PermanentError as exc:
            self.metrics.increment(DELIVERIES)  # counted here: it never reaches handle()
            return self._reject(Message(body), exc)
        return self.handle(message)

    def handle(self, message: Message) -> IngressResult:
        """Validate, deduplicate and route one delivery. Raises TransientError to redeliver."""
        with tracing.handling(message, ORIGIN, hop="ingress") as span:
            result = self._handle(message)
            if span is not None:
                span.set_attribute(tracing.OUTCOME, result.outcome.value)
            return result

    def _handle(self, message: Message) -> IngressResult:
        self.metrics.increment(DELIVERIES)  # the dedup hit rate's denominator (stats/)
        try:
            envelope = parse_envelope(message, now=self._clock.now())
            replay_id = self._genuine_replay_id(message, envelope)
        except PermanentError as exc:
            return self._reject(message, exc)
        if replay_id is not None:
            envelope = as_replay(envelope)
        misses = attr.near_misses(message.attributes)
        if misses:  # delivered all the same: it may be the producer's own attribute
            self.log.decision(
                "attribute_near_miss",
                "attributes that look like mistyped toolkit attributes are not read: "
                + ", ".join(f"{name!r} (meant {meant!r}?)" for name, meant in misses.items()),
                dedup_key=envelope.dedup_key,
                level=logging.WARNING,
            )
        claim_key = core.claim_key(envelope.dedup_key, replay_id)
        context = {"message_id": message.message_id}
        processed = self._processor.process(
            claim_key,
            envelope.fingerprint,
            lambda: (
                self._route(envelope, replay=replay_id is not None)
                .placed_in(envelope.fifo_group)
                .to_result()
            ),
            context=context,
        )
        result = processed.result
        if processed.outcome is Outcome.MISMATCH and envelope.fifo_seq is not None:
            # Where the key's first copy went decides whether this number needs a filler.
            record = self._store.get(INGRESS_NAMESPACE, claim_key)
            result = record.result if record is not None else None
        settled = core.after_claim(Claimed(processed.outcome), result, envelope)
        if settled.dead_letter is not None:
            self._dead_letter_once(envelope.message, settled.dead_letter, context)
        elif settled.first is not None:
            self._fill_renumbered_retry(envelope, claim_key, settled.first)
        return settled.result

    def _genuine_replay_id(self, message: Message, envelope: Envelope) -> str | None:
        """The message's ``replay_id`` if the replay path minted it; PermanentError if forged."""
        replay_id = message.attributes.get(attr.REPLAY_ID)
        if replay_id is None:
            return None
        if not is_minted(self._store, replay_id, envelope.dedup_key):
            raise PermanentError(
                REASON_FORGED_REPLAY,
                f"replay_id {replay_id[:80]!r} was not minted by `dlq replay` for this dedup_key",
            )
        return replay_id

    def _fill_renumbered_retry(self, envelope: Envelope, claim_key: str, first: Routed) -> None:
        """A duplicate at another number than its first copy: fill its number once, with a
        filler or by routing this copy as well (:func:`~pubsub_toolkit.core.ingress.renumbered`)."""
        renumbered = core.renumbered(envelope, claim_key, first)
        if renumbered is None:
            return
        if renumbered.first_seq_unknown:
            self.log.decision(
                "renumbered_unknown",
                f"duplicate at {envelope.fifo_group}#{envelope.fifo_seq}; the first copy's "
                "number is unknown",
                dedup_key=envelope.dedup_key,
                level=logging.WARNING,
            )
        filler = renumbered.filler

        def forward() -> str:
            if filler is not None:
                return self._publish_filler(filler)
            return self._route(envelope, replay=False).to_result()

        self._processor.process(
            renumbered.once_key,
            envelope.fingerprint,
            forward,
            context={"message_id": envelope.message.message_id},
        )

    def _publish_filler(self, filler: Filler) -> str:
        message_id = self._sink.publish(self._final_topic, filler.message())
        self.log.decision(
            "filler_forwarded",
            f"{filler.group}#{filler.seq} carries no message ({filler.why})",
            dedup_key=filler.dedup_key,
            fifo_group=filler.group,
            fifo_seq=filler.seq,
        )
        return message_id

    def _dead_letter(
        self, message: Message, reason: str, detail: str, key: str | None, *, fill: bool = True
    ) -> str:
        """Dead-letter ``message``; for a FIFO number, tell the consumer it carries nothing."""
        dead_id = self._dead_letters.send(message, reason, detail, dedup_key=key)
        filler = core.dead_letter_filler(message, reason, key) if fill else None
        if filler is not None:
            self._publish_filler(filler)
        return dead_id

    def _dead_letter_once(
        self, message: Message, letter: DeadLetter, context: Mapping[str, str | None]
    ) -> None:
        self._rejections.process(
            letter.once_key,
            letter.fingerprint,
            lambda: self._dead_letter(
                message, letter.reason, letter.detail, letter.dedup_key, fill=letter.fill
            ),
            context=context,
        )

    def _reject(self, message: Message, exc: PermanentError) -> IngressResult:
        """Dead-letter an invalid delivery once, however often Pub/Sub redelivers it
        (:func:`~pubsub_toolkit.core.ingress.rejection`)."""
        letter = core.rejection(message, exc.reason, exc.detail)
        self._dead_letter_once(message, letter, {"message_id": message.message_id})
        return IngressResult(IngressOutcome.DEAD_LETTERED, letter.dedup_key, exc.reason)

    def _route(self, envelope: Envelope, *, replay: bool) -> Routed:
        """The effect: publish now, schedule when due later, or dead-letter when it cannot be
        delivered. Stored as the dedup result, so a redelivery of a dead-lettered message is
        a duplicate rather than a second copy."""
        outbound = OutboundMessage(
            envelope.message.data,
            envelope.stamped_attributes(replay=replay),
            ordering_key=envelope.fifo_group or "",
        )
        seq, due = envelope.fifo_seq, envelope.deliver_at
        try:
            where = core.route(due, self._clock.now(), can_schedule=self._scheduler is not None)
            if where is Route.UNDELIVERABLE:
                assert due is not None
                raise PermanentError(REASON_DELAY_UNAVAILABLE, core.undeliverable_detail(due))
            if where is Route.SCHEDULE:
                scheduler, at = self._scheduler, due
                assert scheduler is not None and at is not None
                task = tracing.scheduled(
                    lambda m: scheduler.schedule(m, at, envelope.dedup_key),
                    getattr(scheduler, "queue", "tasks"),
                    outbound,
                    hop="ingress",
                )
                return Routed(IngressOutcome.SCHEDULED, task, seq)
            if where is Route.RELEASE:
                return self._release_due(envelope, outbound)
            return Routed(IngressOutcome.PUBLISHED, self._publish(outbound), seq)
        except PermanentError as exc:
            self._dead_letter(envelope.message, exc.reason, exc.detail, envelope.dedup_key)
            return Routed(IngressOutcome.DEAD_LETTERED, exc.reason, seq)

    def _release_due(self, envelope: Envelope, outbound: OutboundMessage) -> Routed:
        """A delayed message that is already due: release it through the relay's record, so
        a ``cancel`` that got there first wins and one that comes later is told "delivered"."""
        key, seq = fate_key(envelope.dedup_key, outbound.attributes), envelope.fifo_seq
        original = replayed_key(envelope.dedup_key, outbound.attributes)  # a replay's original
        released = run_release(
            releasing.release(None),
            cancelled=lambda: is_cancelled(self._store, key, original),
            release=lambda: release_once(
                self._releases,
                self._publish,
                outbound,
                key,
                envelope.fingerprint,
                store=self._store,
                original_key=original,
            ),
            clock=self._clock,
        )
        if released.release is Release.CANCELLED:
            if not released.after_claim:
                self.log.decision(
                    IngressOutcome.CANCELLED, "cancelled; not published", dedup_key=key
                )
            filler = core.cancelled_filler(envelope)
            if filler is not None:
                self._publish_filler(filler)
            return Routed(IngressOutcome.CANCELLED, "", seq)
        if released.release is Release.MISMATCH:
            raise PermanentError(attr.REASON_FINGERPRINT_MISMATCH, mismatch_detail(key))
        return Routed(IngressOutcome.PUBLISHED, released.message_id, seq)

    def _publish(self, outbound: OutboundMessage) -> str:
        return self._sink.publish(self._final_topic, outbound)
