"""One message through the consumer-side guarantees: FIFO gate or dedup, then the handler.

Shared by the streaming :class:`~pubsub_toolkit.consumer.subscriber.Consumer` and the serverless
``functions/consumer`` template, so both behave alike:

* a message with ``fifo_group`` and ``fifo_seq`` goes through the group's FIFO gate (whose
  last-processed counter is also its dedup marker);
* any other message is deduplicated by its ``dedup_key`` in the consumer's namespace;
* the return value means "ack"; a TransientError means "deliver again".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.gate_rules import GapPolicy, GatePolicy, PoisonPolicy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor, Outcome, ProcessResult
from pubsub_toolkit.errors import PermanentError
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog

Handler = Callable[[Message], object]


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
    the gate must never guess whether a group ended.
    """
    group = message.attributes.get(attr.FIFO_GROUP)
    raw_seq = message.attributes.get(attr.FIFO_SEQ)
    if group is None or raw_seq is None:
        return None
    address = FifoAddress(group, attr.parse_fifo_seq(raw_seq))
    attr.parse_fifo_end(message.attributes.get(attr.FIFO_END))
    return address


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
    )
    if completed_retention is None:
        return policy
    return replace(policy, completed_retention=completed_retention)


class MessageProcessor:
    """Applies the gate or dedup to one message and runs the user's handler."""

    def __init__(
        self,
        *,
        handler: Handler,
        dedup: IdempotentProcessor,
        gate: FifoGate,
        dead_letters: DeadLetterer | None = None,
    ) -> None:
        self._handler = handler
        self._dedup = dedup
        self.gate = gate
        self._dead_letters = dead_letters
        # Dead-letters a mismatching copy once, however often it is redelivered.
        self._rejections = dedup.sibling(f"{dedup.namespace}-rejected", log=dedup.log)
        if gate.rejections is None:
            gate.rejections = self._rejections  # the gate's dead letters also happen once

    @classmethod
    def from_settings(
        cls, settings: Settings, consumer: ConsumerSettings, handler: Handler
    ) -> MessageProcessor:
        """Wire the store, gate, dead-lettering and dedup from settings (clients made once)."""
        from pubsub_toolkit.producer.sink import PubSubSink
        from pubsub_toolkit.stores.factory import backend_from_settings

        backend = backend_from_settings(settings)  # one client for both stores
        log = DecisionLog(consumer.consumer_id)
        dead_letters = DeadLetterer(PubSubSink(), settings.dead_letter_topic, log)
        gate = FifoGate(
            backend.fifo_store(),
            consumer=consumer.consumer_id,
            handler=handler,
            dead_letters=dead_letters,
            policy=gate_policy(consumer, completed_retention=settings.dedup_ttl),
            log=log,
        )
        dedup = IdempotentProcessor(
            backend.dedup_store(),
            namespace=consumer.consumer_id,
            lease=settings.dedup_lease,
            ttl=settings.dedup_ttl,
            log=log,
        )
        return cls(handler=handler, dedup=dedup, gate=gate, dead_letters=dead_letters)

    def process(self, message: Message) -> str:
        """Handle ``message``; return the outcome (ack). Raises TransientError to nack."""
        try:
            address = fifo_address(message)
        except PermanentError as exc:
            return self.reject(message, exc)
        if address is not None:
            return self.gate.deliver(message, address.group, address.seq).outcome.value

        def effect() -> str | None:
            result = self._handler(message)
            return None if result is None else str(result)

        processed = self.dedup_once(message, effect)
        return "dead_lettered" if processed.outcome is Outcome.MISMATCH else processed.outcome.value

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

    def reject(self, message: Message, exc: PermanentError) -> str:
        """Dead-letter ``message`` with the error's reason (raises it without a dead-letter
        topic, so nothing is acked silently)."""
        if self._dead_letters is None:
            raise exc
        key = message.attributes.get(attr.DEDUP_KEY) or message.message_id
        self._dead_letters.send(message, exc.reason, exc.detail, dedup_key=key)
        return "dead_lettered"
