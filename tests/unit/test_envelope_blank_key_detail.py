"""A blank ``dedup_key`` is dead-lettered with a detail that names what is wrong.

A producer that set ``dedup_key=""`` or ``"   "`` on a message that has a message id was told
"dedup_key is empty and no message_id": the second half was false, and sent them looking for a
missing id instead of their key.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pubsub_toolkit.attributes import REASON_INVALID_DEDUP_KEY
from pubsub_toolkit.envelope import parse_envelope
from pubsub_toolkit.errors import ContractViolation
from pubsub_toolkit.message import Message

NOW = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("key", ["", "   ", "\t"])
def test_a_producers_blank_key_is_named_blank_not_a_missing_message_id(key: str) -> None:
    with pytest.raises(ContractViolation) as caught:
        parse_envelope(Message(b"x", {"dedup_key": key}, message_id="42"), now=NOW)
    assert caught.value.reason == REASON_INVALID_DEDUP_KEY
    assert "message_id" not in caught.value.detail
    assert repr(key) in caught.value.detail


def test_no_key_and_no_message_id_says_so() -> None:
    with pytest.raises(ContractViolation) as caught:
        parse_envelope(Message(b"x", {}, message_id=""), now=NOW)
    assert caught.value.reason == REASON_INVALID_DEDUP_KEY
    assert "no message_id" in caught.value.detail
