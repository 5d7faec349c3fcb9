"""The attribute contract: names, parsing and validation, in one place.

| attribute | set by | meaning |
|---|---|---|
| ``dedup_key`` | producer, else ingress (= origin message_id) | stable idempotency key |
| ``deliver_at`` | producer, or ingress from ``delay_seconds`` | RFC 3339 UTC due time |
| ``delay_seconds`` | producer | convenience; converted to ``deliver_at`` on receipt |
| ``fifo_group`` | producer | category key; also the Pub/Sub ordering key |
| ``fifo_seq`` | ``Publisher`` (sequencer) | 1-based number within the group |
| ``content_sha256`` | ingress | fingerprint of data + business attributes |
| ``origin_message_id``, ``origin_publish_time`` | ingress | provenance |
| ``error_reason``, ``error_detail`` | whoever dead-letters | why a message was dead-lettered |

A message that breaks the contract raises :class:`~pubsub_toolkit.errors.ContractViolation`
with a short ``reason`` code; callers dead-letter it and ack.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pubsub_toolkit.errors import ContractViolation
from pubsub_toolkit.message import Message

DEDUP_KEY = "dedup_key"
DELIVER_AT = "deliver_at"
DELAY_SECONDS = "delay_seconds"
FIFO_GROUP = "fifo_group"
FIFO_SEQ = "fifo_seq"
CONTENT_SHA256 = "content_sha256"
ORIGIN_MESSAGE_ID = "origin_message_id"
ORIGIN_PUBLISH_TIME = "origin_publish_time"
ERROR_REASON = "error_reason"
ERROR_DETAIL = "error_detail"
REPLAY_ID = "replay_id"  # set by `pubsub-toolkit dlq replay`: the dead-letter copy's message id

# Attributes the toolkit stamps itself; they are not part of the content fingerprint, so a
# message replayed from the dead-letter topic keeps its fingerprint, and a producer's retry that
# the sequencer numbered again is a duplicate (its number is then a gap the gate skips), not a
# "same key, different content" alert.
TOOLKIT_STAMPED = frozenset(
    {
        DEDUP_KEY,
        CONTENT_SHA256,
        ORIGIN_MESSAGE_ID,
        ORIGIN_PUBLISH_TIME,
        ERROR_REASON,
        ERROR_DETAIL,
        FIFO_SEQ,
        REPLAY_ID,  # a replay is the same content as its original
    }
)

# Pub/Sub's own limits (https://cloud.google.com/pubsub/quotas#resource_limits).
MAX_ATTRIBUTES = 100
MAX_ATTRIBUTE_KEY_BYTES = 256
MAX_ATTRIBUTE_VALUE_BYTES = 1024
MAX_REQUEST_BYTES = 10_000_000  # a publish request, data and attributes together
# Room for what ingress adds (dedup key, fingerprint, provenance, deliver_at) and framing.
_INGRESS_OVERHEAD_BYTES = 4096
MAX_MESSAGE_BYTES = MAX_REQUEST_BYTES - _INGRESS_OVERHEAD_BYTES
# Names Pub/Sub reserves ("goog" prefix), and the keyword arguments of the Python client's
# publish(topic, data, ordering_key=, retry=, timeout=, **attributes), which cannot be sent.
RESERVED_PREFIX = "goog"
RESERVED_NAMES = frozenset({"topic", "data", "ordering_key", "retry", "timeout"})
MAX_FIFO_GROUP_BYTES = 1024  # ordering keys share the attribute value limit

# Ingress adds at most these attributes, so the producer's must leave room for them.
_STAMPED_BY_INGRESS = 5

# Reason codes written to ``error_reason`` (stable: operators filter on them).
REASON_EMPTY_DATA = "empty_data"
REASON_TOO_LARGE = "message_too_large"
REASON_TOO_MANY_ATTRIBUTES = "too_many_attributes"
REASON_ATTRIBUTE_TOO_LARGE = "attribute_too_large"
REASON_RESERVED_ATTRIBUTE = "reserved_attribute"
REASON_INVALID_DEDUP_KEY = "invalid_dedup_key"
REASON_INVALID_DELIVER_AT = "invalid_deliver_at"
REASON_INVALID_DELAY = "invalid_delay_seconds"
REASON_CONFLICTING_DELAY = "conflicting_delay"
REASON_INVALID_FIFO_GROUP = "invalid_fifo_group"
REASON_INVALID_FIFO_SEQ = "invalid_fifo_seq"
REASON_SEQ_WITHOUT_GROUP = "fifo_seq_without_group"
REASON_FINGERPRINT_MISMATCH = "fingerprint_mismatch"
REASON_MALFORMED_EVENT = "malformed_event"


@dataclass(frozen=True)
class Envelope:
    """A message that satisfies the contract, with its toolkit attributes parsed."""

    message: Message
    dedup_key: str
    fingerprint: str
    deliver_at: datetime | None
    fifo_group: str | None
    fifo_seq: int | None

    def stamped_attributes(self) -> dict[str, str]:
        """The attributes to forward: the producer's, plus dedup key, fingerprint, provenance.

        ``delay_seconds`` is replaced by the absolute ``deliver_at`` so every later hop sees
        one due time, however late it receives the message.
        """
        attrs = {k: v for k, v in self.message.attributes.items() if k != DELAY_SECONDS}
        attrs[DEDUP_KEY] = self.dedup_key
        attrs[CONTENT_SHA256] = self.fingerprint
        attrs.setdefault(ORIGIN_MESSAGE_ID, self.message.message_id)
        if self.message.publish_time is not None:
            attrs.setdefault(ORIGIN_PUBLISH_TIME, format_time(self.message.publish_time))
        if self.deliver_at is not None:
            attrs[DELIVER_AT] = format_time(self.deliver_at)
        return attrs


def parse_envelope(message: Message, *, now: datetime) -> Envelope:
    """Validate ``message`` against the contract; raise ContractViolation with a reason."""
    attrs = message.attributes
    _check_sizes(message)
    dedup_key = attrs.get(DEDUP_KEY, message.message_id)
    if not dedup_key or not dedup_key.strip():
        raise ContractViolation(REASON_INVALID_DEDUP_KEY, "dedup_key is empty and no message_id")
    group = attrs.get(FIFO_GROUP)
    if group is not None and not group.strip():
        raise ContractViolation(REASON_INVALID_FIFO_GROUP, "fifo_group is empty")
    seq = _parse_seq(attrs.get(FIFO_SEQ))
    if seq is not None and group is None:
        raise ContractViolation(REASON_SEQ_WITHOUT_GROUP, "fifo_seq is set but fifo_group is not")
    return Envelope(
        message=message,
        dedup_key=dedup_key,
        fingerprint=content_fingerprint(message.data, attrs),
        deliver_at=_parse_due_time(attrs, now),
        fifo_group=group,
        fifo_seq=seq,
    )


def content_fingerprint(data: bytes, attributes: Mapping[str, str]) -> str:
    """SHA-256 of the payload and the producer's attributes, stable across hops and replays."""
    digest = hashlib.sha256()
    digest.update(len(data).to_bytes(8, "big"))
    digest.update(data)
    for key in sorted(k for k in attributes if k not in TOOLKIT_STAMPED):
        # Length-prefixing makes the encoding unambiguous ("a"+"bc" != "ab"+"c").
        for part in (key.encode(), attributes[key].encode()):
            digest.update(len(part).to_bytes(4, "big"))
            digest.update(part)
    return digest.hexdigest()


