"""The relay's logic: release a delayed message to the final topic when Cloud Tasks calls.

For each authenticated task request:

1. parse the body (a malformed one is dead-lettered once and answered 2xx: retrying cannot help);
2. a cancelled message (tombstone) publishes nothing;
3. still far from due (a long delay's intermediate hop) -> schedule the next hop;
4. otherwise publish to the final topic - exactly once per dedup key (namespace ``relay``), so a
   task executed twice publishes once - and only then answer 2xx. That claim is also the
   record ``cancel`` competes for (:mod:`.cancel`): whichever comes first decides.

A cancelled FIFO message is replaced by a filler for its number (see
:mod:`pubsub_toolkit.ingress.pipeline`), so its group does not wait for it. A fingerprint
mismatch is dead-lettered once per content, however often Cloud Tasks retries the task.

A transient failure raises; the web layer answers 5xx and Cloud Tasks retries with backoff -
except on the queue's last attempt (:mod:`.attempts`): then the message is handed to a new task
of the relay's own until ``DEDUP_TTL`` past its due time, and only dead-lettered with a reason
(a FIFO one followed by a filler, so its group goes on) when no task is made
(:mod:`.last_attempt`); a FIFO number whose task is in doubt (handed to the operator) is filled
too. A release record lives as long as a cancel tombstone
(:func:`.cancel.fate_ttl`), so ``cancel`` answers truthfully however late.

Every choice above is made in :mod:`pubsub_toolkit.core.release` (the release, the path of a
failure) and :mod:`pubsub_toolkit.core.handover` (the last attempts), from values; this module
reads the task, the records and the clock, and publishes, schedules and dead-letters as those
decisions say.

(About 340 lines: the effects of a release, of its hops and of a failed last attempt, with
the wiring of the relay's four once-only namespaces, in one class.)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import timedelta

from pubsub_toolkit import attributes as attr
from pubsub_toolkit import tracing
from pubsub_toolkit._witness import Witness
from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.config import Settings
from pubsub_toolkit.core import handover
from pubsub_toolkit.core import release as core
from pubsub_toolkit.core.handover import HandOver, HandOverNow, LastEnd, OnFailure
from pubsub_toolkit.core.release import Release
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.delay.attempts import (
    DEFAULT_MAX_ATTEMPTS,
    is_last_attempt,
    is_last_but_one_attempt,
)
from pubsub_toolkit.delay.cancel import (
    RELAY_NAMESPACE,
    fate_key,
    fate_ttl,
    is_cancelled,
    release_once,
    replayed_key,
    run_release,
)
from pubsub_toolkit.delay.last_attempt import REASON_HANDOVER_UNCONFIRMED, HopScheduler, LastAttempt
from pubsub_toolkit.delay.payload import DelayedMessage
from pubsub_toolkit.delay.scheduler import CloudTasksScheduler
from pubsub_toolkit.errors import ConfigurationError, PermanentError, TransientError
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.observability import LATENESS, DecisionLog, Metrics
from pubsub_toolkit.producer.sink import MessageSink
from pubsub_toolkit.stores.dedup.base import DedupStore

HOP_NAMESPACE = "relay-hop"
REJECTED_NAMESPACE = "relay-rejected"


class RelayOutcome(enum.StrEnum):
    PUBLISHED = "published"
    DUPLICATE = "duplicate"
    CANCELLED = "cancelled"
    RESCHEDULED = "rescheduled"
    DEAD_LETTERED = "dead_lettered"


@dataclass(frozen=True)
class RelayResult:
    outcome: RelayOutcome
    dedup_key: str | None
    detail: str = ""


class Relay:
    """Releases delayed messages; independent of the web framework that receives the tasks."""

    def __init__(
        self,
        *,
        store: DedupStore,
        sink: MessageSink,
        final_topic: str,
        dead_letter_topic: str,
        lease: timedelta,
        ttl: timedelta,
        scheduler: HopScheduler | None = None,
        clock: Clock = SYSTEM_CLOCK,
        metrics: Metrics | None = None,
        task_max_attempts: int | None = None,
    ) -> None:
        """``task_max_attempts``: the queue's ``max_attempts`` (None: unknown or unlimited, so
        no attempt is taken for the last)."""
        self.log = DecisionLog(RELAY_NAMESPACE, metrics)
        self._max_attempts = task_max_attempts
        # A last attempt hands the message over only until it is this far past due: a copy
        # published unrecorded before is still a duplicate to consumers (they keep DEDUP_TTL).
        self._handover_limit = ttl
        # (fate key, FIFO number) -> the final topic's message id, for what this process
        # published: on a last attempt the store cannot answer, it still knows these went out.
        self._published: Witness[tuple[str, str | None], str] = Witness()
        self._store = store
        self._sink = tracing.forwarding(sink, hop="relay")
        self._final_topic = final_topic
        self._scheduler = scheduler
        self._clock = clock
        self._dead_letters = DeadLetterer(self._sink, dead_letter_topic, self.log)
        self._publishes = IdempotentProcessor(
            store,
            namespace=RELAY_NAMESPACE,
            lease=lease,
            ttl=fate_ttl(ttl),  # cancel() must find it as long as it can find a tombstone
            log=self.log,
            clock=clock,
        )
        self._hops = IdempotentProcessor(
            store,
            namespace=HOP_NAMESPACE,
            lease=lease,
            ttl=ttl,
            log=DecisionLog(HOP_NAMESPACE),
            clock=clock,
        )
        self._rejections = self._hops.sibling(
            REJECTED_NAMESPACE, log=DecisionLog(REJECTED_NAMESPACE)
        )

    @classmethod
    def from_settings(
        cls, settings: Settings, *, task_max_attempts: int | None = DEFAULT_MAX_ATTEMPTS
    ) -> Relay:
        from pubsub_toolkit.producer.sink import PubSubSink
        from pubsub_toolkit.stores.factory import dedup_store_from_settings

        if settings.delay is None:
            raise ConfigurationError("PUBSUB_TOOLKIT_TASKS_QUEUE is required by the relay")
        return cls(
            store=dedup_store_from_settings(settings),
            sink=PubSubSink(timeout=settings.publish_timeout),
            final_topic=settings.final_topic,
            dead_letter_topic=settings.dead_letter_topic,
            lease=settings.dedup_lease,
            ttl=settings.dedup_ttl,
            scheduler=CloudTasksScheduler.from_settings(settings.delay),
            task_max_attempts=task_max_attempts,
        )

    @property
    def metrics(self) -> Metrics:
        return self.log.metrics

    def release(self, body: bytes, *, attempt: int | None = None) -> RelayResult:
        """Handle one task's body. Returns when the request may be answered 2xx.

        ``attempt`` is Cloud Tasks' 1-based attempt number (None: unknown); on the queue's last
        attempt a transient failure is dead-lettered instead of raised (see the module doc).
        """
        try:
            return self._release_body(body)
        except TransientError as failure:
            path = handover.on_failure(
                last=is_last_attempt(attempt, self._max_attempts),
                last_but_one=is_last_but_one_attempt(attempt, self._max_attempts),
            )
            if path is OnFailure.RETRY:
                raise
            final = path is OnFailure.LAST_ATTEMPT
            return self._last_attempt(body, failure, attempt, final=final)

    def _release_body(self, body: bytes) -> RelayResult:
        try:
            delayed = DelayedMessage.from_json(body)
        except PermanentError as exc:
            return self._reject(body, exc)
        queue = getattr(self._scheduler, "queue", "tasks")
        with tracing.handling(
            _as_message(delayed), queue, hop="relay", hop_number=delayed.hop
        ) as span:
            result = self._release(delayed)
            if span is not None:
                span.set_attribute(tracing.OUTCOME, result.outcome.value)
            return result

    def _last_attempt(
        self, body: bytes, failure: TransientError, attempt: int | None, *, final: bool
    ) -> RelayResult:
        """A transient failure on the last attempt (Cloud Tasks deletes the task after this
        answer: never answer 5xx and lose it), or on the one before, which hands the message
        over already (:func:`~pubsub_toolkit.core.handover.last_attempt`)."""
        last = LastAttempt(
            self._dead_letters, self.log, attempt, self._max_attempts, failure, final=final
        )
        delayed: DelayedMessage | None = None
        try:
            delayed = DelayedMessage.from_json(body)
        except PermanentError as exc:
            refused = exc
        key, published = None, None
        if delayed is not None:
            key = fate_key(delayed.dedup_key, delayed.message.attributes)
            published = self._published.get((key, delayed.message.attributes.get(attr.FIFO_SEQ)))

        def hand_over(_: HandOverNow) -> HandOver:
            assert delayed is not None and key is not None
            overdue = self._clock.now() - delayed.deliver_at
            return last.continued(
                self._scheduler, delayed, key, overdue=overdue, limit=self._handover_limit
            )

        end = core.drive(
            handover.last_attempt(
                final=final, parsed=delayed is not None, published_here=published is not None
            ),
            hand_over,
        )
        if end is LastEnd.RETRY:
            raise failure
        if end is LastEnd.DEAD_LETTER_BODY:
            # Its once-only dead letter needed the store: a second copy beats none.
            last.dead_letter(Message(body), None, refused.reason)
            return RelayResult(RelayOutcome.DEAD_LETTERED, None, refused.reason)
        assert delayed is not None and key is not None
        if end is LastEnd.PUBLISHED:  # this process put it on the final topic
            assert published is not None
            last.published_unrecorded(key)
            return RelayResult(RelayOutcome.PUBLISHED, key, published)
        message, hop = _as_message(delayed), f"hop {delayed.hop + 1}"
        if end is LastEnd.RESCHEDULED:
            return RelayResult(RelayOutcome.RESCHEDULED, key, hop)
        if end is LastEnd.TO_OPERATOR:
            # With the operator, not the queue: its group must not wait for the operator
            # either. The filler's tombstone keeps a copy the task may release, never runs it.
            reason = REASON_HANDOVER_UNCONFIRMED
            last.fill(self._sink, self._final_topic, message, delayed.dedup_key, reason)
            return RelayResult(RelayOutcome.RESCHEDULED, key, f"{hop} ({HandOver.UNCONFIRMED})")
        reason = last.dead_letter(message, key)
        last.fill(self._sink, self._final_topic, message, delayed.dedup_key, reason)
        return RelayResult(RelayOutcome.DEAD_LETTERED, key, reason)

    def _release(self, delayed: DelayedMessage) -> RelayResult:
        key = fate_key(delayed.dedup_key, delayed.message.attributes)
        original = replayed_key(delayed.dedup_key, delayed.message.attributes)
        fingerprint = core.release_fingerprint(delayed.message)
        released = run_release(
            core.release(delayed.deliver_at),
            cancelled=lambda: is_cancelled(self._store, key, original),
            release=lambda: release_once(
                self._publishes,
                lambda m: self._publish_as(key, m),
                delayed.message,
                key,
                fingerprint,
                store=self._store,
                original_key=original,
            ),
            clock=self._clock,
        )
        if released.release is Release.CANCELLED:
            return self._cancelled(delayed)
        if released.release is Release.HOP:
            return self._hop(delayed)
        if released.release is Release.MISMATCH:
            self._rejections.process(
                core.mismatch_key(key, fingerprint),
                fingerprint,
                lambda: self._dead_letters.send(
                    _as_message(delayed),
                    attr.REASON_FINGERPRINT_MISMATCH,
                    core.mismatch_detail(key),
                    dedup_key=key,
                ),
            )
            return RelayResult(RelayOutcome.DEAD_LETTERED, key, attr.REASON_FINGERPRINT_MISMATCH)
        if released.release is Release.DUPLICATE:
            return RelayResult(RelayOutcome.DUPLICATE, key, released.message_id)
        assert released.lateness is not None
        self.metrics.observe(LATENESS, released.lateness)
        return RelayResult(RelayOutcome.PUBLISHED, key, released.message_id)

    def _publish_as(self, key: str, message: OutboundMessage) -> str:
        message_id = self._sink.publish(self._final_topic, message)
        self._published.put((key, message.attributes.get(attr.FIFO_SEQ)), message_id)
        return message_id

    def _cancelled(self, delayed: DelayedMessage) -> RelayResult:
        """Publish nothing; for a FIFO message, a filler so its group moves on."""
        key, attributes = delayed.dedup_key, delayed.message.attributes
        self.log.decision(RelayOutcome.CANCELLED, "cancelled; not published", dedup_key=key)
        filler = core.filler_for(attributes, key, attr.FILLER_CANCELLED)
        if filler is not None:
            self._sink.publish(self._final_topic, filler.message())
        return RelayResult(RelayOutcome.CANCELLED, key)

    def _hop(self, delayed: DelayedMessage) -> RelayResult:
        if self._scheduler is None:
            raise ConfigurationError("a long delay needs a scheduler for its next hop")
        scheduler = self._scheduler
        hop = delayed.hop + 1
        self._hops.process(
            core.hop_key(delayed.dedup_key, delayed.message.attributes, hop),
            delayed.message.attributes.get(attr.CONTENT_SHA256, ""),
            lambda: tracing.scheduled(
                lambda m: scheduler.schedule(m, delayed.deliver_at, delayed.dedup_key, hop=hop),
                getattr(scheduler, "queue", "tasks"),
                delayed.message,
                hop="relay",
            ),
        )
        return RelayResult(RelayOutcome.RESCHEDULED, delayed.dedup_key, f"hop {hop}")

    def _reject(self, body: bytes, exc: PermanentError) -> RelayResult:
        digest = core.rejection_key(body)
        self._rejections.process(
            digest,
            digest,
            lambda: self._dead_letters.send(Message(body), exc.reason, exc.detail, dedup_key=None),
        )
        return RelayResult(RelayOutcome.DEAD_LETTERED, None, exc.reason)


def _as_message(delayed: DelayedMessage) -> Message:
    return Message(
        delayed.message.data,
        delayed.message.attributes,
        ordering_key=delayed.message.ordering_key,
    )
