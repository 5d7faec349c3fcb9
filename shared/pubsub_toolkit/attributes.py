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
| ``fifo_end`` | producer (``Publisher(end_of_group=True)``) | ``"true"``: the group's last number |
| ``retry_attempt``, ``retry_consumer`` | consumer on ``RetryLater`` (not a producer) | attempt |
| ``dlq_*`` (``dlq_wrapped``) | the dead-letter copy only (ingress refuses a producer's) | wrapped |

Numbers have one canonical ASCII form, and anything else is refused rather than normalised: a
lenient parser would let ``"01"``, ``"+1"`` and an Arabic-Indic one all mean 1 here while later
hops (the consumer, the Node client, a Firestore query) see different strings or crash on them.
The forms:

* ``fifo_seq``: ``[1-9][0-9]*``, at most :data:`MAX_FIFO_SEQ` (``2**53 - 1``: exact as a JSON or
  JavaScript number and within Firestore's int64);
* ``delay_seconds``: ``(0|[1-9][0-9]*)(\\.[0-9]+)?``, at most :data:`MAX_DELAY_SECONDS`;
* ``deliver_at``: RFC 3339 with a UTC offset, ASCII digits, no surrounding whitespace.

A value that breaks the contract raises :class:`~pubsub_toolkit.errors.ContractViolation` with
a short ``reason`` code; callers dead-letter it and ack. Whole messages are checked in
:mod:`pubsub_toolkit.envelope`. A *filler* (:func:`filler_message`) stands for a FIFO number
that carries no new message.

A producer's message must leave room for every attribute the toolkit may add on its way
(:data:`ADDED_AFTER_INGRESS`): ingress refuses one that would not, so no later hop (a
``RetryLater`` copy, a replay, a dead-letter copy) is ever refused for the toolkit's own.

(About 420 lines: the contract is one table of names, a parser per attribute and the reasons,
kept together so a reader sees every rule of one attribute in one place.)
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime

from pubsub_toolkit.errors import ContractViolation
from pubsub_toolkit.message import Message, OutboundMessage

DEDUP_KEY = "dedup_key"
DELIVER_AT = "deliver_at"
DELAY_SECONDS = "delay_seconds"
FIFO_GROUP = "fifo_group"
FIFO_SEQ = "fifo_seq"
# The epoch of the counter that gave fifo_seq (the Publisher sets it): a counter that a store
# loss or its idle expiry started again numbers from 1 in a new epoch, which the gate tells
# apart from the old numbers.
FIFO_EPOCH = "fifo_epoch"
CONTENT_SHA256 = "content_sha256"
ORIGIN_MESSAGE_ID = "origin_message_id"
ORIGIN_PUBLISH_TIME = "origin_publish_time"
ERROR_REASON = "error_reason"
ERROR_DETAIL = "error_detail"
REPLAY_ID = "replay_id"  # set by `pubsub-toolkit dlq replay`: the dead-letter copy's message id
# set by ingress only: this fifo number carries no new message; value = why
FIFO_FILLER = "fifo_filler"
# set by the producer: this fifo number is the group's last (the only value is FIFO_END_TRUE)
FIFO_END = "fifo_end"
FIFO_END_TRUE = "true"
# set by a consumer re-scheduling a message on RetryLater: the attempt number of the copy
# (2 for the first retry) and the consumer id whose count it is (other consumers ignore it);
# ingress drops a producer's
RETRY_ATTEMPT = "retry_attempt"
RETRY_CONSUMER = "retry_consumer"
# Names only the dead-letter path writes: the toolkit's ``dlq_*`` (``dlq_wrapped=json``: the
# copy's data is the whole original as JSON) and Pub/Sub's own ``CloudPubSubDeadLetter*``
# (set when a subscription's dead-letter policy forwards a message). The dead-letter tooling
# reads a letter by them, so a producer's copy would make its message describe itself as a
# dead letter; ingress refuses them (``reserved_attribute``) and the dead-letter copy of a
# message carrying one is always wrapped, so on the dead-letter topic they are never a
# producer's word.
DLQ_PREFIX = "dlq_"
DLQ_WRAPPED = DLQ_PREFIX + "wrapped"
PUBSUB_DEAD_LETTER_PREFIX = "CloudPubSubDeadLetter"

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
        FIFO_EPOCH,  # a retry numbered by a restarted counter is the same content
        REPLAY_ID,  # a replay is the same content as its original
        FIFO_FILLER,  # a filler stands for a number, not for content
        RETRY_ATTEMPT,  # a retry is the same content as the first attempt
        RETRY_CONSUMER,
    }
)


