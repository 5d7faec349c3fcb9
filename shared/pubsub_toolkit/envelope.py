"""The attribute contract, checked: a producer's message as ingress receives it, and a message
the toolkit is about to publish again.

:func:`parse_envelope` validates what a producer sent (Pub/Sub's limits with room for every
attribute the toolkit may add on the message's way, no name only dead letters carry, the
canonical forms of :mod:`pubsub_toolkit.attributes`) and returns the
:class:`Envelope` ingress routes; :func:`check_publishable` applies the same rules to a message
rebuilt from stored state (the relay's task bodies), with Pub/Sub's own limits. A message that
breaks the contract raises :class:`~pubsub_toolkit.errors.ContractViolation` with a short
``reason`` code; callers dead-letter it and ack.

(About 360 lines: every rule of the contract in one module, so that ingress, the relay and the
consumer cannot drift apart.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from pubsub_toolkit.attributes import (
    ADDED_AFTER_INGRESS,
    CONTENT_SHA256,
    DEDUP_KEY,
    DELAY_SECONDS,
    DELIVER_AT,
    DLQ_PREFIX,
    ERROR_DETAIL,
    ERROR_REASON,
    FIFO_END,
    FIFO_FILLER,
    FIFO_GROUP,
    FIFO_SEQ,
    MAX_ATTRIBUTE_KEY_BYTES,
    MAX_ATTRIBUTE_VALUE_BYTES,
    MAX_ATTRIBUTES,
    MAX_MESSAGE_BYTES,
    MAX_REQUEST_BYTES,
    ORIGIN_MESSAGE_ID,
    ORIGIN_PUBLISH_TIME,
    PUBSUB_DEAD_LETTER_PREFIX,
    REASON_ATTRIBUTE_TOO_LARGE,
    REASON_CONFLICTING_DELAY,
    REASON_EMPTY_DATA,
    REASON_END_WITHOUT_GROUP,
    REASON_GROUP_WITHOUT_SEQ,
    REASON_INVALID_DEDUP_KEY,
    REASON_INVALID_DELAY,
    REASON_INVALID_FIFO_GROUP,
    REASON_RESERVED_ATTRIBUTE,
    REASON_SEQ_WITHOUT_GROUP,
    REASON_TOO_LARGE,
    REASON_TOO_MANY_ATTRIBUTES,
    RETRY_ATTEMPT,
    RETRY_CONSUMER,
    attributes_on_path,
    content_fingerprint,
    format_time,
    is_dead_letter_attribute,
    is_reserved_attribute,
    parse_delay_seconds,
    parse_deliver_at,
    parse_fifo_end,
    parse_fifo_seq,
)
from pubsub_toolkit.errors import ContractViolation
from pubsub_toolkit.message import Message

# What ingress never forwards from the delivery it received: ``delay_seconds`` becomes an
# absolute ``deliver_at``; the others only the toolkit may set, and a producer's copy would be
# taken downstream for the toolkit's word (a fake "why dead-lettered", a number that "carries no
# message" so the consumer skips a real one).
_DROPPED_AT_INGRESS = frozenset(
    {DELAY_SECONDS, ERROR_REASON, ERROR_DETAIL, FIFO_FILLER, RETRY_ATTEMPT, RETRY_CONSUMER}
)


@dataclass(frozen=True)
class Envelope:
    """A message that satisfies the contract, with its toolkit attributes parsed."""

    message: Message
    dedup_key: str
    fingerprint: str
    deliver_at: datetime | None
    fifo_group: str | None
    fifo_seq: int | None
    # The producer marked this number as its group's last (``fifo_end="true"``).
    fifo_end: bool = False

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
    fifo_end: bool = False


def parse_envelope(message: Message, *, now: datetime) -> Envelope:
    """Validate ``message`` against the contract; raise ContractViolation with a reason."""
    attrs = message.attributes
    dedup_key, fields = check_produced(message.data, attrs, message_id=message.message_id)
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
        fifo_end=fields.fifo_end,
    )


# A fingerprint as ingress stamps it (content_fingerprint: SHA-256, lower-case hex).
_DIGEST = re.compile(r"[0-9a-f]{64}")


def as_replay(envelope: Envelope) -> Envelope:
    """``envelope`` of a genuine (minted) replay from the dead-letter topic, with the
    fingerprint of the message it replays.

    A replay is its original's content, but not always with its original's attributes:
    ingress turned a ``delay_seconds`` into ``deliver_at``, and the letter carries the latter.
    Recomputed over it, the fingerprint differs, and the consumer and the relay would take the
    replay for a reused key (``fingerprint_mismatch``). The letter's ``content_sha256`` is the
    one ingress stamped on the original; only a letter dead-lettered before ingress stamped
    anything (a contract violation) has none, and its attributes are the producer's own."""
    carried = envelope.message.attributes.get(CONTENT_SHA256, "")
    if not _DIGEST.fullmatch(carried):
        return envelope
    return replace(envelope, fingerprint=carried)


