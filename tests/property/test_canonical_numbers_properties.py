"""Canonical number forms (defects 8 and 10 of issue 11): one ASCII spelling, the rest refused.

For ``fifo_seq`` (``[1-9][0-9]*`` up to 2**53 - 1), ``delay_seconds``
(``(0|[1-9][0-9]*)(\\.[0-9]+)?`` up to ten years) and ``deliver_at`` (RFC 3339, ASCII digits,
no whitespace):

* every canonical value round-trips - parsed to the value it spells, by the parser and by
  :func:`parse_envelope`;
* every non-canonical variant of a canonical value - leading zero, sign, whitespace, underscore,
  Unicode digits, exponent, decimal point, out of range - is refused with the contract's reason
  (``int()`` and ``float()`` accept most of these, which is how they slipped through);
* over arbitrary text, the parser agrees with an oracle written independently of it;
* what the Publisher writes (``_format_delay``, ``str(seq)``, ``format_time``) is canonical.

The forms are restated here as regular expressions on purpose: the test pins the contract, not
whatever the module's private patterns happen to say.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

from hypothesis import assume, given
from hypothesis import strategies as st

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.envelope import parse_envelope
from pubsub_toolkit.errors import ContractViolation
from pubsub_toolkit.message import Message
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.producer.stamping import _format_delay
from pubsub_toolkit.stores.counters.base import SequenceBlock
from tests.support.sinks import RecordingSink

NOW = datetime(2030, 1, 1, tzinfo=UTC)
TOPIC = "projects/p/topics/origin"
SEQ_FORM = re.compile(r"[1-9][0-9]*", re.ASCII)
DELAY_FORM = re.compile(r"(0|[1-9][0-9]*)(\.[0-9]+)?", re.ASCII)

# The zero of several Unicode digit sets: chr(zero + d) has the numeric value d, so int() and
# float() read a number spelled in them exactly as its ASCII twin.
UNICODE_ZEROS = [
    0x0660,  # Arabic-Indic
    0x06F0,  # Extended Arabic-Indic
    0x0966,  # Devanagari
    0x09E6,  # Bengali
    0x0E50,  # Thai
    0xFF10,  # fullwidth
    0x1D7CE,  # mathematical bold
]
WHITESPACE = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\u00a0", "\u2003", "\u3000", "\ufeff"]

sequence_numbers = st.one_of(
    st.integers(1, attr.MAX_FIFO_SEQ),
    st.sampled_from([1, 9, 10, 99, 100, 2**31, 2**32, attr.MAX_FIFO_SEQ - 1, attr.MAX_FIFO_SEQ]),
)


def seq_reason(raw: str) -> str | None:
    """The reason parse_fifo_seq must give for ``raw`` (None: accepted)."""
    try:
        attr.parse_fifo_seq(raw)
    except ContractViolation as exc:
        assert exc.detail
        return exc.reason
    return None


def delay_reason(raw: str) -> str | None:
    try:
        attr.parse_delay_seconds(raw)
    except ContractViolation as exc:
        assert exc.detail
        return exc.reason
    return None


@st.composite
def unicode_digit_variants(draw: st.DrawFn, canonical: str) -> str:
    """``canonical`` with at least one of its ASCII digits spelled in another digit set."""
    positions = [i for i, c in enumerate(canonical) if c.isascii() and c.isdigit()]
    chosen = draw(st.sets(st.sampled_from(positions), min_size=1))
    zero = draw(st.sampled_from(UNICODE_ZEROS))
    return "".join(chr(zero + int(c)) if i in chosen else c for i, c in enumerate(canonical))


@st.composite
def padded(draw: st.DrawFn, canonical: str) -> str:
    """``canonical`` with whitespace before, after, or both."""
    before = draw(st.text(st.sampled_from(WHITESPACE), max_size=2))
    after = draw(st.text(st.sampled_from(WHITESPACE), max_size=2))
    assume(before or after)
    return before + canonical + after


@st.composite
def underscored(draw: st.DrawFn, canonical: str) -> str:
    """``canonical`` with an underscore between two digits (int("1_0") == 10)."""
    gaps = [
        i for i in range(1, len(canonical)) if canonical[i - 1].isdigit() and canonical[i].isdigit()
    ]
    assume(gaps)
    at = draw(st.sampled_from(gaps))
    return canonical[:at] + "_" + canonical[at:]


# --- fifo_seq ----------------------------------------------------------------------------


@given(n=sequence_numbers)
def test_every_canonical_fifo_seq_round_trips(n: int) -> None:
    raw = str(n)
    assert attr.parse_fifo_seq(raw) == n
    assert str(attr.parse_fifo_seq(raw)) == raw  # one spelling per number, both ways
    envelope = parse_envelope(
        Message(b"x", {attr.FIFO_GROUP: "g", attr.FIFO_SEQ: raw}, message_id="m"), now=NOW
    )
    assert envelope.fifo_seq == n
    assert envelope.stamped_attributes()[attr.FIFO_SEQ] == raw  # forwarded as it came


@given(data=st.data(), n=sequence_numbers)
def test_every_non_canonical_fifo_seq_variant_is_refused(data: st.DataObject, n: int) -> None:
    raw = str(n)
    variant = data.draw(
        st.one_of(
            st.integers(1, 5).map(lambda k: "0" * k + raw),  # leading zeros
            st.sampled_from(["+", "-"]).map(lambda sign: sign + raw),
            padded(raw),
            underscored(raw) if len(raw) > 1 else st.just(raw + "_"),
            unicode_digit_variants(raw),
            st.sampled_from(["e0", "E0", ".0", ".", "L", "n"]).map(lambda tail: raw + tail),
            st.just("0x" + format(n, "x")),
        ),
        label="variant",
    )
    assert seq_reason(variant) == attr.REASON_INVALID_FIFO_SEQ
    message = Message(b"x", {attr.FIFO_GROUP: "g", attr.FIFO_SEQ: variant}, message_id="m")
    try:
        parse_envelope(message, now=NOW)
    except ContractViolation as exc:
        assert exc.reason == attr.REASON_INVALID_FIFO_SEQ
    else:
        raise AssertionError(f"{variant!r} was accepted")


@given(
    n=st.one_of(
        st.integers(attr.MAX_FIFO_SEQ + 1, 2**64),
        st.integers(2**64, 10**40),
        st.sampled_from([2**53, 2**63 - 1, 2**63, 2**64, 10**39, 10**40 - 1]),
        st.integers(1, 1000).map(lambda k: 10 ** (k + 16)),  # very long digit strings
    )
)
def test_fifo_seq_beyond_2_pow_53_minus_1_is_refused(n: int) -> None:
    assert seq_reason(str(n)) == attr.REASON_INVALID_FIFO_SEQ


@given(raw=st.one_of(st.text(max_size=24), st.text(alphabet="0123456789+-_ .e\u0661", max_size=24)))
def test_fifo_seq_parser_agrees_with_an_independent_oracle(raw: str) -> None:
    # The oracle: ASCII digits only, no leading zero, value in range. No regex, no int() first.
    canonical = (
        raw != ""
        and all("0" <= c <= "9" for c in raw)
        and raw[0] != "0"
        and len(raw) <= 16
        and int(raw) <= attr.MAX_FIFO_SEQ
    )
    assert (seq_reason(raw) is None) == canonical
    if canonical:
        assert attr.parse_fifo_seq(raw) == int(raw)


# --- delay_seconds -----------------------------------------------------------------------

canonical_delays = st.one_of(
    st.integers(0, attr.MAX_DELAY_SECONDS).map(str),
    st.builds(
        lambda whole, fraction: f"{whole}.{fraction}",
        st.integers(0, attr.MAX_DELAY_SECONDS - 1),
        st.text(alphabet="0123456789", min_size=1, max_size=12),
    ),
    st.sampled_from(["0", "0.0", "0.5", "1", "1.5", "90", "3600", "86400.000001"]),
)


@given(raw=canonical_delays)
def test_every_canonical_delay_round_trips(raw: str) -> None:
    seconds = attr.parse_delay_seconds(raw)
    assert seconds == float(raw)
    assert 0 <= seconds <= attr.MAX_DELAY_SECONDS
    envelope = parse_envelope(Message(b"x", {attr.DELAY_SECONDS: raw}, message_id="m"), now=NOW)
    assert envelope.deliver_at == NOW + timedelta(seconds=seconds)
    stamped = envelope.stamped_attributes()
    assert attr.DELAY_SECONDS not in stamped
    assert attr.parse_deliver_at(stamped[attr.DELIVER_AT]) == envelope.deliver_at


@given(data=st.data(), raw=canonical_delays)
def test_every_non_canonical_delay_variant_is_refused(data: st.DataObject, raw: str) -> None:
    variant = data.draw(
        st.one_of(
            st.integers(1, 3).map(lambda k: "0" * k + raw),  # "05", "00.5"
            st.sampled_from(["+", "-"]).map(lambda sign: sign + raw),
            padded(raw),
            underscored(raw) if len(raw.replace(".", "")) > 1 else st.just("_" + raw),
            unicode_digit_variants(raw),
            st.sampled_from(["e0", "E0", "e-1", "j", "."]).map(lambda tail: raw + tail),
            st.just("." + raw.rsplit(".", maxsplit=1)[-1]),  # no integer part
        ),
        label="variant",
    )
    assume(variant != raw and not DELAY_FORM.fullmatch(variant))  # "0"+"0.5"... stays refused
    assert delay_reason(variant) == attr.REASON_INVALID_DELAY
    try:
        parse_envelope(Message(b"x", {attr.DELAY_SECONDS: variant}, message_id="m"), now=NOW)
    except ContractViolation as exc:
        assert exc.reason == attr.REASON_INVALID_DELAY
    else:
        raise AssertionError(f"{variant!r} was accepted")


@given(
    raw=st.one_of(
        st.integers(attr.MAX_DELAY_SECONDS + 1, 10**400).map(str),
        st.text(alphabet="0123456789", min_size=1, max_size=6).map(
            lambda fraction: f"{attr.MAX_DELAY_SECONDS}.{fraction}"
        ),
        st.sampled_from(["inf", "Infinity", "nan", "NaN", "1e3", "1E+3", "1e-3", "0x10", ""]),
    )
)
def test_out_of_range_and_float_only_spellings_are_refused(raw: str) -> None:
    assume(
        not (raw.startswith(f"{attr.MAX_DELAY_SECONDS}.") and float(raw) == attr.MAX_DELAY_SECONDS)
    )
    assert delay_reason(raw) == attr.REASON_INVALID_DELAY


@given(
    raw=st.one_of(st.text(max_size=24), st.text(alphabet="0123456789+-_ .eE\u0661", max_size=24))
)
def test_delay_parser_agrees_with_an_independent_oracle(raw: str) -> None:
    whole, dot, fraction = raw.partition(".")

    def ascii_digits(text: str) -> bool:
        return text != "" and all("0" <= c <= "9" for c in text)

    canonical = (
        ascii_digits(whole)
        and (whole == "0" or whole[0] != "0")
        and (not dot or ascii_digits(fraction))
        and float(raw) <= attr.MAX_DELAY_SECONDS
    )
    assert (delay_reason(raw) is None) == canonical


# --- deliver_at --------------------------------------------------------------------------

# Fixed offsets, not zone names: a zone's DST gap holds wall times that never existed, and such
# a datetime compares unequal to every other (PEP 495) - no fault of the contract's.
offsets = st.integers(-(24 * 60 - 1), 24 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))
aware_times = st.datetimes(
    min_value=datetime(1, 1, 2),  # noqa: DTZ001 - hypothesis bounds are naive
    max_value=datetime(9999, 12, 30),  # noqa: DTZ001
    timezones=st.one_of(st.just(UTC), offsets),
)


@given(when=aware_times)
def test_formatted_times_are_canonical_deliver_at_values(when: datetime) -> None:
    raw = attr.format_time(when)
    assert attr.parse_deliver_at(raw) == when
    envelope = parse_envelope(Message(b"x", {attr.DELIVER_AT: raw}, message_id="m"), now=NOW)
    assert envelope.deliver_at == when


@given(data=st.data(), when=aware_times)
def test_deliver_at_with_whitespace_or_unicode_digits_is_refused(
    data: st.DataObject, when: datetime
) -> None:
    raw = attr.format_time(when)
    variant = data.draw(st.one_of(padded(raw), unicode_digit_variants(raw)), label="variant")
    try:
        attr.parse_deliver_at(variant)
    except ContractViolation as exc:
        assert exc.reason == attr.REASON_INVALID_DELIVER_AT
    else:
        raise AssertionError(f"{variant!r} was accepted")


# --- what the Publisher writes -----------------------------------------------------------


class FixedCounter:
    """Hands out ``first`` (and the numbers after it) whatever the group: any number at all."""

    def __init__(self, first: int) -> None:
        self.first = first

    def reserve(self, group: str, count: int = 1) -> SequenceBlock:
        return SequenceBlock(group, self.first, self.first + count - 1)

    def current(self, group: str) -> int:
        return self.first - 1


@given(delay=st.timedeltas(min_value=timedelta(0)))
def test_publisher_delay_formatting_is_always_canonical(delay: timedelta) -> None:
    raw = _format_delay(delay)
    assert DELAY_FORM.fullmatch(raw), raw  # even far beyond the bound: the form holds
    if delay <= timedelta(seconds=attr.MAX_DELAY_SECONDS):
        assert abs(attr.parse_delay_seconds(raw) - delay.total_seconds()) <= 1e-6


@given(delay=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=3650)))
def test_a_delay_the_publisher_publishes_parses_to_its_due_time(delay: timedelta) -> None:
    sink = RecordingSink()
    Publisher(sink, TOPIC).publish(b"x", {"a": "1"}, delay=delay)
    [out] = sink.on(TOPIC)
    raw = out.attributes[attr.DELAY_SECONDS]
    assert DELAY_FORM.fullmatch(raw)
    envelope = parse_envelope(Message(out.data, out.attributes, message_id="m"), now=NOW)
    assert envelope.deliver_at is not None
    assert abs((envelope.deliver_at - (NOW + delay)).total_seconds()) <= 1e-6


@given(first=sequence_numbers, count=st.integers(1, 3))
def test_numbers_the_publisher_stamps_are_canonical(first: int, count: int) -> None:
    assume(first + count - 1 <= attr.MAX_FIFO_SEQ)
    sink = RecordingSink()
    publisher = Publisher(sink, TOPIC, counter=FixedCounter(first))
    publisher.publish_batch("g", [(b"x", {})] * count)
    numbers = [out.attributes[attr.FIFO_SEQ] for out in sink.on(TOPIC)]
    assert all(SEQ_FORM.fullmatch(raw) for raw in numbers), numbers
    assert [attr.parse_fifo_seq(raw) for raw in numbers] == list(range(first, first + count))
    for out in sink.on(TOPIC):
        parse_envelope(Message(out.data, out.attributes, message_id="m"), now=NOW)