def parse_time(value: str) -> datetime:
    """Parse an RFC 3339 timestamp that carries a UTC offset; raise ValueError otherwise."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    parsed = datetime.fromisoformat(text)
    if parsed.tzinfo is None:
        raise ValueError("timestamp has no UTC offset")
    try:
        return parsed.astimezone(UTC)
    except OverflowError as exc:
        # e.g. 0001-01-01T00:00:00+14:00 is before year 1 in UTC. Callers catch ValueError
        # (the CloudEvent decoder did not catch OverflowError and crashed on such a publishTime).
        raise ValueError(f"timestamp is out of range in UTC: {exc}") from None


def format_time(value: datetime) -> str:
    """Format an aware datetime as RFC 3339 UTC with microseconds (``...T00:00:00.000001Z``)."""
    if value.tzinfo is None:
        raise ValueError("naive datetimes are not allowed")
    # Not strftime("%Y..."): glibc writes years before 1000 unpadded ("999-01-01..."), which
    # parse_time - and every later hop - refuses. isoformat always writes four digits.
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _check_sizes(message: Message) -> None:
    if not message.data:
        raise ContractViolation(REASON_EMPTY_DATA, "the message has no data")
    size = message_size(message.data, message.attributes)
    if size > MAX_MESSAGE_BYTES:
        raise ContractViolation(
            REASON_TOO_LARGE,
            f"data and attributes are {size} bytes; at most {MAX_MESSAGE_BYTES} leave room "
            "for the toolkit's attributes",
        )
    limit = MAX_ATTRIBUTES - _STAMPED_BY_INGRESS
    if len(message.attributes) > limit:
        raise ContractViolation(
            REASON_TOO_MANY_ATTRIBUTES,
            f"{len(message.attributes)} attributes; at most {limit} leave room for the toolkit's",
        )
    for key, value in message.attributes.items():
        if is_reserved_attribute(key):
            raise ContractViolation(
                REASON_RESERVED_ATTRIBUTE,
                f"attribute name {key[:40]!r} is reserved (goog* or a client publish argument)",
            )
        if len(key.encode()) > MAX_ATTRIBUTE_KEY_BYTES:
            raise ContractViolation(
                REASON_ATTRIBUTE_TOO_LARGE,
                f"attribute key {key[:40]!r}... exceeds {MAX_ATTRIBUTE_KEY_BYTES} bytes",
            )
        if len(value.encode()) > MAX_ATTRIBUTE_VALUE_BYTES:
            raise ContractViolation(
                REASON_ATTRIBUTE_TOO_LARGE,
                f"attribute {key!r} value exceeds {MAX_ATTRIBUTE_VALUE_BYTES} bytes",
            )


def is_reserved_attribute(name: str) -> bool:
    """True for names that cannot be published as attributes."""
    return name in RESERVED_NAMES or name.lower().startswith(RESERVED_PREFIX)


def message_size(data: bytes, attributes: Mapping[str, str]) -> int:
    """Bytes a publish request spends on this message's data and attributes."""
    return len(data) + sum(len(k.encode()) + len(v.encode()) for k, v in attributes.items())


