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

**FIFO numbers never go missing.** A duplicate carrying a *different* number than its first
copy - a producer's retry after a publish that timed out but had been accepted, numbered again
by the counter - is routed too, once per number: the consumer's gate runs the lowest number
holding the key and fills the others. For every number ingress cannot forward a message for,
it forwards a *filler* (a message with ``fifo_group``, ``fifo_seq``, the dedup key and
``fifo_filler`` = why, no data), so the consumer's gate moves past the number instead of
waiting for it forever:

* a FIFO message ingress dead-letters (contract violation, fingerprint mismatch, no delayed
  delivery): ``fifo_filler=dead_lettered:REASON``, a tombstone at the consumer, so a late
  replay of it is kept with ``fifo_late_after_skip`` rather than taken for a duplicate.

A message already due that carries a due time is released through the same record the relay
and ``cancel`` use (namespace ``relay``), so ``cancel`` answers what really happened even when
a delayed message reaches ingress late. A ``replay_id`` is honoured only when the replay path
minted it (:mod:`pubsub_toolkit.dead_letters.replay`); otherwise the message is dead-lettered
``forged_replay_id``.

``Ingress.handle`` returns normally when the message may be acked and raises
:class:`~pubsub_toolkit.errors.TransientError` when it must be delivered again.

(About 355 lines, a tenth of them this overview: one class whose methods are the routing
cases above; what it reports is in :mod:`.outcomes`, the contract checks in
:mod:`pubsub_toolkit.envelope`.)
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import timedelta
from typing import Any

from pubsub_toolkit import attributes as attr
from pubsub_toolkit import tracing
from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.cloudevent import message_from_event_data, message_from_push_body
from pubsub_toolkit.config import Settings
from pubsub_toolkit.dead_letters.replay import REASON_FORGED_REPLAY, is_minted
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor, Outcome
from pubsub_toolkit.delay.cancel import (
    RELAY_NAMESPACE,
    fate_key,
    fate_ttl,
    is_cancelled,
    release_once,
    released_message_id,
    replayed_key,
)
from pubsub_toolkit.envelope import Envelope, parse_envelope
from pubsub_toolkit.errors import PermanentError
from pubsub_toolkit.ingress.outcomes import IngressOutcome, IngressResult, Routed, Scheduler
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.observability import DecisionLog, Metrics
from pubsub_toolkit.producer.sink import MessageSink
from pubsub_toolkit.stores.dedup.base import DedupStore
from pubsub_toolkit.stores.fifo_state.base import KEY_WINDOW
from pubsub_toolkit.stores.stats.base import DELIVERIES

