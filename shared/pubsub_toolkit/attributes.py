"""The attribute contract: names, parsing and validation, in one place.

| attribute | set by | meaning |
|---|---|---|
| ``dedup_key`` | producer, else ingress (= origin message_id) | stable idempotency key |
| ``deliver_at`` | producer, or ingress from ``delay_seconds`` | RFC 3339 UTC due time |
| ``delay_seconds`` | producer | convenience; converted to ``deliver_at`` on receipt |
| ``fifo_group`` | producer | category key; also the Pub/Sub ordering key |
| ``fifo_seq`` | ``Publisher`` (sequencer) | 1-based number within the group |
| ``content_sha256`` | ingress | fingerprint of data + business attributes |
| ``origin_message_id``, ``origin_publish_time`` | ingress only (a producer's replaced) | origin |
| ``error_reason``, ``error_detail`` | whoever dead-letters (ingress drops a producer's) | why |
| ``replay_id`` | ``dlq replay`` only (minted in the dedup store) | a dead-letter replay |
| ``fifo_filler`` | ingress only (drops a producer's) | this number carries no new message |

Numbers have one canonical ASCII form, and anything else is refused rather than normalised: a
lenient parser would let ``"01"``, ``"+1"`` and an Arabic-Indic one all mean 1 here while later
hops (the consumer, the Node client, a Firestore query) see different strings or crash on them.
The forms:

* ``fifo_seq``: ``[1-9][0-9]*``, at most :data:`MAX_FIFO_SEQ` (``2**53 - 1``: exact as a JSON or
  JavaScript number and within Firestore's int64);
* ``delay_seconds``: ``(0|[1-9][0-9]*)(\\.[0-9]+)?``, at most :data:`MAX_DELAY_SECONDS`;
* ``deliver_at``: RFC 3339 with a UTC offset, ASCII digits, no surrounding whitespace.

A message that breaks the contract raises :class:`~pubsub_toolkit.errors.ContractViolation`
with a short ``reason`` code; callers dead-letter it and ack. :func:`parse_envelope` checks what
a producer sent; :func:`check_publishable` checks a message the toolkit is about to publish
again from stored state (the relay's task bodies), with Pub/Sub's own limits.
"""

from __future__ import annotations

import hashlib
import math
import re
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
# set by ingress only: this fifo number carries no new message; value = why
FIFO_FILLER = "fifo_filler"

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
        FIFO_FILLER,  # a filler stands for a number, not for content
    }
)

# What ingress never forwards from the delivery it received: ``delay_seconds`` becomes an
# absolute ``deliver_at``; the others only the toolkit may set, and a producer's copy would be
# taken downstream for the toolkit's word (a fake "why dead-lettered", a number that "carries no
# message" so the consumer skips a real one).
_DROPPED_AT_INGRESS = frozenset({DELAY_SECONDS, ERROR_REASON, ERROR_DETAIL, FIFO_FILLER})

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

# The largest fifo_seq: every integer up to 2**53 - 1 is exact in a JSON/JavaScript number (the
# Node client, the status page) and fits Firestore's int64. 2**63 crash-looped the consumer: the
# state write failed with "Value out of range" and the message was redelivered forever.
MAX_FIFO_SEQ = 2**53 - 1
# A bound well beyond any real delay, so that ``now + delay`` never overflows and no float
# rounding hides the value; the scheduler refuses more than 365 days with its own reason
# (``delay_too_long``), which names the real limit.
MAX_DELAY_SECONDS = 10 * 365 * 24 * 3600

# ``[0-9]``, never ``\d``: in Python ``\d`` (like int() and float()) accepts every Unicode digit,
# so "\u0661" (Arabic-Indic one) would be 1. fullmatch, never ``$``: ``$`` accepts a final newline.
_FIFO_SEQ_FORM = re.compile(r"[1-9][0-9]*")
_DELAY_FORM = re.compile(r"(0|[1-9][0-9]*)(\.[0-9]+)?")
# RFC 3339 section 5.6 (date-time): "T" and "Z" may be lower case; the offset is required.
# datetime.fromisoformat alone accepts more (week dates, "20300101T000000", a space for "T").
_RFC3339_FORM = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)

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

    def stamped_attributes(self, *, replay: bool = False) -> dict[str, str]:
        """The attributes to forward: the producer's, plus dedup key, fingerprint, provenance.

        Ingress owns its attributes: ``origin_message_id`` and ``origin_publish_time`` are
        always ingress's own (the delivery's message id and publish time), whatever the
        producer set, and a producer's ``error_reason``, ``error_detail`` and ``fifo_filler``
        are dropped. ``replay=True`` is for a genuine (minted) replay from the dead-letter
        topic only: its provenance attributes describe the *original* message and are kept
        (set from this delivery only when the copy has none).

        ``delay_seconds`` is replaced by the absolute ``deliver_at`` so every later hop sees
        one due time, however late it receives the message.
        """
        attrs = {k: v for k, v in self.message.attributes.items() if k not in _DROPPED_AT_INGRESS}
        if not replay:
            attrs.pop(ORIGIN_MESSAGE_ID, None)
            attrs.pop(ORIGIN_PUBLISH_TIME, None)
        attrs[DEDUP_KEY] = self.dedup_key
        attrs[CONTENT_SHA256] = self.fingerprint
        if self.message.message_id:
            attrs.setdefault(ORIGIN_MESSAGE_ID, self.message.message_id)
        if self.message.publish_time is not None:
            attrs.setdefault(ORIGIN_PUBLISH_TIME, format_time(self.message.publish_time))
        if self.deliver_at is not None:
            attrs[DELIVER_AT] = format_time(self.deliver_at)
        return attrs


