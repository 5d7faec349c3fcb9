"""What a store-loss repair (:mod:`.fifo_seen`) says: its ``store_rollback`` ALERT, and a
parked copy it can neither run nor keep, handed to the operator whole.

A copy parked at a number the store gave again (a store that lost writes) can never run; it was
acked when parked, so it is dead-lettered ``fifo_sequence_reused`` - and with no dead-letter
topic, its data and attributes go to the operator in a ``reissued_unkept`` ALERT instead (store-
loss docs: "publish it again as a new message, or drop it"). A copy parked past a group's end
(:mod:`.fifo_end`) goes the same way, as ``after_end_dropped``; so does one parked in a
sequence the store lost (its counter restarted with it), as ``restarted_unkept``.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable

from pubsub_toolkit.core.fifo_policy import (
    REASON_SEQUENCE_RESTARTED,
    REASON_SEQUENCE_REUSED,
    message_key,
)
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import GroupState


def hand_over(
    decide: Callable[..., None],
    group: str,
    seq: int,
    copy: Message,
    *,
    why: str = "was parked at a number the store gave again",
    outcome: str = "reissued_unkept",
    alert: str = "store_rollback",
    then: str = "publish it again as a new message (its number is taken), or drop it",
) -> None:
    """Log ``copy`` whole as an ALERT through the gate's ``decide``: a parked copy (acked when
    parked) that can neither run nor be kept, with no dead-letter topic - the operator gets
    its data and attributes, so nothing is lost silently."""
    decide(
        outcome,
        group,
        seq,
        f"ALERT: {group}#{seq} ({message_key(copy)}) {why} and there is no dead-letter topic "
        f"to keep it: this line carries its data and attributes - {then}",
        level=logging.ERROR,
        alert=alert,
        dedup_key=message_key(copy),
        data_base64=base64.b64encode(copy.data).decode(),
        attributes=dict(copy.attributes),
    )


def rollback_text(  # noqa: PLR0917 - the repair's findings, one call site
    seen: GroupState,
    state: GroupState,
    ended: bool,
    rewritten: int | None,
    restored: list[int],
    kept: int | None,
    lost: list[int],
    reissued: list[tuple[int, Message]],
    *,
    past_end: list[int] | None = None,
    orphaned: list[int] | None = None,
) -> str:
    """The ALERT of a repair: what went back, and what was restored, kept or lost."""
    last = max(seen.last_processed, state.last_processed)
    return (
        "ALERT: the store lost writes: "
        + (
            f"a new sequence (epoch {state.epoch}) began on a record that had lost the one "
            f"seen here (epoch {seen.epoch}, at {seen.last_processed}): that one's end and "
            "last keys carried over"
            if ended
            else f"last processed went back from {seen.last_processed} to "
            f"{state.last_processed}; restored to {last}"
            if state.last_processed < seen.last_processed
            else f"last processed {state.last_processed}, {last} seen here"
        )
        + (
            f"; #{rewritten} records another message than the one that ran there (the "
            "number was given again): both runs are kept"
            if rewritten is not None
            else ""
        )
        + (f"; parked again from this process's copies: {restored}" if restored else "")
        + (f"; the run under this process's lease {kept} goes on" if kept else "")
        + (
            f"; parked messages lost: {lost} (seek the subscription back to before they "
            "were published, or skip them)"
            if lost
            else ""
        )
        + (
            f"; numbers given again and parked since the loss, kept as "
            f"{REASON_SEQUENCE_REUSED}: {[(s, message_key(c)) for s, c in reissued]}"
            if reissued
            else ""
        )
        + (
            f"; parked past the end of the group seen here ({seen.end_seq}), settled as "
            f"after its end: {past_end}"
            if past_end
            else ""
        )
        + (
            f"; parked in the sequence lost (epoch {seen.epoch}), never to run, kept as "
            f"{REASON_SEQUENCE_RESTARTED}: {orphaned}"
            if orphaned
            else ""
        )
    )