# The names a producer sets, which a near miss (``fifo_sq``, ``Dedup_Key``) is measured against.
PRODUCER_NAMES = (DEDUP_KEY, DELIVER_AT, DELAY_SECONDS, FIFO_GROUP, FIFO_SEQ, FIFO_END)
_PRODUCER_FOLDED = {name.replace("_", ""): name for name in PRODUCER_NAMES}


def near_misses(attributes: Iterable[str]) -> dict[str, str]:
    """The attribute names that look like a mistyped producer attribute, each with the name it
    probably meant: the same letters but for case, ``_`` or ``-`` (``Dedup_Key``,
    ``fifo-group``), or one letter off (``fifo_sq``, ``delay_second``). The toolkit reads only
    the exact names, so such a message goes on as if the attribute were not there."""
    found: dict[str, str] = {}
    for name in attributes:
        if name in PRODUCER_NAMES:
            continue
        folded = name.lower().replace("_", "").replace("-", "")
        for candidate, meant in _PRODUCER_FOLDED.items():
            if folded == candidate or _one_edit_apart(folded, candidate):
                found[name] = meant
                break
    return found


def _one_edit_apart(a: str, b: str) -> bool:
    """One letter inserted, deleted or replaced (a cheap bound, not a full edit distance)."""
    if abs(len(a) - len(b)) > 1 or min(len(a), len(b)) < 5:
        return False
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    return a[i + 1 :] == b[i + 1 :] or a[i:] == b[i + 1 :] or a[i + 1 :] == b[i:]


# Pub/Sub's own limits (https://cloud.google.com/pubsub/quotas#resource_limits).
MAX_ATTRIBUTES = 100
MAX_ATTRIBUTE_KEY_BYTES = 256
MAX_ATTRIBUTE_VALUE_BYTES = 1024
MAX_REQUEST_BYTES = 10_000_000  # a publish request, data and attributes together

# google-cloud-pubsub's trace-context attribute prefix (see pubsub_toolkit.tracing).
_CONTEXT = "googclient_"

# Every attribute the toolkit may add to a message after ingress accepted it, on any path, with
# the most bytes its value can take: ingress's stamps; the trace context a hop forwards
# (W3C: a traceparent is 55 characters, a tracestate at most 512); a consumer's ``RetryLater``
# copy (``retry_consumer`` is the consumer id, which ConsumerSettings keeps within one attribute
# value); a ``dlq replay`` (its id is a message id); the dead-letter copy (the detail is cut to
# 1000 bytes). Ingress counts these names as present - a producer's own ``dedup_key`` or
# ``deliver_at`` is the same name, counted once - and keeps room for their bytes, so a message
# it accepts is never refused later for an attribute the toolkit adds itself.
ADDED_AFTER_INGRESS: Mapping[str, int] = {
    DEDUP_KEY: 128,  # a producer's own is counted in its message; ingress's is a message id
    CONTENT_SHA256: 64,
    ORIGIN_MESSAGE_ID: 128,
    ORIGIN_PUBLISH_TIME: 32,
    DELIVER_AT: 32,
    _CONTEXT + "traceparent": 55,
    _CONTEXT + "tracestate": 512,
    RETRY_ATTEMPT: 9,
    RETRY_CONSUMER: MAX_ATTRIBUTE_VALUE_BYTES,
    REPLAY_ID: 128,
    ERROR_REASON: 64,
    ERROR_DETAIL: 1000,
}
# Room for those attributes' bytes, and framing.
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
# A group without a number would run unordered: refused, never numbered on arrival (push
# delivery reaches ingress in no particular order, so a number given there is not the
# producer's order) and never run as a plain message (ordering silently lost).
REASON_GROUP_WITHOUT_SEQ = "fifo_group_without_seq"
REASON_INVALID_FIFO_END = "invalid_fifo_end"
REASON_END_WITHOUT_GROUP = "fifo_end_without_group"
REASON_FINGERPRINT_MISMATCH = "fingerprint_mismatch"
REASON_MALFORMED_EVENT = "malformed_event"
REASON_INVALID_RETRY_ATTEMPT = "invalid_retry_attempt"


def attributes_on_path(names: Iterable[str]) -> int:
    """How many attributes a message with these (producer's) ``names`` may carry at its
    fullest on the toolkit's path: its own plus every name in :data:`ADDED_AFTER_INGRESS`."""
    return len(set(names) | ADDED_AFTER_INGRESS.keys())


