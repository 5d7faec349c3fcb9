"""Dead-lettering with a reason: a clear error, and nothing lost.

The dead-letter copy keeps the original data and attributes and adds ``error_reason`` and
``error_detail``. When the original attributes are themselves the problem (too many, too large)
they could not be published as attributes again, so the copy *wraps* the whole original as JSON
(``dlq_wrapped=json``) - still nothing lost. It wraps, too, an original that carries a name the
copy would overwrite (``error_*``) or that only dead letters carry (``dlq_*``,
``CloudPubSubDeadLetter*``): the copy's own attributes are then the toolkit's alone, which is
what :mod:`.listing` relies on to trust a letter's description of itself.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Mapping

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.errors import PermanentError, TransientError
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.producer.sink import MessageSink

DLQ_WRAPPED = attr.DLQ_WRAPPED
# The wrapped copy's JSON: exactly these keys (the listing refuses any other shape).
WRAPPED_KEYS = frozenset({"data_base64", "attributes", "message_id", "ordering_key"})
DEAD_LETTERED = "dead_lettered"
_DETAIL_LIMIT = 1000  # bytes; below Pub/Sub's 1024-byte attribute value limit


class DeadLetterer:
    """Publishes bad messages to the dead-letter topic with a reason, and logs the decision."""

    def __init__(self, sink: MessageSink, topic: str, log: DecisionLog) -> None:
        self._sink = sink
        self.topic = topic
        self._log = log

    def send(self, message: Message, reason: str, detail: str, *, dedup_key: str | None) -> str:
        """Dead-letter ``message``; returns the dead-letter message id. Raises on failure."""
        outbound = dead_letter_copy(message, reason, detail)
        try:
            message_id = self._sink.publish(self.topic, outbound)
        except PermanentError as exc:
            # Even the dead-letter copy was refused (e.g. too large once wrapped). Acking now
            # would lose the message: fail transiently, so Pub/Sub keeps redelivering it until
            # the origin subscription's own dead-letter policy takes the original.
            self._log.decision(
                "dead_letter_failed",
                f"ALERT: dead-letter topic refused the message ({exc.detail})",
                dedup_key=dedup_key,
                level=logging.ERROR,
                reason=reason,
                alert="dead_letter_failed",
            )
            raise TransientError(f"dead-letter publish refused: {exc.detail}") from exc
        self._log.decision(
            DEAD_LETTERED,
            f"dead-lettered: {reason}",
            dedup_key=dedup_key,
            level=logging.WARNING,
            reason=reason,
            detail=detail,
            dead_letter_message_id=message_id,
        )  # DecisionLog counts it, by reason too
        return message_id


def dead_letter_copy(message: Message, reason: str, detail: str) -> OutboundMessage:
    """The dead-letter message for ``message``: original plus reason, wrapped if it must be."""
    detail = _truncate(detail, _DETAIL_LIMIT)
    extra = {
        attr.ERROR_REASON: reason,
        attr.ERROR_DETAIL: detail,
        attr.ORIGIN_MESSAGE_ID: message.attributes.get(attr.ORIGIN_MESSAGE_ID, message.message_id),
    }
    if _attributes_publishable(message.attributes, extra) and message.data:
        return OutboundMessage(message.data, {**message.attributes, **extra})
    wrapped = {
        "data_base64": base64.b64encode(message.data).decode(),
        "attributes": dict(message.attributes),
        "message_id": message.message_id,
        "ordering_key": message.ordering_key,
    }
    return OutboundMessage(json.dumps(wrapped).encode(), {**extra, DLQ_WRAPPED: "json"})


def _attributes_publishable(attributes: Mapping[str, str], extra: Mapping[str, str]) -> bool:
    """Whether the copy may carry the original's attributes as they are, plus ``extra``."""
    if len(attributes.keys() | extra.keys()) > attr.MAX_ATTRIBUTES:
        return False
    return all(
        k not in (attr.ERROR_REASON, attr.ERROR_DETAIL)  # the original's would be overwritten
        and not attr.is_dead_letter_attribute(k)
        and not attr.is_reserved_attribute(k)
        and len(k.encode()) <= attr.MAX_ATTRIBUTE_KEY_BYTES
        and len(v.encode()) <= attr.MAX_ATTRIBUTE_VALUE_BYTES
        for k, v in attributes.items()
    )


def _truncate(text: str, limit: int) -> str:
    encoded = text.encode()
    if len(encoded) <= limit:
        return text
    return encoded[: limit - 3].decode(errors="ignore") + "..."