INGRESS_NAMESPACE = "ingress"
ORIGIN = "origin"  # the span's destination: the origin topic's push subscription
REJECTED_NAMESPACE = "ingress-rejected"
REASON_DELAY_UNAVAILABLE = "delayed_delivery_unavailable"


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
        # A replay from the dead-letter topic is claimed under its own key: the original key is
        # already recorded (as dead-lettered) and would drop it as a duplicate.
        claim_key = (
            envelope.dedup_key if not replay_id else f"{envelope.dedup_key}#replay:{replay_id}"
        )
        processed = self._processor.process(
            claim_key,
            envelope.fingerprint,
            lambda: self._route(envelope, replay=replay_id is not None).to_result(),
            context={"message_id": message.message_id},
        )
        key = envelope.dedup_key
        if processed.outcome is Outcome.MISMATCH:
            detail = f"dedup_key {key!r} was first seen with different content"
            # Once per (key, content): every redelivery of the same impostor is the same case.
            self._rejections.process(
                f"mismatch:{key}:{envelope.fingerprint}",
                envelope.fingerprint,
                # No filler: the number may well belong to the first copy, still on its way.
                lambda: self._dead_letter(
                    envelope.message, attr.REASON_FINGERPRINT_MISMATCH, detail, key, fill=False
                ),
                context={"message_id": message.message_id},
            )
            return IngressResult(
                IngressOutcome.DEAD_LETTERED, key, attr.REASON_FINGERPRINT_MISMATCH
            )
        routed = Routed.from_result(processed.result)
        if processed.outcome is Outcome.DUPLICATE:
            self._fill_renumbered_retry(envelope, claim_key, routed)
            return IngressResult(IngressOutcome.DUPLICATE, key, routed.detail)
        return IngressResult(routed.outcome, key, routed.detail)

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
        """A duplicate at another number than its first copy (a producer's retry renumbered by
        the counter): its number must reach the consumer too, once.

        Delivered or scheduled first copy at a LOWER number: this number carries nothing (a
        filler naming the first copy's), so the message runs once, at its first place - however
        far apart the numbers are (the gate recognises a key only within its last
        ``KEY_WINDOW`` numbers, and a retry can come thousands later). At a HIGHER number within
        that window: route this copy as well (scheduled if due later - its task name carries
        the number); the gate runs the lowest number holding the key and fills the other. Further
        apart than the window, the gate could not tell, so this lower number is the filler and
        the message runs at the first copy's place (the docs' weaker guarantee). A first copy
        that was dead-lettered or cancelled: a filler saying so.
        """
        seq, group = envelope.fifo_seq, envelope.fifo_group
        if seq is None or group is None or seq == first.seq:
            return
        if first.seq is None and first.outcome is not IngressOutcome.DEAD_LETTERED:
            # Recorded by an older version without its number: this may be a plain
            # redelivery, and a second routing would cost nothing but a filler - do it.
            self.log.decision(
                "renumbered_unknown",
                f"duplicate at {group}#{seq}; the first copy's number is unknown",
                dedup_key=envelope.dedup_key,
                level=logging.WARNING,
            )
        key, epoch = envelope.dedup_key, envelope.message.attributes.get(attr.FIFO_EPOCH)

        def forward() -> str:
            if first.outcome is IngressOutcome.DEAD_LETTERED:
                why = f"{attr.FILLER_DEAD_LETTERED}{first.detail}"
                return self._publish_filler(group, seq, key, why, epoch)
            if first.outcome is IngressOutcome.CANCELLED:
                return self._publish_filler(group, seq, key, attr.FILLER_CANCELLED, epoch)
            if first.seq is not None and not 0 < first.seq - seq < KEY_WINDOW:
                why = f"{attr.FILLER_RENUMBERED}{first.seq}"
                return self._publish_filler(group, seq, key, why, epoch)
            return self._route(envelope, replay=False).to_result()

        self._processor.process(
            f"{claim_key}#fifo_seq:{seq}",
            envelope.fingerprint,
            forward,
            context={"message_id": envelope.message.message_id},
        )

    def _publish_filler(
        self, group: str, seq: int, dedup_key: str, why: str, epoch: str | None
    ) -> str:
        filler = attr.filler_message(group, seq, dedup_key, why, epoch=epoch)
        message_id = self._sink.publish(self._final_topic, filler)
        self.log.decision(
            "filler_forwarded",
            f"{group}#{seq} carries no message ({why})",
            dedup_key=dedup_key,
            fifo_group=group,
            fifo_seq=seq,
        )
        return message_id

    def _dead_letter(
        self, message: Message, reason: str, detail: str, key: str | None, *, fill: bool = True
    ) -> str:
        """Dead-letter ``message``; for a FIFO number, tell the consumer it carries nothing."""
        dead_id = self._dead_letters.send(message, reason, detail, dedup_key=key)
        number = attr.fifo_number(message) if fill else None
        if number is not None:
            group, seq = number
            self._publish_filler(
                group,
                seq,
                key or message.message_id,
                f"{attr.FILLER_DEAD_LETTERED}{reason}",
                message.attributes.get(attr.FIFO_EPOCH),
            )
        return dead_id

    def _reject(self, message: Message, exc: PermanentError) -> IngressResult:
        """Dead-letter an invalid delivery once, however often Pub/Sub redelivers it.

        Invalid messages are deduplicated in a separate namespace (their dedup_key may be the
        very thing that is wrong and must not be reserved), by :func:`_rejection_key`.
        """
        key = message.attributes.get(attr.DEDUP_KEY) or message.message_id or None
        fingerprint = attr.content_fingerprint(message.data, message.attributes)
        self._rejections.process(
            _rejection_key(message, fingerprint),
            fingerprint,
            lambda: self._dead_letter(message, exc.reason, exc.detail, key),
            context={"message_id": message.message_id},
        )
        return IngressResult(IngressOutcome.DEAD_LETTERED, key, exc.reason)

    def _route(self, envelope: Envelope, *, replay: bool) -> Routed:
        """The effect: publish now, schedule when due later, or dead-letter when it cannot be
        delivered. Stored as the dedup result, so a redelivery of a dead-lettered message is
        a duplicate rather than a second copy."""
        outbound = OutboundMessage(
            envelope.message.data,
            envelope.stamped_attributes(replay=replay),
            ordering_key=envelope.fifo_group or "",
        )
        seq = envelope.fifo_seq
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
                scheduler = self._scheduler
                task = tracing.scheduled(
                    lambda m: scheduler.schedule(m, due, envelope.dedup_key),
                    getattr(scheduler, "queue", "tasks"),
                    outbound,
                    hop="ingress",
                )
                return Routed(IngressOutcome.SCHEDULED, task, seq)
            if due is not None:
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
        if is_cancelled(self._store, key, original):
            self.log.decision(IngressOutcome.CANCELLED, "cancelled; not published", dedup_key=key)
            self._fill_cancelled(envelope)
            return Routed(IngressOutcome.CANCELLED, "", seq)
        released = release_once(
            self._releases,
            self._publish,
            outbound,
            key,
            envelope.fingerprint,
            store=self._store,
            original_key=original,
        )
        if released.outcome is Outcome.MISMATCH and is_cancelled(self._store, key, original):
            self._fill_cancelled(envelope)
            return Routed(IngressOutcome.CANCELLED, "", seq)
        if released.outcome is Outcome.MISMATCH:
            raise PermanentError(
                attr.REASON_FINGERPRINT_MISMATCH,
                f"dedup_key {key!r} was released before with different content",
            )
        return Routed(IngressOutcome.PUBLISHED, released_message_id(released.result), seq)

    def _fill_cancelled(self, envelope: Envelope) -> None:
        if envelope.fifo_group is not None and envelope.fifo_seq is not None:
            self._publish_filler(
                envelope.fifo_group,
                envelope.fifo_seq,
                envelope.dedup_key,
                attr.FILLER_CANCELLED,
                envelope.message.attributes.get(attr.FIFO_EPOCH),
            )

    def _publish(self, outbound: OutboundMessage) -> str:
        return self._sink.publish(self._final_topic, outbound)


def _rejection_key(message: Message, fingerprint: str) -> str:
    """Which refused deliveries are one message, dead-lettered once.

    With a producer's ``dedup_key``: every copy of the same content at the same number - a
    producer's retry of a publish that timed out after Pub/Sub accepted it has a new message
    id, and is the same message - except a ``dlq replay`` of it (its ``replay_id``), which took
    the letter off the dead-letter topic and must leave a new one. Without a ``dedup_key``:
    each message id (its only identity), with its content (a message id alone can repeat: the
    emulator restarts its ids at 1). Hashed: the key may be the invalid part (too long...).
    """
    attrs = message.attributes
    own = attrs.get(attr.DEDUP_KEY)
    if not own:
        return f"{message.message_id}:{fingerprint}"
    parts = (own, attrs.get(attr.FIFO_SEQ, ""), attrs.get(attr.REPLAY_ID, ""))
    named = hashlib.sha256(json.dumps(parts).encode()).hexdigest()
    return f"key:{named}:{fingerprint}"
