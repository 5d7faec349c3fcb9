"""Table tests of the claim loop's verdict on a write under a claim's token
(:func:`pubsub_toolkit.stores.dedup.claims.held_verdict`): what a complete or a release whose
compare-and-set missed makes of the record the key holds now (defects 6 and H2)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pubsub_toolkit.stores.dedup.base import Claim, ClaimStatus, DedupRecord, RecordState
from pubsub_toolkit.stores.dedup.claims import Held, held_verdict

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def record(state: RecordState, token: int) -> DedupRecord:
    lease = NOW + timedelta(seconds=30) if state is RecordState.PENDING else None
    return DedupRecord("ns", "k", state, token, "fp", lease, NOW + timedelta(hours=1))


HELD = Claim(ClaimStatus.ACQUIRED, 2, record(RecordState.PENDING, 2))
DONE, RELEASED = record(RecordState.DONE, 2), record(RecordState.PENDING, 2)


@pytest.mark.parametrize(
    ("current", "new", "verdict"),
    [
        (None, DONE, Held.LOST),  # gone (its TTL)
        # H2: another holder took the key over - a stale holder never completes it
        (record(RecordState.PENDING, 3), DONE, Held.LOST),
        (record(RecordState.DONE, 3), DONE, Held.LOST),
        # 6: done under our token - our own earlier complete, whose reply was lost
        (record(RecordState.DONE, 2), DONE, Held.ALREADY_DONE),
        (record(RecordState.DONE, 2), RELEASED, Held.LOST),  # a release of a done record
        (record(RecordState.PENDING, 2), DONE, Held.STILL_HELD),  # ours: write again
        (record(RecordState.PENDING, 2), RELEASED, Held.STILL_HELD),
    ],
    ids=[
        "gone",
        "taken-over",
        "done-by-another",
        "done-by-us",
        "release-of-done",
        "ours-complete",
        "ours-release",
    ],
)
def test_held_verdict(current: DedupRecord | None, new: DedupRecord, verdict: Held) -> None:
    assert held_verdict(current, HELD, new) is verdict
