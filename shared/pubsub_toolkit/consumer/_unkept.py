"""A parked copy the gate can neither run nor keep: handed to the operator whole, in an ALERT.

A copy parked at a number the store gave again (a store that lost writes) can never run; it was
acked when parked, so it is dead-lettered ``fifo_sequence_reused`` - and with no dead-letter
topic, its data and attributes go to the operator in a ``reissued_unkept`` ALERT instead (store-
loss docs: "publish it again as a new message, or drop it").
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable

from pubsub_toolkit.consumer.gate_rules import message_key
from pubsub_toolkit.message import Message


def hand_over(decide: Callable[..., None], group: str, seq: int, copy: Message) -> None:
    """Log ``copy`` whole as a ``reissued_unkept`` ALERT through the gate's ``decide``."""
    decide(
        "reissued_unkept",
        group,
        seq,
        f"ALERT: {group}#{seq} ({message_key(copy)}) was parked at a number the store "
        "gave again and there is no dead-letter topic to keep it: this line carries its "
        "data and attributes - publish it again as a new message (its number is taken), "
        "or drop it",
        level=logging.ERROR,
        alert="store_rollback",
        dedup_key=message_key(copy),
        data_base64=base64.b64encode(copy.data).decode(),
        attributes=dict(copy.attributes),
    )