def check_produced(
    data: bytes, attrs: Mapping[str, str], *, message_id: str
) -> tuple[str, _Fields]:
    """Ingress's rules for a producer's message (the dedup key, ``message_id`` without one, and
    the parsed contract fields), without building the envelope: what :func:`parse_envelope`
    checks, and what the ``Publisher`` checks before it numbers a message (no fingerprint)."""
    if not data:
        raise ContractViolation(REASON_EMPTY_DATA, "the message has no data")
    _check_limits(data, attrs, max_attributes=MAX_ATTRIBUTES, max_bytes=MAX_MESSAGE_BYTES)
    _check_room_on_path(attrs)
    _check_no_dead_letter_attribute(attrs)
    dedup_key = attrs.get(DEDUP_KEY, message_id)
    if not dedup_key or not dedup_key.strip():
        given = DEDUP_KEY in attrs  # the operator must look at the producer's key, not the id
        detail = "dedup_key is blank" if given else "no dedup_key and no message_id"
        raise ContractViolation(REASON_INVALID_DEDUP_KEY, detail)
    return dedup_key, _parse_fields(attrs)


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
    forbids (a blank ``dedup_key`` or ``fifo_group``, a ``fifo_seq`` or ``fifo_end`` without a
    group, a group without a ``fifo_seq``, a ``fifo_end`` other than ``"true"``, and any
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


def check_delivered(attributes: Mapping[str, str]) -> None:
    """Raise ContractViolation if a delivered message's key or group breaks the contract.

    What a consumer checks before it acts on those attributes - also of a message that never
    passed ingress (a user's own subscriber): a blank ``dedup_key`` (present, so never replaced
    by the message id), a blank ``fifo_group``, a ``fifo_seq`` or ``fifo_end`` without a group,
    a group without a ``fifo_seq`` (never run unordered).
    The number and the end themselves are parsed where the gate uses them.
    """
    key = attributes.get(DEDUP_KEY)
    if key is not None and not key.strip():
        raise ContractViolation(REASON_INVALID_DEDUP_KEY, "dedup_key is blank")
    group = attributes.get(FIFO_GROUP)
    if group is not None and not group.strip():
        raise ContractViolation(REASON_INVALID_FIFO_GROUP, "fifo_group is empty")
    check_fifo_pair(group, numbered=FIFO_SEQ in attributes)
    if group is None and parse_fifo_end(attributes.get(FIFO_END)):  # as ingress: value first
        raise ContractViolation(REASON_END_WITHOUT_GROUP, "fifo_end is set but fifo_group is not")


def check_fifo_pair(group: str | None, *, numbered: bool) -> None:
    """Raise ContractViolation unless a ``fifo_group`` and a ``fifo_seq`` (``numbered``) come
    together: a number without a group orders nothing, and a group without a number would run
    unordered - refused wherever a message is checked (ingress, a rebuilt message, a
    delivery), never passed on."""
    if numbered and group is None:
        raise ContractViolation(REASON_SEQ_WITHOUT_GROUP, "fifo_seq is set but fifo_group is not")
    if group is not None and not numbered:
        raise ContractViolation(REASON_GROUP_WITHOUT_SEQ, "fifo_group is set but fifo_seq is not")


def _parse_fields(attrs: Mapping[str, str]) -> _Fields:
    """Parse the contract's group, number and due time; raise ContractViolation if invalid."""
    group = attrs.get(FIFO_GROUP)
    if group is not None and not group.strip():
        raise ContractViolation(REASON_INVALID_FIFO_GROUP, "fifo_group is empty")
    raw_seq = attrs.get(FIFO_SEQ)
    seq = None if raw_seq is None else parse_fifo_seq(raw_seq)
    check_fifo_pair(group, numbered=seq is not None)
    end = parse_fifo_end(attrs.get(FIFO_END))
    if end and group is None:
        # An end of no group ends nothing: refused, so the producer learns its mark was lost.
        raise ContractViolation(REASON_END_WITHOUT_GROUP, "fifo_end is set but fifo_group is not")
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
        fifo_end=end,
    )


