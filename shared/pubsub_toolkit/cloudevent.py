"""Decoding a Pub/Sub push delivery into a Message, however it is framed.

The deployed functions are HTTP functions behind a push subscription we own (its dead-letter
and retry policies are ours; see the README's Deploying section). Their request body is the
raw push JSON ``{"message": {...}, "subscription": ...}``. The same decoder also reads the
CloudEvents Eventarc sends for a Pub/Sub trigger: in binary mode the body is that same JSON
(the ``ce-*`` headers carry the rest), in structured mode it sits under ``data``.

We decode the body ourselves rather than let functions-framework convert a raw push into a
CloudEvent: its conversion drops ``orderingKey`` and refuses (HTTP 400, redelivered until the
dead-letter policy) a message without ``data``.
"""

from __future__ import annotations

import base64
import binascii
import json
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


def message_from_push_body(body: bytes) -> Message:
    """The Message of one push request's body: a raw push, or a structured CloudEvent.

    Raises PermanentError(``malformed_event``) when the body is not JSON or holds no Pub/Sub
    message; the caller dead-letters the body as it came.
    """
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise PermanentError(REASON_MALFORMED_EVENT, f"request body is not JSON: {exc}") from exc
    if isinstance(document, Mapping) and "specversion" in document:
        document = document.get("data")  # a structured-mode CloudEvent wraps the push body
    return message_from_event_data(document)
