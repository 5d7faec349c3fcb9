"""The Pub/Sub CloudEvent decoder on junk: a Message, or PermanentError(malformed_event).

Arbitrary JSON values, near-miss push bodies (wrong types, non-string attributes, bad base64,
odd publish times) and random bytes: :func:`message_from_event_data` never raises anything but
``PermanentError`` with reason ``malformed_event``; what it accepts round-trips its payload.
"""

from __future__ import annotations

import base64
import json

from hypothesis import example, given
from hypothesis import strategies as st

from pubsub_toolkit.attributes import REASON_MALFORMED_EVENT
from pubsub_toolkit.cloudevent import message_from_event_data
from pubsub_toolkit.errors import PermanentError
from tests.property.strategies import hostile_text, timeish

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | hostile_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(hostile_text, inner, max_size=4),
    max_leaves=12,
)

near_miss_messages = st.fixed_dictionaries(
    {},
    optional={
        "data": st.one_of(
            st.binary(max_size=32).map(lambda b: base64.b64encode(b).decode()),
            hostile_text,
            json_values,
        ),
        "attributes": st.one_of(
            st.dictionaries(hostile_text, hostile_text, max_size=4), json_values
        ),
        "messageId": st.one_of(hostile_text, json_values),
        "message_id": json_values,
        "publishTime": st.one_of(timeish, json_values),
        "orderingKey": json_values,
    },
)

events = st.one_of(
    json_values,
    st.builds(lambda m, s: {"message": m, "subscription": s}, near_miss_messages, json_values),
    st.builds(lambda m: {"message": m}, json_values),
)


def _decode(data: object) -> None:
    try:
        message = message_from_event_data(data)
    except PermanentError as exc:
        assert exc.reason == REASON_MALFORMED_EVENT
        return
    assert isinstance(message.data, bytes)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in message.attributes.items())
    assert isinstance(message.message_id, str)
    raw = data["message"]  # type: ignore[index]
    assert message.data == base64.b64decode(raw.get("data") or "")


@example({"message": {"data": "", "publishTime": "0001-01-01T00:00:00+14:00"}})  # found: year 0
@given(event=events)
def test_any_event_decodes_or_is_malformed(event: object) -> None:
    _decode(event)


@given(junk=st.binary(max_size=200))
def test_random_bytes_as_json_event(junk: bytes) -> None:
    # What functions-framework would hand over after parsing a junk push body as JSON.
    try:
        parsed = json.loads(junk)
    except ValueError:
        parsed = junk.decode("latin-1")
    _decode(parsed)
