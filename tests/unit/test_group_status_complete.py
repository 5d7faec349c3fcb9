"""A group its producer ended reads "complete" in the operator's status, not "ok".

Found trying the CLI as a new user: after ``fifo_end`` the group's record stays (a tombstone
until ``DEDUP_TTL``) and ``status --group`` called it "ok", the word for a group that is still
expected to get more numbers - so an operator could not tell an ended group from a live one.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from pubsub_toolkit_cli.group_status import group_statuses, next_command, state_text


def message(seq: int, *, end: bool = False) -> Message:
    attributes = {"fifo_group": "g", "fifo_seq": str(seq), "dedup_key": f"k{seq}"}
    if end:
        attributes["fifo_end"] = "true"
    return Message(b"x", attributes, message_id=f"m{seq}")


def test_an_ended_group_reads_complete_and_needs_no_command() -> None:
    store = MemoryFifoStore()
    gate = FifoGate(store, consumer="c", handler=lambda _: None)
    gate.deliver(message(1), "g", 1)
    gate.deliver(message(2, end=True), "g", 2)
    gate.deliver(message(1), "h", 1)  # a group that goes on
    rows = {
        row.group: row
        for row in group_statuses(store, "c", now=datetime.now(UTC), named=("g", "h"))
    }
    assert state_text(rows["g"]) == "complete at 2"
    assert state_text(rows["h"]) == "ok"
    assert next_command(rows["g"], "c") is None
