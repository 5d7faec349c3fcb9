"""Table tests of :mod:`pubsub_toolkit.core.idempotency`: what the idempotent consumer (and the
transactional inbox) does with a claim's answer, decided once (issue 26)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pubsub_toolkit.core.idempotency import Verdict, done_at, on_claim, retried_here
from pubsub_toolkit.stores.dedup.base import ClaimStatus

NOW = datetime(2030, 1, 1, tzinfo=UTC)
TTL = timedelta(days=8)


@pytest.mark.parametrize(
    ("status", "remembered_at", "verdict"),
    [
        (ClaimStatus.DONE, None, Verdict.DUPLICATE),
        # the store's done record wins over what this process remembers
        (ClaimStatus.DONE, NOW, Verdict.DUPLICATE),
        (ClaimStatus.MISMATCH, None, Verdict.MISMATCH),
        # remembered under the same content only counts for a claim we own
        (ClaimStatus.MISMATCH, NOW, Verdict.MISMATCH),
        (ClaimStatus.IN_PROGRESS, None, Verdict.IN_PROGRESS),
        (ClaimStatus.IN_PROGRESS, NOW, Verdict.IN_PROGRESS),
        (ClaimStatus.TAKEN_OVER, None, Verdict.TAKE_OVER),
        (ClaimStatus.ACQUIRED, None, Verdict.RUN),
        # owned, and this process ran it: the store lost (or never got) the done record
        (ClaimStatus.ACQUIRED, NOW, Verdict.RECORD_AGAIN),
        (ClaimStatus.TAKEN_OVER, NOW - TTL + timedelta(seconds=1), Verdict.RECORD_AGAIN),
        # a memory as old as the TTL no longer counts: the store forgot it by design
        (ClaimStatus.ACQUIRED, NOW - TTL, Verdict.RUN),
        (ClaimStatus.TAKEN_OVER, NOW - TTL - timedelta(seconds=1), Verdict.TAKE_OVER),
    ],
)
def test_the_verdict_on_a_claim(
    status: ClaimStatus, remembered_at: datetime | None, verdict: Verdict
) -> None:
    assert on_claim(status, remembered_at=remembered_at, now=NOW, ttl=TTL) is verdict


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        (ClaimStatus.DONE, Verdict.DUPLICATE),
        (ClaimStatus.MISMATCH, Verdict.MISMATCH),
        (ClaimStatus.IN_PROGRESS, Verdict.IN_PROGRESS),
        (ClaimStatus.TAKEN_OVER, Verdict.TAKE_OVER),
        (ClaimStatus.ACQUIRED, Verdict.RUN),
    ],
)
def test_without_a_witness_the_status_alone_decides(status: ClaimStatus, verdict: Verdict) -> None:
    assert on_claim(status) is verdict
    assert verdict.runs is (status in (ClaimStatus.ACQUIRED, ClaimStatus.TAKEN_OVER))


def test_a_remembered_run_cannot_be_weighed_without_the_time_and_ttl() -> None:
    with pytest.raises(TypeError):
        on_claim(ClaimStatus.ACQUIRED, remembered_at=NOW)


@pytest.mark.parametrize(
    ("released", "token", "retry"),
    [(None, 2, False), (1, 2, True), (1, 3, False), (2, 2, False), (3, 2, False)],
)
def test_a_takeover_of_our_own_released_claim_is_a_retry(
    released: int | None, token: int, retry: bool
) -> None:
    assert retried_here(released, token) is retry


def test_a_done_record_was_written_a_ttl_before_it_expires() -> None:
    assert done_at(NOW + TTL, TTL) == NOW
