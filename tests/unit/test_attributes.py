"""The attribute contract: parsing, validation reasons, fingerprints, time formats."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.errors import ContractViolation
from pubsub_toolkit.message import Message

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def parse(data: bytes = b"x", message_id: str = "m1", **attrs: str) -> attr.Envelope:
    return attr.parse_envelope(Message(data, attrs, message_id=message_id), now=NOW)


def test_dedup_key_defaults_to_the_origin_message_id() -> None:
    assert parse(message_id="42").dedup_key == "42"
    assert parse(message_id="42", dedup_key="order-7").dedup_key == "order-7"


def test_delay_seconds_becomes_an_absolute_deliver_at() -> None:
    envelope = parse(delay_seconds="2.5")
    assert envelope.deliver_at == NOW + timedelta(seconds=2.5)
    stamped = envelope.stamped_attributes()
    assert "delay_seconds" not in stamped
    assert stamped["deliver_at"] == "2030-01-01T00:00:02.500000Z"


def test_deliver_at_accepts_rfc3339_offsets_and_normalises_to_utc() -> None:
    assert parse(deliver_at="2030-01-01T01:00:00+01:00").deliver_at == NOW
    assert parse(deliver_at="2030-01-01T00:00:00Z").deliver_at == NOW


def test_stamped_attributes_keep_everything_and_add_provenance() -> None:
    message = Message(
        b"x", {"a": "1", "fifo_group": "g", "fifo_seq": "3"}, message_id="9", publish_time=NOW
    )
    stamped = attr.parse_envelope(message, now=NOW).stamped_attributes()
    assert stamped["a"] == "1" and stamped["fifo_group"] == "g" and stamped["fifo_seq"] == "3"
    assert stamped["dedup_key"] == "9"
    assert stamped["origin_message_id"] == "9"
    assert stamped["origin_publish_time"] == "2030-01-01T00:00:00.000000Z"
    assert stamped["content_sha256"] == attr.content_fingerprint(b"x", message.attributes)


@pytest.mark.parametrize(
    ("data", "attrs", "reason"),
    [
        (b"", {}, attr.REASON_EMPTY_DATA),
        (b"x", {"deliver_at": "tomorrow"}, attr.REASON_INVALID_DELIVER_AT),
        (b"x", {"deliver_at": "2030-01-01T00:00:00"}, attr.REASON_INVALID_DELIVER_AT),
        (b"x", {"delay_seconds": "-1"}, attr.REASON_INVALID_DELAY),
        (b"x", {"delay_seconds": "soon"}, attr.REASON_INVALID_DELAY),
        (b"x", {"delay_seconds": "nan"}, attr.REASON_INVALID_DELAY),
        (b"x", {"delay_seconds": "1e400"}, attr.REASON_INVALID_DELAY),
        (
            b"x",
            {"delay_seconds": "5", "deliver_at": "2030-01-01T00:00:00Z"},
            attr.REASON_CONFLICTING_DELAY,
        ),
        (b"x", {"fifo_seq": "1"}, attr.REASON_SEQ_WITHOUT_GROUP),
        (b"x", {"fifo_group": "g", "fifo_seq": "0"}, attr.REASON_INVALID_FIFO_SEQ),
        (b"x", {"fifo_group": "g", "fifo_seq": "two"}, attr.REASON_INVALID_FIFO_SEQ),
        (b"x", {"fifo_group": "  "}, attr.REASON_INVALID_FIFO_GROUP),
        (b"x", {"dedup_key": ""}, attr.REASON_INVALID_DEDUP_KEY),
        (b"x", {"big": "v" * 1025}, attr.REASON_ATTRIBUTE_TOO_LARGE),
        (b"x", {"k" * 257: "v"}, attr.REASON_ATTRIBUTE_TOO_LARGE),
        (b"x", {f"a{i}": "v" for i in range(96)}, attr.REASON_TOO_MANY_ATTRIBUTES),
        (b"x", {"topic": "v"}, attr.REASON_RESERVED_ATTRIBUTE),
        (b"x", {"ordering_key": "v"}, attr.REASON_RESERVED_ATTRIBUTE),
        (b"x", {"googClient": "v"}, attr.REASON_RESERVED_ATTRIBUTE),
        (b"x" * (attr.MAX_MESSAGE_BYTES - 10), {"big": "v" * 20}, attr.REASON_TOO_LARGE),
    ],
)
def test_contract_violations_have_reasons(data: bytes, attrs: dict[str, str], reason: str) -> None:
    with pytest.raises(ContractViolation) as info:
        attr.parse_envelope(Message(data, attrs, message_id="m"), now=NOW)
    assert info.value.reason == reason
    assert info.value.detail


def test_fingerprint_ignores_toolkit_attributes_but_not_business_ones() -> None:
    base = attr.content_fingerprint(b"x", {"a": "1"})
    assert (
        attr.content_fingerprint(b"x", {"a": "1", "dedup_key": "k", "origin_message_id": "7"})
        == base
    )
    assert attr.content_fingerprint(b"x", {"a": "2"}) != base
    assert attr.content_fingerprint(b"y", {"a": "1"}) != base
    # Length prefixes keep different splits of the same bytes apart.
    assert attr.content_fingerprint(b"x", {"ab": "c"}) != attr.content_fingerprint(
        b"x", {"a": "bc"}
    )


def test_time_round_trip_and_naive_rejected() -> None:
    t = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    assert attr.parse_time(attr.format_time(t)) == t
    with pytest.raises(ValueError):
        attr.format_time(datetime(2031, 1, 1))  # noqa: DTZ001 - naive on purpose
