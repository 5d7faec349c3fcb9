"""Hostile inputs shared by the property tests."""

from __future__ import annotations

from hypothesis import strategies as st

from pubsub_toolkit import attributes as attr

# Text that likes the places parsers trip: NUL, surrogate-free unicode, whitespace, huge runs.
hostile_text = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=40),
    st.sampled_from(["", " ", "\x00", "\x00abc", "\u202e", "\ufeff", "🦄" * 5, "Z", "-0", "NaN"]),
    st.builds(lambda c, n: c * n, st.sampled_from(["a", "é", "\x00", "9"]), st.integers(200, 1500)),
)

numberish = st.one_of(
    st.integers(-(10**30), 10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(
        [
            "1e309",
            "-1e309",
            "inf",
            "-inf",
            "nan",
            "0x10",
            "1_000",
            " 7 ",
            "٣",
            "1e-400",
            "+5",
            "-0.0",
            # Forms int()/float() accept but the contract does not (defects 8 and 10).
            "01",
            "00.5",
            " 5",
            "5\n",
            "\u0661",
            "\uff11",
            str(2**53),
            str(2**63),
            "9" * 40,
        ]
    ),
    hostile_text,
)

timeish = st.one_of(
    st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat()),
    st.datetimes().map(lambda d: d.isoformat()),  # naive: must be refused
    st.sampled_from(
        [
            "0001-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999Z",
            "2030-02-30T00:00:00Z",
            "2030-01-01T25:00:00Z",
            "2030-01-01T00:00:00+99:00",
            "2030-01-01",
            "now",
            "0001-01-01T00:00:00+14:00",
            "9999-12-31T23:59:59-14:00",
        ]
    ),
    hostile_text,
)

contract_values = {
    attr.DEDUP_KEY: hostile_text,
    # Only the toolkit may set these: a producer's must never reach the final topic as sent.
    attr.ORIGIN_MESSAGE_ID: hostile_text,
    attr.ORIGIN_PUBLISH_TIME: timeish,
    attr.ERROR_REASON: hostile_text,
    attr.ERROR_DETAIL: hostile_text,
    attr.FIFO_FILLER: hostile_text,
    attr.REPLAY_ID: hostile_text,  # never minted here: a forgery
    attr.DELIVER_AT: timeish,
    attr.DELAY_SECONDS: numberish,
    attr.FIFO_GROUP: hostile_text,
    attr.FIFO_SEQ: numberish,
}


@st.composite
def attribute_maps(draw: st.DrawFn) -> dict[str, str]:
    """Arbitrary producer attributes, often touching the contract's own names."""
    attrs = draw(st.dictionaries(hostile_text, hostile_text, max_size=8))
    for name, values in contract_values.items():
        if draw(st.booleans()):
            attrs[name] = draw(values)
    if draw(st.integers(0, 9)) == 0:  # sometimes far too many
        attrs.update({f"k{i}": "v" for i in range(draw(st.integers(90, 120)))})
    if draw(st.integers(0, 9)) == 0:
        attrs[draw(st.sampled_from(["googFoo", "goog", "topic", "data", "ordering_key"]))] = "x"
    return attrs


payloads = st.one_of(st.binary(max_size=64), st.just(b""), st.just(b"\x00" * 3))

# Every reason code the contract may give (error_reason values operators filter on).
CONTRACT_REASONS = frozenset(
    value for name, value in vars(attr).items() if name.startswith("REASON_")
)
