"""The dedup and FIFO store contract suites, run unchanged against the async stores
(``redis.asyncio`` on a real redis-server, Firestore's AsyncClient on the emulator, memory):
each test sees a blocking view of the async store, each call awaited on the test's loop.

Plus what only sharing one layout can show: a sync and an async worker see each other's
records, so a deployment can move consumers to asyncio one at a time.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.stores.dedup.base import ClaimStatus
from pubsub_toolkit.stores.dedup.firestore import FirestoreDedupStore
from pubsub_toolkit.stores.dedup.redis import RedisDedupStore
from pubsub_toolkit.stores.fifo_state.firestore import FirestoreFifoStore
from pubsub_toolkit.stores.fifo_state.redis import RedisFifoStore
from tests.integration.test_dedup_store_contract import (
    test_completing_after_a_newer_holder_completed_is_refused,
    test_completing_twice_with_the_same_claim_succeeds,
    test_done_returns_stored_result,
    test_expired_lease_is_taken_over_and_stale_holder_is_fenced,
    test_expired_record_reads_as_absent,
    test_first_claim_acquires_with_token_one,
    test_live_pending_claim_means_in_progress,
    test_namespaces_are_independent,
    test_release_lets_the_next_claim_take_over_at_once,
    test_same_key_different_fingerprint_is_mismatch,
    test_unusual_keys_round_trip,
)
from tests.integration.test_fifo_store_contract import (
    CONSUMER,
    Backend,
    test_create_when_the_record_exists_returns_false,
    test_every_field_round_trips,
    test_every_save_changes_the_version_even_if_the_state_does_not,
    test_first_save_creates_the_record_with_a_version,
    test_groups_lists_exactly_this_consumers_groups,
    test_odd_names_are_kept_apart,
    test_park_is_idempotent_and_round_trips,
    test_save_returns_the_stored_state_with_the_version_a_next_save_can_compare_to,
    test_stale_expected_version_is_refused_and_changes_nothing,
    test_unknown_group_loads_a_fresh_state,
    test_unpark_deletes_only_that_seq,
)
from tests.support.async_stores import (
    ASYNC_BACKENDS,
    Blocking,
    async_dedup_factory,
    async_fifo_factory,
    loop,
)

__all__ = [  # the imported suites run here against the async stores
    "loop",
    "test_completing_after_a_newer_holder_completed_is_refused",
    "test_completing_twice_with_the_same_claim_succeeds",
    "test_create_when_the_record_exists_returns_false",
    "test_done_returns_stored_result",
    "test_every_field_round_trips",
    "test_every_save_changes_the_version_even_if_the_state_does_not",
    "test_expired_lease_is_taken_over_and_stale_holder_is_fenced",
    "test_expired_record_reads_as_absent",
    "test_first_claim_acquires_with_token_one",
    "test_first_save_creates_the_record_with_a_version",
    "test_groups_lists_exactly_this_consumers_groups",
    "test_live_pending_claim_means_in_progress",
    "test_namespaces_are_independent",
    "test_odd_names_are_kept_apart",
    "test_park_is_idempotent_and_round_trips",
    "test_release_lets_the_next_claim_take_over_at_once",
    "test_same_key_different_fingerprint_is_mismatch",
    "test_save_returns_the_stored_state_with_the_version_a_next_save_can_compare_to",
    "test_stale_expected_version_is_refused_and_changes_nothing",
    "test_unknown_group_loads_a_fresh_state",
    "test_unpark_deletes_only_that_seq",
    "test_unusual_keys_round_trip",
]

LEASE = timedelta(seconds=30)
TTL = timedelta(hours=1)


@pytest.fixture(params=ASYNC_BACKENDS)
def make_store(request: pytest.FixtureRequest, loop: asyncio.AbstractEventLoop) -> Any:
    make = async_dedup_factory(request, request.param)
    return lambda **kwargs: Blocking(make(**kwargs), loop)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=ASYNC_BACKENDS)
def backend(request: pytest.FixtureRequest, loop: asyncio.AbstractEventLoop) -> Backend:
    make = async_fifo_factory(request, request.param)
    return Backend(request.param, lambda: Blocking(make(), loop))  # type: ignore[arg-type,return-value]


@pytest.fixture
def store(backend: Backend) -> Any:
    return backend.make()


@pytest.mark.parametrize("backend_name", ["redis", "firestore"])
def test_sync_and_async_workers_share_dedup_records(
    request: pytest.FixtureRequest, loop: asyncio.AbstractEventLoop, backend_name: str
) -> None:
    clock = ManualClock()
    async_store = Blocking(async_dedup_factory(request, f"async-{backend_name}")(clock=clock), loop)
    inner: Any = async_store._target
    if backend_name == "redis":
        sync: Any = RedisDedupStore.from_url(
            request.getfixturevalue("redis_url"), prefix=inner._prefix, clock=clock
        )
    else:
        from google.cloud import firestore

        sync = FirestoreDedupStore(firestore.Client(project=inner._client.project), clock=clock)
    claim = async_store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    assert sync.claim("ns", "k", "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.IN_PROGRESS
    async_store.complete("ns", "k", claim, "result", ttl=TTL)
    seen = sync.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    assert (seen.status, seen.record.result if seen.record else None) == (
        ClaimStatus.DONE,
        "result",
    )
    theirs = sync.claim("ns", "other", "fp", lease=LEASE, ttl=TTL)
    assert (
        async_store.claim("ns", "other", "x", lease=LEASE, ttl=TTL).status is ClaimStatus.MISMATCH
    )
    sync.complete("ns", "other", theirs, None, ttl=TTL)
    assert async_store.get("ns", "other").state.value == "done"


@pytest.mark.parametrize("backend_name", ["redis", "firestore"])
def test_sync_and_async_consumers_share_fifo_state(
    request: pytest.FixtureRequest, loop: asyncio.AbstractEventLoop, backend_name: str
) -> None:
    async_store = Blocking(async_fifo_factory(request, f"async-{backend_name}")(), loop)
    inner: Any = async_store._target
    if backend_name == "redis":
        sync: Any = RedisFifoStore.from_url(
            request.getfixturevalue("redis_url"), prefix=inner._prefix
        )
    else:
        from google.cloud import firestore

        sync = FirestoreFifoStore(firestore.Client(project=inner._client.project))
    fresh = async_store.load(CONSUMER, "g")
    written = async_store.save(CONSUMER, "g", replace(fresh, last_processed=4), fresh)
    assert sync.load(CONSUMER, "g").last_processed == 4
    assert sync.save(CONSUMER, "g", replace(written, last_processed=5), written)
    assert async_store.save(CONSUMER, "g", replace(written, last_processed=9), written) is None
    assert async_store.load(CONSUMER, "g").last_processed == 5
    assert sync.groups(CONSUMER) == async_store.groups(CONSUMER) == ["g"]
