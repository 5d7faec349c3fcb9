"""The task body contract between ingress (scheduler) and the relay."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from pubsub_toolkit.delay.payload import REASON_MALFORMED_TASK, DelayedMessage
from pubsub_toolkit.errors import PermanentError
from pubsub_toolkit.message import OutboundMessage

DUE = datetime(2030, 1, 1, 12, 0, 0, 250000, tzinfo=UTC)


def test_round_trip_keeps_everything() -> None:
    original = DelayedMessage(
        OutboundMessage(b"\x00\xffbinary", {"a": "1", "dedup_key": "k"}, ordering_key="g"),
        dedup_key="k",
        deliver_at=DUE,
        hop=2,
    )
    assert DelayedMessage.from_json(original.to_json()) == original


def _body(**changes: object) -> bytes:
    doc: dict[str, object] = {
        "v": 1,
        "data": "eA==",
        "attributes": {},
        "ordering_key": "",
        "dedup_key": "k",
        "deliver_at": "2030-01-01T00:00:00Z",
        "hop": 0,
    }
    doc.update(changes)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"\xff\xfe",
        b"[1, 2]",
        _body(v=2),
        _body(data="***"),
        _body(data=5),
        _body(attributes={"a": 1}),
        _body(attributes="x"),
        _body(dedup_key=""),
        _body(deliver_at="soon"),
        _body(deliver_at="2030-01-01T00:00:00"),
        _body(hop=-1),
        _body(hop=True),
        _body(ordering_key=7),
    ],
)
def test_malformed_bodies_are_permanent_errors(body: bytes) -> None:
    with pytest.raises(PermanentError) as info:
        DelayedMessage.from_json(body)
    assert info.value.reason == REASON_MALFORMED_TASK
