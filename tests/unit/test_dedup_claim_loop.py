"""Table tests of the dedup claim loop's decisions (stores.dedup.claims), over a tiny dict store.

The loop is the one every backend runs; here it runs against two flavours of primitives: one
whose failed compare-and-set answers with what the key holds (Redis' script, memory) and one
that only says "lost" and cannot compare without a version (Firestore's update precondition).
Each row names the record the key holds, the call, and what the loop must decide - and the
primitives it may use to get there (round trips on a real store).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.errors import StaleClaimError, StoreUnavailableError
from pubsub_toolkit.stores.dedup import claims, rules
from pubsub_toolkit.stores.dedup.base import Claim, ClaimStatus, DedupRecord, RecordState
from pubsub_toolkit.stores.dedup.claims import CreateOrGet, Found, Get, Op, Replace, Reply, Stored

LEASE = timedelta(seconds=30)
TTL = timedelta(hours=1)
START = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class Primitives:
    """One key's record with a version per write. ``answers``: a lost compare-and-set replies
    with what the key holds (else None, and a version-less one is refused without a look)."""

    answers: bool = True
    record: DedupRecord | None = None
    version: int = 0
    trace: list[str] = field(default_factory=list)
    before_write: Callable[[Primitives], None] | None = None  # a rival's, before our next CAS
    _versions: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def put(self, record: DedupRecord | None) -> None:
        self.record, self.version = record, next(self._versions)

    def perform(self, op: Op) -> Reply:
        self.trace.append(type(op).__name__)
        if type(op) is Get:
            return Found(self.record, self.version)
        if type(op) is Replace and self.before_write is not None:
            rival, self.before_write = self.before_write, None
            rival(self)
        if type(op) is CreateOrGet:
            if self.record is not None:
                return Found(self.record, self.version)
            self.put(op.record)
            return Stored(self.version)
        assert type(op) is Replace
        if op.version is None and not self.answers:
            return None
        same = self.record is not None and (
            self.version == op.version if op.version is not None else self.record == op.expected
        )
        if not same:
            return Found(self.record, self.version) if self.answers else None
        self.put(op.record)
        return Stored(self.version)


def pending(token: int = 1, *, at: datetime = START, fingerprint: str = "fp") -> DedupRecord:
    return rules.pending_record("ns", "k", fingerprint, token, now=at, lease=LEASE, ttl=TTL)


def done(token: int = 1, result: str = "r") -> DedupRecord:
    return rules.done_record(pending(token), result, now=START, ttl=TTL)


def claim_on(store: Primitives, clock: ManualClock, fingerprint: str = "fp") -> Claim:
    protocol = claims.claim("ns", "k", fingerprint, clock=clock, lease=LEASE, ttl=TTL)
    return claims.run(protocol, store.perform)


def held(record: DedupRecord, version: object = None) -> Claim:
    return Claim(ClaimStatus.ACQUIRED, record.token, record, version=version)


BOTH = pytest.mark.parametrize("answers", [True, False], ids=["answers", "lost-only"])

# (name, record the key holds, seconds later, fingerprint, status, token, primitives used)
CLAIMS = [
    ("fresh key", None, 0, "fp", ClaimStatus.ACQUIRED, 1, ["CreateOrGet"]),
    ("live lease", pending(4), 5, "fp", ClaimStatus.IN_PROGRESS, 4, ["CreateOrGet"]),
    ("done", done(3), 5, "fp", ClaimStatus.DONE, 3, ["CreateOrGet"]),
    ("other content", pending(2), 5, "other", ClaimStatus.MISMATCH, 2, ["CreateOrGet"]),
    ("done, other content", done(2), 5, "other", ClaimStatus.MISMATCH, 2, ["CreateOrGet"]),
    ("lease expired", pending(4), 31, "fp", ClaimStatus.TAKEN_OVER, 5, ["CreateOrGet", "Replace"]),
    # An expired record is a free key, but its fencing token still grows.
    ("record expired", done(7), 3601, "fp", ClaimStatus.ACQUIRED, 8, ["CreateOrGet", "Replace"]),
    (
        "expired, other content",
        pending(2),
        3700,
        "other",
        ClaimStatus.ACQUIRED,
        3,
        ["CreateOrGet", "Replace"],
    ),
]


@BOTH
@pytest.mark.parametrize(
    ("holds", "later", "fingerprint", "status", "token", "used"),
    [row[1:] for row in CLAIMS],
    ids=[row[0] for row in CLAIMS],
)
def test_claim_decides_on_what_the_key_holds(
    answers: bool,
    holds: DedupRecord | None,
    later: int,
    fingerprint: str,
    status: ClaimStatus,
    token: int,
    used: list[str],
) -> None:
    store, clock = Primitives(answers), ManualClock(START + timedelta(seconds=later))
    store.put(holds)
    got = claim_on(store, clock, fingerprint)
    assert (got.status, got.token, store.trace) == (status, token, used)
    if got.owns_key:  # the claim wrote its record, and can complete without a read
        assert got.record == store.record and got.version == store.version
        assert got.record is not None and got.record.lease_until == clock.now() + LEASE
    else:
        assert got.record == holds and store.record == holds


@BOTH
def test_of_two_takeovers_of_one_expired_lease_the_second_sees_the_first(answers: bool) -> None:
    store, clock = Primitives(answers), ManualClock(START + LEASE + timedelta(seconds=1))
    store.put(pending(4))
    winner = pending(5, at=clock.now())
    store.before_write = lambda s: s.put(winner)
    got = claim_on(store, clock)
    assert (got.status, got.token) == (ClaimStatus.IN_PROGRESS, 5)
    used = ["CreateOrGet", "Replace"] if answers else ["CreateOrGet", "Replace", "Get"]
    assert store.trace == used  # the lost compare-and-set's reply carried the winner


@BOTH
def test_a_record_gone_before_the_takeover_is_claimed_afresh(answers: bool) -> None:
    store, clock = Primitives(answers), ManualClock(START + LEASE + timedelta(seconds=1))
    store.put(pending(4))
    store.before_write = lambda s: s.put(None)
    got = claim_on(store, clock)
    assert (got.status, got.token) == (ClaimStatus.ACQUIRED, 1)
    assert store.record == got.record


R, G = "Replace", "Get"
# (name, the key's record when complete runs, claim's version known, outcome, primitives used
# by a store whose lost compare-and-set answers with the record, and by one that only says lost)
COMPLETES: list[tuple[str, Callable[[], DedupRecord | None], bool, str, list[str], list[str]]] = [
    ("as claimed", lambda: pending(1), True, "done", [R], [R]),
    ("as claimed, no version", lambda: pending(1), False, "done", [R], [R, G, R]),
    ("already done by us", lambda: done(1, "first"), True, "ok", [R], [R, G]),
    (
        "released by us",
        lambda: rules.released_record(pending(1), now=START),
        True,
        "done",
        [R, R],
        [R, G, R],
    ),
    ("taken over", lambda: pending(2), True, "stale", [R], [R, G]),
    ("newer holder done", lambda: done(2), True, "stale", [R], [R, G]),
    ("gone", lambda: None, True, "stale", [R], [R, G]),
]


@BOTH
@pytest.mark.parametrize(
    ("holds", "versioned", "outcome", "answering", "lost_only"),
    [row[1:] for row in COMPLETES],
    ids=[row[0] for row in COMPLETES],
)
def test_complete_writes_only_under_its_own_token(
    answers: bool,
    holds: Callable[[], DedupRecord | None],
    versioned: bool,
    outcome: str,
    answering: list[str],
    lost_only: list[str],
) -> None:
    store, clock = Primitives(answers), ManualClock(START + timedelta(seconds=5))
    store.put(pending(1))
    mine = held(pending(1), store.version if versioned else None)
    current = holds()
    if current != store.record:
        store.put(current)
    protocol = claims.complete("ns", "k", mine, "result", clock=clock, ttl=TTL)
    if outcome == "stale":
        with pytest.raises(StaleClaimError, match="no longer held"):
            claims.run(protocol, store.perform)
        assert store.record == current  # untouched
    else:
        claims.run(protocol, store.perform)
        assert store.record is not None
        assert (store.record.state, store.record.token) == (RecordState.DONE, 1)
        if outcome == "done":
            assert store.record == rules.done_record(pending(1), "result", now=clock.now(), ttl=TTL)
        else:
            assert store.record == current  # our first attempt's record stays as it was
    # Nothing moved: one compare-and-set, no read (a store that cannot compare without a
    # version reads first). A read and a second try only when the key moved on under us.
    assert store.trace == (answering if answers else lost_only)


def test_complete_without_a_record_is_stale_and_touches_nothing() -> None:
    store = Primitives()
    protocol = claims.complete(
        "ns", "k", Claim(ClaimStatus.ACQUIRED, 1), "r", clock=ManualClock(START), ttl=TTL
    )
    with pytest.raises(StaleClaimError, match="carries no record"):
        claims.run(protocol, store.perform)
    assert store.trace == []


# (name, the key's record when release runs, the record after)
RELEASES: list[tuple[str, DedupRecord | None, DedupRecord | None]] = [
    ("held", pending(1), rules.released_record(pending(1), now=START + timedelta(seconds=5))),
    ("done by us", done(1), done(1)),
    ("taken over", pending(2), pending(2)),
    ("gone", None, None),
]


@BOTH
@pytest.mark.parametrize(
    ("holds", "after"), [row[1:] for row in RELEASES], ids=[row[0] for row in RELEASES]
)
def test_release_ends_only_its_own_pending_lease(
    answers: bool, holds: DedupRecord | None, after: DedupRecord | None
) -> None:
    store, clock = Primitives(answers), ManualClock(START + timedelta(seconds=5))
    store.put(holds)
    claims.run(claims.release("ns", "k", held(pending(1)), clock=clock), store.perform)
    assert store.record == after


@pytest.mark.parametrize(
    ("holds", "later", "expected"),
    [(None, 0, None), (done(1), 5, done(1)), (done(1), 3601, None), (pending(1), 5, pending(1))],
    ids=["absent", "live", "expired", "pending"],
)
def test_get_reads_an_expired_record_as_absent(
    holds: DedupRecord | None, later: int, expected: DedupRecord | None
) -> None:
    store = Primitives()
    store.put(holds)
    clock = ManualClock(START + timedelta(seconds=later))
    assert claims.run(claims.get(clock), store.perform) == expected


def test_a_storm_of_contenders_is_store_unavailable_not_a_spin() -> None:
    clock = ManualClock(START + LEASE + timedelta(seconds=1))

    def always_moved(op: Op) -> Reply:
        if type(op) is CreateOrGet:
            return Found(pending(4), 0)
        return Found(pending(4), 0)  # every compare-and-set loses to another takeover

    protocol = claims.claim("ns", "k", "fp", clock=clock, lease=LEASE, ttl=TTL)
    with pytest.raises(StoreUnavailableError):
        claims.run(protocol, always_moved)


def test_the_async_driver_performs_the_same_primitives_as_the_sync_one() -> None:
    def scenario(run: Callable[[Any, Primitives], Any]) -> list[str]:
        store, clock = Primitives(), ManualClock(START)
        first = run(claims.claim("ns", "k", "fp", clock=clock, lease=LEASE, ttl=TTL), store)
        clock.advance(LEASE + timedelta(seconds=1))
        second = run(claims.claim("ns", "k", "fp", clock=clock, lease=LEASE, ttl=TTL), store)
        with pytest.raises(StaleClaimError):
            run(claims.complete("ns", "k", first, "late", clock=clock, ttl=TTL), store)
        run(claims.complete("ns", "k", second, "ok", clock=clock, ttl=TTL), store)
        run(claims.complete("ns", "k", second, "ok", clock=clock, ttl=TTL), store)
        run(claims.release("ns", "k", second, clock=clock), store)
        assert run(claims.get(clock), store) == store.record
        return store.trace

    def sync(protocol: Any, store: Primitives) -> Any:
        return claims.run(protocol, store.perform)

    def on_loop(protocol: Any, store: Primitives) -> Any:
        async def perform(op: Op) -> Reply:
            await asyncio.sleep(0)  # a real suspension, as a network call would be
            return store.perform(op)

        return asyncio.run(claims.run_async(protocol, perform))

    assert scenario(sync) == scenario(on_loop)
