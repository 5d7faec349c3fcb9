"""The task body: what ingress hands to Cloud Tasks and the relay reads back.

JSON, so an operator can read a task in the console::

    {"v": 1, "data": "<base64>", "attributes": {...}, "ordering_key": "g",
     "dedup_key": "k", "deliver_at": "2030-01-01T00:00:00.000000Z", "hop": 0}

``hop`` counts re-schedules: Cloud Tasks accepts schedule times at most 30 days ahead, so a
longer delay is parked in steps.

The relay publishes a body's attributes to the final topic as they are, so :meth:`from_json`
re-checks them against the attribute contract (:func:`pubsub_toolkit.envelope.check_publishable`)
rather than trusting whoever created the task: a body with 200 attributes, a ``goog`` name or a
non-canonical ``fifo_seq`` is ``malformed_task``, never a message on the final topic.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.envelope import check_publishable
from pubsub_toolkit.errors import ContractViolation, PermanentError
from pubsub_toolkit.message import OutboundMessage

VERSION = 1
REASON_MALFORMED_TASK = "malformed_task"
MAX_HOP = 999  # a body with a later hop is malformed (long delays need about 13)


@dataclass(frozen=True)
class DelayedMessage:
    """A message waiting for its due time."""

    message: OutboundMessage
    dedup_key: str
    deliver_at: datetime
    hop: int = 0

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "v": VERSION,
                "data": base64.b64encode(self.message.data).decode(),
                "attributes": dict(self.message.attributes),
                "ordering_key": self.message.ordering_key,
                "dedup_key": self.dedup_key,
                "deliver_at": attr.format_time(self.deliver_at),
                "hop": self.hop,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, body: bytes) -> DelayedMessage:
        """Parse a task body; PermanentError(``malformed_task``) names what is wrong."""
        try:
            doc = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise _malformed(f"body is not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise _malformed("body is not a JSON object")
        if doc.get("v") != VERSION:
            raise _malformed(f"unsupported version {doc.get('v')!r}")
        attributes = doc.get("attributes")
        if not isinstance(attributes, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()
        ):
            raise _malformed("attributes must be a map of strings")
        data = _base64(doc.get("data"))
        _check_attributes(data, attributes)
        dedup_key = _string(doc, "dedup_key")
        if attributes.get(attr.DEDUP_KEY, dedup_key) != dedup_key:
            # The relay claims the body's key, consumers deduplicate by the attribute: two keys
            # would let one task publish copies that consumers take for different messages.
            raise _malformed("dedup_key differs from the dedup_key attribute")
        ordering_key = _string(doc, "ordering_key", empty_ok=True)
        if len(ordering_key.encode()) > attr.MAX_FIFO_GROUP_BYTES:
            raise _malformed(f"ordering_key exceeds {attr.MAX_FIFO_GROUP_BYTES} bytes")
        return cls(
            message=OutboundMessage(data, attributes, ordering_key),
            dedup_key=dedup_key,
            deliver_at=_time(doc.get("deliver_at")),
            hop=_hop(doc.get("hop")),
        )


def _malformed(detail: str) -> PermanentError:
    return PermanentError(REASON_MALFORMED_TASK, detail)


def _string(doc: dict[str, Any], name: str, *, empty_ok: bool = False) -> str:
    value = doc.get(name, "" if empty_ok else None)
    if not isinstance(value, str) or (not value and not empty_ok):
        raise _malformed(f"{name} must be a non-empty string")
    return value


def _base64(value: object) -> bytes:
    if not isinstance(value, str):
        raise _malformed("data must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _malformed(f"data is not base64: {exc}") from exc


def _check_attributes(data: bytes, attributes: dict[str, str]) -> None:
    """Refuse attributes Pub/Sub would refuse or the contract forbids (see the module doc)."""
    try:
        check_publishable(data, attributes)
    except ContractViolation as exc:
        raise _malformed(f"attributes cannot be published ({exc.reason}): {exc.detail}") from exc


def _time(value: object) -> datetime:
    if not isinstance(value, str):
        raise _malformed("deliver_at must be an RFC 3339 string")
    try:
        # The strict form: ingress writes format_time's, so anything else was not written by it.
        return attr.parse_deliver_at(value)
    except ContractViolation as exc:
        raise _malformed(exc.detail) from exc


def _hop(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_HOP:
        raise _malformed(f"hop must be an integer from 0 to {MAX_HOP}")
    return value