def _check_room_on_path(attrs: Mapping[str, str]) -> None:
    """ContractViolation(``too_many_attributes``) unless the producer's attributes leave room
    for every one the toolkit may add later (``attributes.ADDED_AFTER_INGRESS``): refused
    here, with the reason, rather than at a later hop (a ``RetryLater`` copy, a replay)."""
    kept = attrs.keys() - _DROPPED_AT_INGRESS  # delay_seconds becomes deliver_at, one name
    count = attributes_on_path(kept)
    if count > MAX_ATTRIBUTES:
        own = len(kept - ADDED_AFTER_INGRESS.keys())
        raise ContractViolation(
            REASON_TOO_MANY_ATTRIBUTES,
            f"{own} attributes of the producer's own; at most "
            f"{MAX_ATTRIBUTES - len(ADDED_AFTER_INGRESS)} leave room for the "
            f"{len(ADDED_AFTER_INGRESS)} the toolkit may add on the message's way "
            "(ingress's stamps, trace context, a retry, a replay, a dead-letter reason)",
        )


def _check_no_dead_letter_attribute(attrs: Mapping[str, str]) -> None:
    """ContractViolation(``reserved_attribute``) for a producer's ``dlq_*`` or
    ``CloudPubSubDeadLetter*``: the dead-letter tooling reads a letter by them.

    Refused rather than dropped: no genuine message reaches ingress with one (a ``dlq replay``
    sends the original, unwrapped), so it is a mistake or a forgery, and dropping it would
    forward a message that is not the one the producer sent. The dead-letter copy keeps the
    message whole (wrapped, so the name stays the producer's, inside the copy's data).
    """
    for key in attrs:
        if is_dead_letter_attribute(key):
            raise ContractViolation(
                REASON_RESERVED_ATTRIBUTE,
                f"attribute name {key[:40]!r} is reserved for dead letters "
                f"({DLQ_PREFIX}* is the toolkit's, {PUBSUB_DEAD_LETTER_PREFIX}* Pub/Sub's)",
            )


def _check_limits(
    data: bytes, attributes: Mapping[str, str], *, max_attributes: int, max_bytes: int
) -> None:
    """Pub/Sub's limits (and reserved names), with ``max_*`` leaving room for later stamps.

    One pass over the attributes (every message crosses this at the Publisher and at ingress);
    an ASCII string's length is its UTF-8 size, without encoding it."""
    size = len(data)
    first_bad: tuple[str, str, int, int] | None = None
    for key, value in attributes.items():
        key_bytes = len(key) if key.isascii() else len(key.encode())
        value_bytes = len(value) if value.isascii() else len(value.encode())
        size += key_bytes + value_bytes
        if first_bad is None and (
            key_bytes > MAX_ATTRIBUTE_KEY_BYTES
            or value_bytes > MAX_ATTRIBUTE_VALUE_BYTES
            or is_reserved_attribute(key)
        ):
            first_bad = key, value, key_bytes, value_bytes
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
    if first_bad is None:
        return
    key, value, key_bytes, value_bytes = first_bad
    if is_reserved_attribute(key):
        raise ContractViolation(
            REASON_RESERVED_ATTRIBUTE,
            f"attribute name {key[:40]!r} is reserved (goog* or a client publish argument)",
        )
    if key_bytes > MAX_ATTRIBUTE_KEY_BYTES:
        raise ContractViolation(
            REASON_ATTRIBUTE_TOO_LARGE,
            f"attribute key {key[:40]!r}... exceeds {MAX_ATTRIBUTE_KEY_BYTES} bytes",
        )
    raise ContractViolation(
        REASON_ATTRIBUTE_TOO_LARGE,
        f"attribute {key!r} value exceeds {MAX_ATTRIBUTE_VALUE_BYTES} bytes",
    )
