"""What an operator needs to see per FIFO group: numbers handed out, processed, parked, stuck."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from pubsub_toolkit.operations._text_table import format_table
from pubsub_toolkit.stores.counters.base import SequenceCounter
from pubsub_toolkit.stores.fifo_state.base import FifoStore


@dataclass(frozen=True)
class GroupStatus:
    """One group's numbers, as of ``now``."""

    group: str
    last_issued: int | None  # highest number the sequencer handed out (None: no counter given)
    last_processed: int
    parked: int
    oldest_gap_age_s: float | None  # how long the head has been missing, if it is
    blocked_at: int | None
    skipped: tuple[tuple[int, int], ...]  # inclusive ranges of numbers passed over

    @property
    def waiting_for(self) -> int:
        return self.last_processed + 1


def group_statuses(
    store: FifoStore,
    consumer: str,
    *,
    now: datetime,
    counter: SequenceCounter | None = None,
    named: Iterable[str] = (),
    remembered: Iterable[str] = (),
) -> list[GroupStatus]:
    """The status of every group the store lists for ``consumer`` - those with parked or
    blocked work, which an operator may have to act on - and of the ``named`` ones. Idle
    groups are not listed (there may be millions; their records expire ``DEDUP_TTL`` after
    their last change): ``remembered`` ones (a status page's groups it showed before) are shown
    while they still have a record."""
    named = set(named)
    rows = []
    for group in sorted({*store.groups(consumer), *named, *remembered}):
        state = store.load(consumer, group)
        if state.version is None and group not in named:
            continue  # remembered, but its record is gone (expired): nothing to show
        gap = None if state.gap_since is None else (now - state.gap_since).total_seconds()
        rows.append(
            GroupStatus(
                group=group,
                last_issued=None if counter is None else counter.current(group),
                last_processed=state.last_processed,
                parked=len(state.parked),
                oldest_gap_age_s=gap,
                blocked_at=state.blocked_at,
                skipped=state.skipped,
            )
        )
    return rows


def state_text(row: GroupStatus) -> str:
    """One phrase for the group's condition (the CLI table and the status page share it)."""
    if row.blocked_at is not None:
        return f"BLOCKED at {row.blocked_at}"
    if row.parked:
        return f"waiting for {row.waiting_for}"
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
