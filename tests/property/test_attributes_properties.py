"""The attribute contract on hostile input: valid, or a ContractViolation with a known reason.

Over arbitrary attribute maps (unicode, NUL, huge values, too many, reserved names, odd numbers
and times) and payloads, :func:`parse_envelope` either returns an Envelope whose parsed fields
are consistent, or raises ContractViolation with one of the module's ``REASON_*`` codes - never
any other exception - and the stamped attributes of a valid message parse again, with
ingress's own provenance and none of a producer's error or filler attributes.
"""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.envelope import parse_envelope
from pubsub_toolkit.errors import ContractViolation
from pubsub_toolkit.message import Message
from tests.property.strategies import CONTRACT_REASONS, attribute_maps, payloads, timeish

NOW = datetime(2030, 1, 1, tzinfo=UTC)


@given(data=payloads, attrs=attribute_maps(), message_id=st.text(max_size=10))
def test_parse_envelope_is_valid_or_a_known_contract_violation(
    data: bytes, attrs: dict[str, str], message_id: str
) -> None:
    message = Message(data, attrs, message_id=message_id)
    try:
        envelope = parse_envelope(message, now=NOW)
    except ContractViolation as exc:
        assert exc.reason in CONTRACT_REASONS, exc.reason
        assert exc.detail
        return
    assert envelope.dedup_key.strip()
    assert envelope.dedup_key == attrs.get(attr.DEDUP_KEY, message_id)
    assert envelope.fifo_seq is None or (envelope.fifo_seq >= 1 and envelope.fifo_group)
    assert envelope.deliver_at is None or envelope.deliver_at.tzinfo is not None
    assert len(envelope.fingerprint) == 64
    stamped = envelope.stamped_attributes()
    assert attr.DELAY_SECONDS not in stamped
    # What ingress forwards is itself valid: the next hop parses it to the same facts.
    again = parse_envelope(Message(data, stamped, message_id="next-hop"), now=NOW)
    assert (again.dedup_key, again.fifo_group, again.fifo_seq) == (
        envelope.dedup_key,
        envelope.fifo_group,
        envelope.fifo_seq,
    )
    # Later hops compare the fingerprint ingress stamped (due-time attributes are rewritten on
    # the way: delay_seconds becomes deliver_at), so it must travel unchanged.
    assert stamped[attr.CONTENT_SHA256] == envelope.fingerprint
    # Ingress owns provenance and the toolkit's markers: a producer's never pass as they came.
    for dropped in (attr.ERROR_REASON, attr.ERROR_DETAIL, attr.FIFO_FILLER):
        assert dropped not in stamped
    assert stamped.get(attr.ORIGIN_MESSAGE_ID) == (message_id or None)
    assert attr.ORIGIN_PUBLISH_TIME not in stamped  # these deliveries carry no publish time
    if envelope.deliver_at is not None:
        assert again.deliver_at is not None
        assert abs((again.deliver_at - envelope.deliver_at).total_seconds()) < 1e-6


@given(value=timeish)
def test_parse_time_raises_only_value_error(value: str) -> None:
    try:
        parsed = attr.parse_time(value)
    except (ValueError, OverflowError):
        return
    assert parsed.tzinfo is not None
    assert attr.parse_time(attr.format_time(parsed)) == parsed


@given(data=st.binary(max_size=32), attrs=st.dictionaries(st.text(), st.text(), max_size=6))
def test_fingerprint_is_stable_and_ignores_toolkit_stamps(
    data: bytes, attrs: dict[str, str]
) -> None:
    stamped = {**attrs, attr.DEDUP_KEY: "k", attr.FIFO_SEQ: "3", attr.ORIGIN_MESSAGE_ID: "9"}
    plain = {k: v for k, v in attrs.items() if k not in attr.TOOLKIT_STAMPED}
    assert attr.content_fingerprint(data, stamped) == attr.content_fingerprint(data, plain)
