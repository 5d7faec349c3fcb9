"""check_publishable, and the relay's task bodies re-checked against the contract with it.

The relay publishes a task body's attributes to the final topic as they are; a body ingress did
not write (or a bug in one it did) must be ``malformed_task``, never a message Pub/Sub refuses
or one that breaks the contract downstream (defect 10 of issue 11).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.delay.payload import REASON_MALFORMED_TASK, DelayedMessage
from pubsub_toolkit.envelope import check_publishable
from pubsub_toolkit.errors import ContractViolation, PermanentError
from pubsub_toolkit.message import OutboundMessage

DUE = datetime(2030, 1, 1, tzinfo=UTC)
STAMPED = {
    attr.DEDUP_KEY: "k",
    attr.CONTENT_SHA256: "0" * 64,
    attr.ORIGIN_MESSAGE_ID: "1",
    attr.ORIGIN_PUBLISH_TIME: "2029-12-31T00:00:00.000000Z",
    attr.DELIVER_AT: "2030-01-01T00:00:00.000000Z",
    attr.FIFO_GROUP: "g",
    attr.FIFO_SEQ: "7",
}

# (reason, changes to STAMPED; None removes the attribute)
BAD_ATTRIBUTES: list[tuple[str, dict[str, str | None]]] = [
    (attr.REASON_TOO_MANY_ATTRIBUTES, {f"a{i}": "v" for i in range(200)}),
    (attr.REASON_RESERVED_ATTRIBUTE, {"goog_x": "v"}),
    (attr.REASON_RESERVED_ATTRIBUTE, {"GOOGx": "v"}),
    (attr.REASON_RESERVED_ATTRIBUTE, {"ordering_key": "v"}),
    (attr.REASON_ATTRIBUTE_TOO_LARGE, {"k" * 257: "v"}),
    (attr.REASON_ATTRIBUTE_TOO_LARGE, {"big": "v" * 1025}),
    (attr.REASON_INVALID_FIFO_SEQ, {attr.FIFO_SEQ: "01"}),
    (attr.REASON_INVALID_FIFO_SEQ, {attr.FIFO_SEQ: "\u0661"}),
    (attr.REASON_INVALID_FIFO_SEQ, {attr.FIFO_SEQ: str(2**63)}),
    (attr.REASON_SEQ_WITHOUT_GROUP, {attr.FIFO_GROUP: None, attr.FIFO_SEQ: "1"}),
    (attr.REASON_INVALID_FIFO_GROUP, {attr.FIFO_GROUP: " "}),
    (attr.REASON_INVALID_DELIVER_AT, {attr.DELIVER_AT: " 2030-01-01T00:00:00Z"}),
    (attr.REASON_INVALID_DELIVER_AT, {attr.DELIVER_AT: "2030-01-01"}),
    (attr.REASON_INVALID_DELAY, {attr.DELAY_SECONDS: "1_0", attr.DELIVER_AT: None}),
    (attr.REASON_CONFLICTING_DELAY, {attr.DELAY_SECONDS: "1"}),
    (attr.REASON_INVALID_DEDUP_KEY, {attr.DEDUP_KEY: " "}),
]


def _with(changes: dict[str, str | None]) -> dict[str, str]:
    attributes: dict[str, str] = dict(STAMPED)
    for key, value in changes.items():
        if value is None:
            attributes.pop(key, None)
        else:
            attributes[key] = value
    return attributes


def test_what_ingress_stamps_is_publishable() -> None:
    check_publishable(b"x", STAMPED)
    check_publishable(b"", {attr.FIFO_FILLER: "why", **STAMPED})  # fillers carry no data
    check_publishable(b"x", {f"a{i}": "v" for i in range(attr.MAX_ATTRIBUTES)})


@pytest.mark.parametrize(("reason", "changes"), BAD_ATTRIBUTES)
def test_check_publishable_refuses_with_the_contracts_reason(
    reason: str, changes: dict[str, str | None]
) -> None:
    with pytest.raises(ContractViolation) as info:
        check_publishable(b"x", _with(changes))
    assert info.value.reason == reason
    assert info.value.detail


def test_a_message_with_neither_data_nor_attributes_is_not_publishable() -> None:
    with pytest.raises(ContractViolation) as info:
        check_publishable(b"", {})
    assert info.value.reason == attr.REASON_EMPTY_DATA


@pytest.mark.parametrize(("reason", "changes"), BAD_ATTRIBUTES)
def test_a_task_body_with_such_attributes_is_malformed(
    reason: str, changes: dict[str, str | None]
) -> None:
    attributes = _with(changes)
    key = attributes.get(attr.DEDUP_KEY, "k")
    body = DelayedMessage(OutboundMessage(b"x", attributes, "g"), key, DUE).to_json()
    with pytest.raises(PermanentError) as info:
        DelayedMessage.from_json(body)
    assert info.value.reason == REASON_MALFORMED_TASK
    assert reason in info.value.detail  # the contract's reason, named for the operator


def test_a_task_body_ingress_writes_round_trips() -> None:
    task = DelayedMessage(OutboundMessage(b"x", STAMPED, "g"), "k", DUE, hop=1)
    assert DelayedMessage.from_json(task.to_json()) == task


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("dedup_key", "other"),  # differs from the dedup_key attribute
        ("ordering_key", "g" * 1025),
        ("deliver_at", " 2030-01-01T00:00:00Z"),
        ("deliver_at", "2030-01-01 00:00:00Z"),
    ],
)
def test_task_body_fields_must_agree_with_the_contract(field: str, value: str) -> None:
    task = DelayedMessage(OutboundMessage(b"x", STAMPED, "g"), "k", DUE)
    doc = json.loads(task.to_json())
    doc[field] = value
    with pytest.raises(PermanentError) as info:
        DelayedMessage.from_json(json.dumps(doc).encode())
    assert info.value.reason == REASON_MALFORMED_TASK
