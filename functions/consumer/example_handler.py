"""An example handler for the consumer template: replace it with your own module.

A handler receives a :class:`pubsub_toolkit.message.Message` and returns anything (stored as the
dedup result) or raises. It runs at most once per dedup key, and for FIFO groups in order.
"""

from __future__ import annotations

import json

from pubsub_toolkit.message import Message


def handle(message: Message) -> str:
    """Log the message as one structured line."""
    print(
        json.dumps(
            {
                "severity": "INFO",
                "message": "handled",
                "dedup_key": message.attributes.get("dedup_key"),
                "fifo_group": message.attributes.get("fifo_group"),
                "fifo_seq": message.attributes.get("fifo_seq"),
                "bytes": len(message.data),
            }
        )
    )
    return "ok"
