"""The attribute contract: parsing, validation reasons, fingerprints, time formats."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.envelope import Envelope, check_publishable, parse_envelope
from pubsub_toolkit.errors import ContractViolation
from pubsub_toolkit.message import Message

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def parse(data: bytes = b"x", message_id: str = "m1", **attrs: str) -> Envelope:
    return parse_envelope(Message(data, attrs, message_id=message_id), now=NOW)


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
    stamped = parse_envelope(message, now=NOW).stamped_attributes()
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
        parse_envelope(Message(data, attrs, message_id="m"), now=NOW)
    assert info.value.reason == reason
    assert info.value.detail


@pytest.mark.parametrize(
    ("attrs", "message_id", "detail"),
    [
        ({"dedup_key": ""}, "m", "dedup_key is blank"),
        ({"dedup_key": "  "}, "m", "dedup_key is blank"),
        ({}, "", "no dedup_key and no message_id"),
    ],
)
def test_an_invalid_dedup_key_says_which_of_the_two_is_missing(
    attrs: dict[str, str], message_id: str, detail: str
) -> None:
    # A blank dedup_key on a message that has an id said "no message_id" (found by a new
    # user's hostile messages): the operator reading the dead letter looked for the wrong fault.
    with pytest.raises(ContractViolation) as info:
        parse_envelope(Message(b"x", attrs, message_id=message_id), now=NOW)
    assert (info.value.reason, info.value.detail) == (attr.REASON_INVALID_DEDUP_KEY, detail)


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


# --- canonical numbers (defects 8 and 10) ---------------------------------------------------

ARABIC_INDIC_ONE = "\u0661"


@pytest.mark.parametrize(
    "raw",
    [
        "01",
        "+1",
        "-1",
        " 1",
        "1 ",
        "1\n",
        "1_0",
        ARABIC_INDIC_ONE,
        "\uff11",  # fullwidth 1
        "\u00b2",  # superscript 2: isdigit() but not a digit int() reads
        "1e3",
        "1.0",
        "0x1",
        "",
        "0",
        str(2**53),
        str(2**63),
        "9" * 40,
    ],
)
def test_fifo_seq_has_one_canonical_form(raw: str) -> None:
    with pytest.raises(ContractViolation) as info:
        attr.parse_fifo_seq(raw)
    assert info.value.reason == attr.REASON_INVALID_FIFO_SEQ
    with pytest.raises(ContractViolation) as through_ingress:
        parse(fifo_group="g", fifo_seq=raw)
    assert through_ingress.value.reason == attr.REASON_INVALID_FIFO_SEQ


def test_fifo_seq_accepts_every_canonical_number_up_to_2_pow_53_minus_1() -> None:
    assert attr.MAX_FIFO_SEQ == 2**53 - 1
    for n in (1, 9, 10, 123456789, attr.MAX_FIFO_SEQ):
        assert attr.parse_fifo_seq(str(n)) == n
        assert parse(fifo_group="g", fifo_seq=str(n)).fifo_seq == n


@pytest.mark.parametrize(
    "raw",
    [
        " 5",
        "5 ",
        "\t5",
        "1_0",
        "+1",
        "-0",
        "05",
        "00.5",
        ".5",
        "5.",
        "1e3",
        "1E3",
        "inf",
        "Infinity",
        "nan",
        "0x10",
        ARABIC_INDIC_ONE,
        "\u0665",  # Arabic-Indic five
        "1" + ARABIC_INDIC_ONE,
        "",
        str(attr.MAX_DELAY_SECONDS + 1),
        f"{attr.MAX_DELAY_SECONDS}.000001",
        "9" * 400,  # float() reads this as inf
    ],
)
def test_delay_seconds_has_one_canonical_form(raw: str) -> None:
    with pytest.raises(ContractViolation) as info:
        parse(delay_seconds=raw)
    assert info.value.reason == attr.REASON_INVALID_DELAY
    assert info.value.detail


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("0", 0.0), ("0.5", 0.5), ("90", 90.0), ("1.250", 1.25), (str(attr.MAX_DELAY_SECONDS), None)],
)
def test_canonical_delays_are_accepted(raw: str, seconds: float | None) -> None:
    expected = float(raw) if seconds is None else seconds
    assert attr.parse_delay_seconds(raw) == expected
    assert parse(delay_seconds=raw).deliver_at == NOW + timedelta(seconds=expected)


@pytest.mark.parametrize(
    "raw",
    [
        " 2030-01-01T00:00:00Z",
        "2030-01-01T00:00:00Z ",
        "2030-01-01T00:00:00Z\n",
        "\u0662\u0660\u0663\u0660-01-01T00:00:00Z",  # the year in Arabic-Indic digits
        "2030-01-01T00:00:0\u0661Z",
        "2030-01-01 00:00:00Z",  # ISO 8601, not RFC 3339
        "20300101T000000Z",
        "2030-W01-1T00:00:00Z",
        "2030-01-01T00:00Z",
        "2030-01-01T00:00:00+0100",
        "2030-02-30T00:00:00Z",
        "2030-01-01T00:00:00+25:00",
    ],
)
def test_deliver_at_must_be_rfc3339_in_ascii_without_whitespace(raw: str) -> None:
    with pytest.raises(ContractViolation) as info:
        parse(deliver_at=raw)
    assert info.value.reason == attr.REASON_INVALID_DELIVER_AT


def test_deliver_at_forms_rfc3339_allows() -> None:
    for raw in (
        "2030-01-01T00:00:00Z",
        "2030-01-01t00:00:00z",
        "2030-01-01T00:00:00.000000001Z",  # any number of fraction digits
        "2030-01-01T02:00:00+02:00",
        "2029-12-31T23:00:00-01:00",
    ):
        assert parse(deliver_at=raw).deliver_at == NOW, raw


# --- ingress owns its attributes (defect 10) ------------------------------------------------

FORGED = {
    attr.ORIGIN_MESSAGE_ID: "forged-id",
    attr.ORIGIN_PUBLISH_TIME: "1999-01-01T00:00:00Z",
    attr.ERROR_REASON: "forged_reason",
    attr.ERROR_DETAIL: "forged detail",
    attr.FIFO_FILLER: "forged filler",
}


def test_stamped_attributes_replace_or_drop_what_a_producer_may_not_set() -> None:
    message = Message(b"x", {"a": "1", **FORGED}, message_id="real-id", publish_time=NOW)
    stamped = parse_envelope(message, now=NOW).stamped_attributes()
    assert stamped[attr.ORIGIN_MESSAGE_ID] == "real-id"
    assert stamped[attr.ORIGIN_PUBLISH_TIME] == attr.format_time(NOW)
    for dropped in (attr.ERROR_REASON, attr.ERROR_DETAIL, attr.FIFO_FILLER):
        assert dropped not in stamped
    assert stamped["a"] == "1"


def test_without_a_publish_time_a_producers_origin_publish_time_is_dropped_not_kept() -> None:
    message = Message(b"x", dict(FORGED), message_id="real-id")
    stamped = parse_envelope(message, now=NOW).stamped_attributes()
    assert attr.ORIGIN_PUBLISH_TIME not in stamped
    assert stamped[attr.ORIGIN_MESSAGE_ID] == "real-id"


def test_a_genuine_replay_keeps_the_originals_provenance_but_not_error_or_filler() -> None:
    original = {
        attr.ORIGIN_MESSAGE_ID: "original-id",
        attr.ORIGIN_PUBLISH_TIME: "2029-01-01T00:00:00.000000Z",
    }
    replayed = Message(
        b"x",
        {**FORGED, **original, attr.REPLAY_ID: "dl-1"},
        message_id="replay-id",
        publish_time=NOW,
    )
    stamped = parse_envelope(replayed, now=NOW).stamped_attributes(replay=True)
    assert {k: stamped[k] for k in original} == original
    assert stamped[attr.REPLAY_ID] == "dl-1"
    for dropped in (attr.ERROR_REASON, attr.ERROR_DETAIL, attr.FIFO_FILLER):
        assert dropped not in stamped
    # A replayed copy without provenance (rejected at ingress before any was stamped) gets
    # this delivery's.
    bare = Message(b"x", {attr.REPLAY_ID: "dl-2"}, message_id="replay-id", publish_time=NOW)
    stamped = parse_envelope(bare, now=NOW).stamped_attributes(replay=True)
    assert stamped[attr.ORIGIN_MESSAGE_ID] == "replay-id"
    assert stamped[attr.ORIGIN_PUBLISH_TIME] == attr.format_time(NOW)


def test_forged_toolkit_attributes_do_not_change_the_fingerprint() -> None:
    plain = parse_envelope(Message(b"x", {"a": "1"}, message_id="1"), now=NOW)
    forged = parse_envelope(Message(b"x", {"a": "1", **FORGED}, message_id="2"), now=NOW)
    assert plain.fingerprint == forged.fingerprint
    assert attr.FIFO_FILLER in attr.TOOLKIT_STAMPED


# --- fifo_end: the end of a group ---------------------------------------------------------------


def test_fifo_end_true_with_a_group_marks_the_envelope_and_is_forwarded() -> None:
    envelope = parse(fifo_group="g", fifo_seq="3", fifo_end="true")
    assert envelope.fifo_end is True
    assert envelope.stamped_attributes()["fifo_end"] == "true"  # every hop keeps it
    assert parse(fifo_group="g", fifo_seq="3").fifo_end is False


def test_fifo_end_without_a_group_is_refused_with_its_own_reason() -> None:
    with pytest.raises(ContractViolation) as info:
        parse(fifo_end="true")
    assert info.value.reason == attr.REASON_END_WITHOUT_GROUP == "fifo_end_without_group"
    assert "fifo_group" in info.value.detail


@pytest.mark.parametrize("raw", ["false", "True", "TRUE", "1", "yes", "", " true", "true\n"])
def test_fifo_end_has_one_value(raw: str) -> None:
    with pytest.raises(ContractViolation) as info:
        parse(fifo_group="g", fifo_seq="1", fifo_end=raw)
    assert info.value.reason == attr.REASON_INVALID_FIFO_END == "invalid_fifo_end"
    with pytest.raises(ContractViolation):
        check_publishable(b"x", {"fifo_group": "g", "fifo_seq": "1", "fifo_end": raw})


def test_check_publishable_applies_the_end_rules_too() -> None:
    check_publishable(b"x", {"fifo_group": "g", "fifo_seq": "1", "fifo_end": "true"})
    with pytest.raises(ContractViolation) as info:
        check_publishable(b"x", {"fifo_end": "true"})
    assert info.value.reason == attr.REASON_END_WITHOUT_GROUP


def test_the_end_mark_is_part_of_the_fingerprint() -> None:
    # A producer's mark is content: the same key re-sent with a different end is a mismatch.
    marked = attr.content_fingerprint(b"x", {"fifo_group": "g", "fifo_end": "true"})
    assert marked != attr.content_fingerprint(b"x", {"fifo_group": "g"})