def is_dead_letter_attribute(name: str) -> bool:
    """True for names only the dead-letter path writes: ``dlq_*``, ``CloudPubSubDeadLetter*``."""
    return name.startswith((DLQ_PREFIX, PUBSUB_DEAD_LETTER_PREFIX))


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


def parse_fifo_end(raw: str | None) -> bool:
    """Whether ``fifo_end`` marks the group's last number; ContractViolation(``invalid_fifo_end``)
    for any value but ``"true"`` (a lenient reading could end a group at one hop, not another)."""
    if raw is None:
        return False
    if raw != FIFO_END_TRUE:
        raise ContractViolation(
            REASON_INVALID_FIFO_END,
            f"fifo_end {_shown(raw)} is not {FIFO_END_TRUE!r} (leave it out on every message "
            "but a group's last)",
        )
    return True


def is_end_of_group(message: Message) -> bool:
    """True when ``message`` says it is its group's last number (see :func:`parse_fifo_end`)."""
    return message.attributes.get(FIFO_END) == FIFO_END_TRUE


def parse_retry_attempt(raw: str) -> int:
    """``retry_attempt`` as an int (the same canonical form as ``fifo_seq``, at least 2);
    ContractViolation(``invalid_retry_attempt``) otherwise."""
    if not _FIFO_SEQ_FORM.fullmatch(raw) or len(raw) > 9 or int(raw) < 2:
        raise ContractViolation(
            REASON_INVALID_RETRY_ATTEMPT,
            f"retry_attempt {_shown(raw)} is not an integer from 2 in canonical form",
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
    """SHA-256 of the payload and the producer's attributes, stable across hops and replays.

    Trace context (``googclient_*``, set by google-cloud-pubsub's tracing and the toolkit's)
    is not content: a retried publish carries a new one."""
    digest = hashlib.sha256()
    digest.update(len(data).to_bytes(8, "big"))
    digest.update(data)
    content = (k for k in attributes if k not in TOOLKIT_STAMPED and not k.startswith(_CONTEXT))
    for key in sorted(content):
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


def is_reserved_attribute(name: str) -> bool:
    """True for names that cannot be published as attributes. ``googclient_*`` is the one
    ``goog`` name allowed: google-cloud-pubsub's own trace context (``googclient_traceparent``)."""
    if name.startswith(_CONTEXT):
        return False
    return name in RESERVED_NAMES or name.lower().startswith(RESERVED_PREFIX)


def _shown(raw: str) -> str:
    """``raw`` for an error detail: repr (so " 5" and "\\u0661" are visible), cut to 40 chars."""
    return repr(raw) if len(raw) <= 40 else f"{raw[:40]!r}... ({len(raw)} characters)"


# Values of ``fifo_filler``: why a number carries no new message. One that starts with
# FILLER_DEAD_LETTERED stands for a dead-lettered message: the gate leaves a tombstone, so a
# replay of it arriving later is kept (fifo_late_after_skip), never dropped.
FILLER_DEAD_LETTERED = "dead_lettered:"
FILLER_CANCELLED = "cancelled"
# A producer's retry numbered again: its content runs at the first copy's number (named after
# the prefix), and this one's number carries nothing.
FILLER_RENUMBERED = "renumbered_copy_of:"


def filler_message(
    group: str, seq: int | str, dedup_key: str, why: str, *, epoch: str | None = None
) -> OutboundMessage:
    """The marker for a number that carries no message (ingress and the relay send it), in the
    counter epoch of the message it stands for."""
    attributes = {FIFO_GROUP: group, FIFO_SEQ: str(seq), DEDUP_KEY: dedup_key, FIFO_FILLER: why}
    if epoch is not None:
        attributes[FIFO_EPOCH] = epoch
    return OutboundMessage(b"", attributes, ordering_key=group)


def is_filler(message: Message) -> bool:
    """True for ingress's marker of a number that carries no new message."""
    return FIFO_FILLER in message.attributes


def fifo_number(message: Message) -> tuple[str, int] | None:
    """The valid (group, seq) a message carries, if any - even when the rest is invalid."""
    group = message.attributes.get(FIFO_GROUP)
    raw_seq = message.attributes.get(FIFO_SEQ)
    if group is None or raw_seq is None or not group.strip():
        return None
    if len(group.encode()) > MAX_FIFO_GROUP_BYTES or FIFO_FILLER in message.attributes:
        return None
    try:
        return group, parse_fifo_seq(raw_seq)
    except ContractViolation:
        return None
