"""What an operator needs to see per FIFO group: numbers handed out, processed, parked, stuck.

The numbers themselves are read from the store by
:func:`~pubsub_toolkit.stores.fifo_state.status.group_statuses` (also what the metrics read);
this module words them for the CLI and the status page.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from pubsub_toolkit.stores.fifo_state.status import GroupStatus, group_statuses
from pubsub_toolkit_cli._text_table import format_table

__all__ = ["GroupStatus", "group_statuses", "next_command", "render_table", "state_text"]


def state_text(row: GroupStatus) -> str:
    """One phrase for the group's condition (the CLI table and the status page share it)."""
    if row.blocked_at is not None:
        return f"BLOCKED at {row.blocked_at}"
    if row.parked:
        return f"waiting for {row.waiting_for}"
    if row.complete:  # ended by its producer: no number is expected any more
        return f"complete at {row.last_processed}"
    return "ok"


def next_command(row: GroupStatus, consumer: str) -> str | None:
    """The operator command that moves a stuck group on, exactly as the CLI takes it (None:
    nothing to do). A blocked group: ``fifo replay`` runs its parked head again (after fixing
    the cause; ``fifo skip GROUP SEQ`` gives it up instead). A group waiting on a gap: ``fifo
    skip`` passes over the missing number - only once it is known to be lost."""
    who = f"--consumer-id {shlex.quote(consumer)} "
    if row.blocked_at is not None:
        return f"pubsub-toolkit fifo replay {who}{shlex.quote(row.group)}"
    if row.parked:
        return f"pubsub-toolkit fifo skip {who}{shlex.quote(row.group)} {row.waiting_for}"
    return None


def render_table(rows: Sequence[GroupStatus]) -> str:
    """A plain-text table, one group a line."""
    header = ("group", "last issued", "last processed", "parked", "gap age", "state")
    lines = [header]
    for row in rows:
        state = state_text(row)
        lines.append(
            (
                row.group,
                "-" if row.last_issued is None else str(row.last_issued),
                str(row.last_processed),
                str(row.parked),
                "-" if row.oldest_gap_age_s is None else f"{row.oldest_gap_age_s:.0f}s",
                state,
            )
        )
    return "\n".join(format_table(lines))