def _parse_seq(raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        seq = int(raw.strip())
    except ValueError:
        raise ContractViolation(
            REASON_INVALID_FIFO_SEQ, f"fifo_seq {raw!r} is not an integer"
        ) from None
    if seq < 1:
        raise ContractViolation(REASON_INVALID_FIFO_SEQ, f"fifo_seq {seq} must be >= 1")
    return seq


def _parse_due_time(attrs: Mapping[str, str], now: datetime) -> datetime | None:
    raw_at, raw_delay = attrs.get(DELIVER_AT), attrs.get(DELAY_SECONDS)
    if raw_at is not None and raw_delay is not None:
        raise ContractViolation(
            REASON_CONFLICTING_DELAY, "set deliver_at or delay_seconds, not both"
        )
    if raw_at is not None:
        try:
            return parse_time(raw_at)
        except (ValueError, OverflowError) as exc:
            raise ContractViolation(
                REASON_INVALID_DELIVER_AT, f"deliver_at {raw_at!r} is not RFC 3339 UTC: {exc}"
            ) from exc
    if raw_delay is not None:
        try:
            delay = float(raw_delay)
        except ValueError:
            raise ContractViolation(
                REASON_INVALID_DELAY, f"delay_seconds {raw_delay!r} is not a number"
            ) from None
        if not math.isfinite(delay) or delay < 0:
            raise ContractViolation(
                REASON_INVALID_DELAY, f"delay_seconds {raw_delay!r} must be finite and >= 0"
            )
        try:
            return now + timedelta(seconds=delay)
        except OverflowError as exc:
            raise ContractViolation(
                REASON_INVALID_DELAY, f"delay_seconds {raw_delay!r} too large"
            ) from exc
    return None
