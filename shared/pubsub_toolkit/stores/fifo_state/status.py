"""Each FIFO group's numbers as its store holds them: handed out, processed, parked, stuck.

Read by the operator's tools (the CLI's ``group_status``, in the pubsub-toolkit-cli
distribution, words and renders them) and by :mod:`pubsub_toolkit.metrics` (its FIFO gauges),
so it sits below both.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

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
    complete: bool = False  # its producer ended it (fifo_end) and the gate is past the end

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
                complete=state.complete,
            )
        )
    return rows