@dataclass(frozen=True)
class _Fields:
    """The contract's attributes of one message, parsed (``delay`` in seconds)."""

    fifo_group: str | None
    fifo_seq: int | None
    deliver_at: datetime | None
    delay: float | None


def parse_envelope(message: Message, *, now: datetime) -> Envelope:
    """Validate ``message`` against the contract; raise ContractViolation with a reason."""
    attrs = message.attributes
    if not message.data:
        raise ContractViolation(REASON_EMPTY_DATA, "the message has no data")
    _check_limits(
        message.data,
        attrs,
        max_attributes=MAX_ATTRIBUTES - _STAMPED_BY_INGRESS,
        max_bytes=MAX_MESSAGE_BYTES,
    )
    dedup_key = attrs.get(DEDUP_KEY, message.message_id)
    if not dedup_key or not dedup_key.strip():
        raise ContractViolation(REASON_INVALID_DEDUP_KEY, "dedup_key is empty and no message_id")
    fields = _parse_fields(attrs)
    deliver_at = fields.deliver_at
    if fields.delay is not None:
        try:
            deliver_at = now + timedelta(seconds=fields.delay)
        except OverflowError as exc:  # only within MAX_DELAY_SECONDS of the year 9999
            raise ContractViolation(
                REASON_INVALID_DELAY, f"delay_seconds {attrs[DELAY_SECONDS]!r} is too large"
            ) from exc
    return Envelope(
        message=message,
        dedup_key=dedup_key,
        fingerprint=content_fingerprint(message.data, attrs),
        deliver_at=deliver_at,
        fifo_group=fields.fifo_group,
        fifo_seq=fields.fifo_seq,
    )


def check_publishable(
    data: bytes,
    attributes: Mapping[str, str],
    *,
    max_attributes: int = MAX_ATTRIBUTES,
    max_bytes: int = MAX_REQUEST_BYTES,
) -> None:
    """Raise ContractViolation if the toolkit must not publish this message as it is.

    For a message rebuilt from stored state rather than received from a producer (the relay's
    task bodies): what Pub/Sub would refuse (more than ``max_attributes``, reserved names, key
    and value sizes, ``max_bytes`` in all, neither data nor attributes) and what the contract
    forbids (a blank ``dedup_key`` or ``fifo_group``, a ``fifo_seq`` without a group, and any
    ``fifo_seq``, ``deliver_at`` or ``delay_seconds`` not in its canonical form). Ingress's
    checks of a producer's message are the same rules, with room left for its own attributes.
    """
    if not data and not attributes:
        raise ContractViolation(REASON_EMPTY_DATA, "the message has neither data nor attributes")
    _check_limits(data, attributes, max_attributes=max_attributes, max_bytes=max_bytes)
    key = attributes.get(DEDUP_KEY)
    if key is not None and not key.strip():
        raise ContractViolation(REASON_INVALID_DEDUP_KEY, "dedup_key is blank")
    _parse_fields(attributes)


def parse_fifo_seq(raw: str) -> int:
    """``fifo_seq`` as an int; ContractViolation(``invalid_fifo_seq``) unless canonical.

    Canonical: ASCII ``[1-9][0-9]*`` up to :data:`MAX_FIFO_SEQ` - no sign, spaces, leading
    zeros, underscores or non-ASCII digits. Ingress and the consumer both read numbers with
    this, so they can never disagree about which number a message carries.
    """
    if not _FIFO_SEQ_FORM.fullmatch(raw):
        raise ContractViolation(
            REASON_INVALID_FIFO_SEQ,
            f"fifo_seq {_shown(raw)} is not a positive integer in canonical form "
            "(ASCII digits, no sign, spaces or leading zeros)",
        )
    # The length check first: no int() of a 1000-digit string just to refuse it.
    if len(raw) > len(str(MAX_FIFO_SEQ)) or int(raw) > MAX_FIFO_SEQ:
        raise ContractViolation(
            REASON_INVALID_FIFO_SEQ,
            f"fifo_seq {_shown(raw)} is out of range: at most 2**53 - 1 ({MAX_FIFO_SEQ})",
        )
    return int(raw)


