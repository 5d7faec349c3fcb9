"""Decoding the Pub/Sub CloudEvent that Eventarc (or functions-framework, from a push) delivers."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from pubsub_toolkit.attributes import REASON_MALFORMED_EVENT, parse_time
from pubsub_toolkit.errors import PermanentError
from pubsub_toolkit.message import Message


def message_from_event_data(data: Any) -> Message:
    """Turn a CloudEvent's ``data`` (``{"message": {...}, "subscription": ...}``) into a Message.

    Accepts both the camelCase (``messageId``) and snake_case (``message_id``) spellings that
    Pub/Sub push bodies carry. Raises PermanentError(``malformed_event``) on any other shape.
    """
    if not isinstance(data, Mapping) or not isinstance(data.get("message"), Mapping):
        raise PermanentError(REASON_MALFORMED_EVENT, "event data has no 'message' object")
    raw = data["message"]
    attributes = raw.get("attributes") or {}
    if not isinstance(attributes, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in attributes.items()
    ):
        raise PermanentError(REASON_MALFORMED_EVENT, "message attributes are not a string map")
    try:
        payload = base64.b64decode(raw.get("data") or "", validate=True)
    except (binascii.Error, TypeError, ValueError) as exc:
        raise PermanentError(REASON_MALFORMED_EVENT, f"message data is not base64: {exc}") from exc
    published = raw.get("publishTime") or raw.get("publish_time")
    try:
        publish_time = parse_time(published) if isinstance(published, str) else None
    except ValueError:
        publish_time = None  # provenance only; a bad value must not lose the message
    return Message(
        data=payload,
        attributes=dict(attributes),
        message_id=str(raw.get("messageId") or raw.get("message_id") or ""),
        publish_time=publish_time,
        ordering_key=str(raw.get("orderingKey") or raw.get("ordering_key") or ""),
    )
