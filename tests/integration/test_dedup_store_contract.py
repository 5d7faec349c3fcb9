"""One contract suite, run against every dedup backend on real servers.

memory runs in-process; redis against a real redis-server; firestore against the official
emulator. A controllable clock drives leases and expiry (the Firestore emulator never runs TTL).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import redis
from google.api_core import exceptions as gexc
from google.cloud.firestore_v1.batch import WriteBatch

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor, Outcome
from pubsub_toolkit.errors import StaleClaimError
from pubsub_toolkit.stores.dedup.base import ClaimStatus, RecordState
from tests.support.stores import BACKENDS, StoreFactory, store_factory

LEASE = timedelta(seconds=30)
TTL = timedelta(hours=1)


@pytest.fixture(params=BACKENDS)
def make_store(request: pytest.FixtureRequest) -> StoreFactory:
    return store_factory(request, request.param)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def test_first_claim_acquires_with_token_one(make_store: StoreFactory, clock: ManualClock) -> None:
    store = make_store(clock=clock)
    claim = store.claim("ns", "k1", "fp", lease=LEASE, ttl=TTL)
    assert claim.status is ClaimStatus.ACQUIRED
    assert claim.token == 1
    record = store.get("ns", "k1")
    assert record is not None
    assert record.state is RecordState.PENDING
    assert record.lease_until == clock.now() + LEASE
    assert record.expire_at >= clock.now() + TTL


def test_live_pending_claim_means_in_progress(make_store: StoreFactory, clock: ManualClock) -> None:
    store = make_store(clock=clock)
    store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    clock.advance(LEASE - timedelta(seconds=1))
    second = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    assert second.status is ClaimStatus.IN_PROGRESS


def test_done_returns_stored_result(make_store: StoreFactory, clock: ManualClock) -> None:
    store = make_store(clock=clock)
    claim = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    store.complete("ns", "k", claim, "result-42", ttl=TTL)
    again = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    assert again.status is ClaimStatus.DONE
    assert again.record is not None
    assert again.record.result == "result-42"
    assert again.record.state is RecordState.DONE


def test_same_key_different_fingerprint_is_mismatch(
    make_store: StoreFactory, clock: ManualClock
) -> None:
    store = make_store(clock=clock)
    claim = store.claim("ns", "k", "fp-a", lease=LEASE, ttl=TTL)
    store.complete("ns", "k", claim, None, ttl=TTL)
    assert store.claim("ns", "k", "fp-b", lease=LEASE, ttl=TTL).status is ClaimStatus.MISMATCH
    # A pending record mismatches too: the content, not the phase, is what differs.
    store.claim("ns", "k2", "fp-a", lease=LEASE, ttl=TTL)
    assert store.claim("ns", "k2", "fp-b", lease=LEASE, ttl=TTL).status is ClaimStatus.MISMATCH


def test_expired_lease_is_taken_over_and_stale_holder_is_fenced(
    make_store: StoreFactory, clock: ManualClock
) -> None:
    store = make_store(clock=clock)
    first = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    clock.advance(LEASE + timedelta(seconds=1))
    second = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    assert second.status is ClaimStatus.TAKEN_OVER
    assert second.token == first.token + 1
    with pytest.raises(StaleClaimError):
        store.complete("ns", "k", first, "stale", ttl=TTL)
    store.complete("ns", "k", second, "fresh", ttl=TTL)
    record = store.get("ns", "k")
    assert record is not None
    assert (record.state, record.result) == (RecordState.DONE, "fresh")


def test_completing_twice_with_the_same_claim_succeeds(
    make_store: StoreFactory, clock: ManualClock
) -> None:
    # A complete whose write applied but whose reply was lost is retried with the same claim
    # (IdempotentProcessor._complete): the retry must report success, not a stale claim.
    store = make_store(clock=clock)
    claim = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    store.complete("ns", "k", claim, "once", ttl=TTL)
    store.complete("ns", "k", claim, "once", ttl=TTL)
    record = store.get("ns", "k")
    assert record is not None
    assert (record.state, record.token, record.result) == (RecordState.DONE, claim.token, "once")
    # Releasing after the effect is recorded must never undo the done record.
    store.release("ns", "k", claim)
    assert store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.DONE


def test_completing_after_a_newer_holder_completed_is_refused(
    make_store: StoreFactory, clock: ManualClock
) -> None:
    store = make_store(clock=clock)
    first = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    clock.advance(LEASE + timedelta(seconds=1))
    second = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    store.complete("ns", "k", second, "fresh", ttl=TTL)
    # The record is done, but with the newer token: the old holder's complete is stale.
    with pytest.raises(StaleClaimError):
        store.complete("ns", "k", first, "stale", ttl=TTL)
    store.release("ns", "k", first)
    record = store.get("ns", "k")
    assert record is not None
    assert (record.state, record.token, record.result) == (RecordState.DONE, second.token, "fresh")


def _reply_lost_once(monkeypatch: pytest.MonkeyPatch, backend: str) -> Callable[[], None]:
    """Patch the backend's real client so that, once armed, its next round trip is applied by
    the server and then fails as a lost reply would. Returns the function that arms it."""
    owner: Any
    name, error = "execute", redis.ConnectionError("reply lost")
    owner = redis.client.Pipeline
    if backend == "firestore":
        owner, name, error = WriteBatch, "commit", gexc.ServiceUnavailable("reply lost")
    real = getattr(owner, name)
    armed = {"left": 0}

    def applied_then_lost(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = real(self, *args, **kwargs)
        if armed["left"]:
            armed["left"] -= 1
            raise error
        return result

    monkeypatch.setattr(owner, name, applied_then_lost)
    return lambda: armed.update(left=1)


@pytest.mark.parametrize("backend", ["redis", "firestore"])
def test_a_retried_complete_whose_first_attempt_applied_is_no_alert(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    # Defect 6: the "done" write applies, its reply is lost, IdempotentProcessor retries it.
    store = store_factory(request, backend)(clock=ManualClock())
    processor = IdempotentProcessor(store, namespace="ns", lease=LEASE, ttl=TTL)
    lose_next_reply = _reply_lost_once(monkeypatch, backend)
    runs: list[str] = []

    def effect() -> str:
        runs.append("ran")
        lose_next_reply()  # the next round trip is the complete
        return "result"

    outcome = processor.process("k", "fp", effect)
    assert (outcome.outcome, outcome.result, runs) == (Outcome.PROCESSED, "result", ["ran"])
    assert processor.log.metrics.get("fenced") == 0  # no "effect ran after our lease" alert
    again = processor.process("k", "fp", effect)
    assert (again.outcome, again.result, runs) == (Outcome.DUPLICATE, "result", ["ran"])


def test_release_lets_the_next_claim_take_over_at_once(
    make_store: StoreFactory, clock: ManualClock
) -> None:
    store = make_store(clock=clock)
    first = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    store.release("ns", "k", first)
    second = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    assert second.status is ClaimStatus.TAKEN_OVER
    assert second.token == first.token + 1
    # Releasing with the old token must not disturb the new holder.
    store.release("ns", "k", first)
    assert store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.IN_PROGRESS


def test_expired_record_reads_as_absent(make_store: StoreFactory, clock: ManualClock) -> None:
    store = make_store(clock=clock)
    claim = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    store.complete("ns", "k", claim, "r", ttl=TTL)
    clock.advance(TTL + timedelta(seconds=1))
    assert store.get("ns", "k") is None
    fresh = store.claim("ns", "k", "other-fp", lease=LEASE, ttl=TTL)
    assert fresh.status is ClaimStatus.ACQUIRED
    # Tokens keep growing across expiry, so a holder from before expiry stays fenced.
    assert fresh.token == claim.token + 1


def test_namespaces_are_independent(make_store: StoreFactory, clock: ManualClock) -> None:
    store = make_store(clock=clock)
    a = store.claim("consumer-a", "k", "fp", lease=LEASE, ttl=TTL)
    store.complete("consumer-a", "k", a, None, ttl=TTL)
    b = store.claim("consumer-b", "k", "fp", lease=LEASE, ttl=TTL)
    assert b.status is ClaimStatus.ACQUIRED


def test_unusual_keys_round_trip(make_store: StoreFactory, clock: ManualClock) -> None:
    store = make_store(clock=clock)
    for key in ("a/b/c", "ünïcødé 🔑", "x" * 900, "__name__", "with:colons:and spaces"):
        claim = store.claim("ns", key, "fp", lease=LEASE, ttl=TTL)
        assert claim.status is ClaimStatus.ACQUIRED, key
        store.complete("ns", key, claim, key, ttl=TTL)
        record = store.get("ns", key)
        assert record is not None and record.key == key and record.result == key