def parse_delay_seconds(raw: str) -> float:
    """``delay_seconds`` in seconds; ContractViolation(``invalid_delay_seconds``) unless canonical.

    Canonical: ASCII ``(0|[1-9][0-9]*)(\\.[0-9]+)?`` up to :data:`MAX_DELAY_SECONDS` - no sign,
    spaces, underscores, exponent, ``inf``/``nan`` or non-ASCII digits.
    """
    if not _DELAY_FORM.fullmatch(raw):
        raise ContractViolation(
            REASON_INVALID_DELAY,
            f"delay_seconds {_shown(raw)} is not a non-negative decimal in canonical form "
            "(ASCII digits and an optional fraction, e.g. 90 or 1.5)",
        )
    delay = float(raw)  # over ~309 integer digits this is inf, refused just below
    if not math.isfinite(delay) or delay > MAX_DELAY_SECONDS:
        raise ContractViolation(
            REASON_INVALID_DELAY,
            f"delay_seconds {_shown(raw)} is out of range: at most {MAX_DELAY_SECONDS} (10 years)",
        )
    return delay


def parse_deliver_at(raw: str) -> datetime:
    """``deliver_at`` as an aware UTC datetime; ContractViolation(``invalid_deliver_at``) unless
    it is RFC 3339 with a UTC offset, in ASCII digits, without surrounding whitespace."""
    if not _RFC3339_FORM.fullmatch(raw):
        raise ContractViolation(
            REASON_INVALID_DELIVER_AT,
            f"deliver_at {_shown(raw)} is not an RFC 3339 timestamp with a UTC offset "
            "(e.g. 2030-01-01T00:00:00Z)",
        )
    try:
        return parse_time(raw)
    except ValueError as exc:  # e.g. February 30th, hour 25, an offset beyond 24 hours
        raise ContractViolation(
            REASON_INVALID_DELIVER_AT, f"deliver_at {_shown(raw)} is not a valid time: {exc}"
        ) from exc


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
    """Parse an RFC 3339 timestamp that carries a UTC offset; raise ValueError otherwise.

    Lenient about the form (surrounding whitespace, ISO 8601 variants) for times the toolkit
    reads from its own state and from Pub/Sub; a producer's ``deliver_at`` goes through the
    strict :func:`parse_deliver_at`.
    """
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


def _parse_fields(attrs: Mapping[str, str]) -> _Fields:
    """Parse the contract's group, number and due time; raise ContractViolation if invalid."""
    group = attrs.get(FIFO_GROUP)
    if group is not None and not group.strip():
        raise ContractViolation(REASON_INVALID_FIFO_GROUP, "fifo_group is empty")
    raw_seq = attrs.get(FIFO_SEQ)
    seq = None if raw_seq is None else parse_fifo_seq(raw_seq)
    if seq is not None and group is None:
        raise ContractViolation(REASON_SEQ_WITHOUT_GROUP, "fifo_seq is set but fifo_group is not")
    raw_at, raw_delay = attrs.get(DELIVER_AT), attrs.get(DELAY_SECONDS)
    if raw_at is not None and raw_delay is not None:
        raise ContractViolation(
            REASON_CONFLICTING_DELAY, "set deliver_at or delay_seconds, not both"
        )
    return _Fields(
        fifo_group=group,
        fifo_seq=seq,
        deliver_at=None if raw_at is None else parse_deliver_at(raw_at),
        delay=None if raw_delay is None else parse_delay_seconds(raw_delay),
    )


def _check_limits(
    data: bytes, attributes: Mapping[str, str], *, max_attributes: int, max_bytes: int
) -> None:
    """Pub/Sub's limits (and reserved names), with ``max_*`` leaving room for later stamps."""
    size = message_size(data, attributes)
    if size > max_bytes:
        raise ContractViolation(
            REASON_TOO_LARGE,
            f"data and attributes are {size} bytes; at most {max_bytes}"
            + (" leave room for the toolkit's attributes" if max_bytes < MAX_REQUEST_BYTES else ""),
        )
    if len(attributes) > max_attributes:
        raise ContractViolation(
            REASON_TOO_MANY_ATTRIBUTES,
            f"{len(attributes)} attributes; at most {max_attributes}"
            + (" leave room for the toolkit's" if max_attributes < MAX_ATTRIBUTES else ""),
        )
    for key, value in attributes.items():
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


def _shown(raw: str) -> str:
    """``raw`` for an error detail: repr (so " 5" and "\\u0661" are visible), cut to 40 chars."""
    return repr(raw) if len(raw) <= 40 else f"{raw[:40]!r}... ({len(raw)} characters)"
