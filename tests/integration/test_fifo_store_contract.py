"""One contract suite for the FIFO gate stores, run against every backend on real servers.

memory runs in-process; redis against a real redis-server; firestore against the official
emulator. The gate relies on ``save`` being a strict compare-and-set on ``version``: the suite
checks that no stale or repeated version is ever accepted, including under concurrent writers.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud import firestore
from google.cloud.firestore_v1.document import DocumentReference

from pubsub_toolkit.errors import StoreUnavailableError
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.fifo_state.base import FifoStore, GroupState
from pubsub_toolkit.stores.fifo_state.firestore import FirestoreFifoStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from pubsub_toolkit.stores.fifo_state.redis import RedisFifoStore
from pubsub_toolkit_local.processes import free_port

BACKENDS = ("memory", "redis", "firestore")
CONSUMER = "consumer-a"


@dataclass(frozen=True)
class Backend:
    """``make()`` returns a new store object; all of one Backend's stores share their data."""

    name: str
    make: Callable[[], FifoStore]


def fifo_store_factory(request: pytest.FixtureRequest, backend: str) -> Backend:
    """An isolated backend: a unique Redis prefix or Firestore project per call.

    Each ``make()`` builds its own client (Redis connection pool, Firestore client), as separate
    consumer processes would; memory has one shared instance.
    """
    suffix = uuid.uuid4().hex[:12]
    if backend == "memory":
        shared = MemoryFifoStore()
        return Backend(backend, lambda: shared)
    if backend == "redis":
        url = request.getfixturevalue("redis_url")
        return Backend(backend, lambda: RedisFifoStore.from_url(url, prefix=f"test-{suffix}:"))
    if backend == "firestore":
        request.getfixturevalue("firestore_emulator")
        project = f"test-{suffix}"
        return Backend(backend, lambda: FirestoreFifoStore(firestore.Client(project=project)))
    raise ValueError(backend)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    return fifo_store_factory(request, request.param)


@pytest.fixture
def store(backend: Backend) -> FifoStore:
    return backend.make()


def message(seq: int, text: str = "payload") -> Message:
    return Message(
        data=f"{text}-{seq}".encode(),
        attributes={"fifo_group": "g", "fifo_seq": str(seq)},
        message_id=f"m-{seq}",
        ordering_key="g",
        publish_time=datetime(2030, 1, 1, 12, 0, 0, seq % 1_000_000, tzinfo=UTC),
    )


def test_unknown_group_loads_a_fresh_state(store: FifoStore) -> None:
    state = store.load(CONSUMER, "never-seen")
    assert state == GroupState()
    assert state.version is None
    assert store.groups(CONSUMER) == []


def test_first_save_creates_the_record_with_a_version(store: FifoStore) -> None:
    fresh = store.load(CONSUMER, "g")
    assert store.save(CONSUMER, "g", replace(fresh, last_processed=3), fresh)
    loaded = store.load(CONSUMER, "g")
    assert loaded.last_processed == 3
    assert loaded.version is not None


def test_create_when_the_record_exists_returns_false(backend: Backend) -> None:
    # Two consumer processes both read "no record yet"; only the first create may win.
    first, second = backend.make(), backend.make()
    seen_by_first, seen_by_second = first.load(CONSUMER, "g"), second.load(CONSUMER, "g")
    assert first.save(CONSUMER, "g", replace(seen_by_first, last_processed=1), seen_by_first)
    assert not second.save(CONSUMER, "g", replace(seen_by_second, last_processed=9), seen_by_second)
    assert second.load(CONSUMER, "g").last_processed == 1


def test_stale_expected_version_is_refused_and_changes_nothing(store: FifoStore) -> None:
    fresh = store.load(CONSUMER, "g")
    assert store.save(CONSUMER, "g", replace(fresh, last_processed=1), fresh)
    v1 = store.load(CONSUMER, "g")
    assert store.save(CONSUMER, "g", replace(v1, last_processed=2), v1)
    v2 = store.load(CONSUMER, "g")
    assert v2.version != v1.version
    assert not store.save(CONSUMER, "g", replace(v1, last_processed=99, attempts=7), v1)
    assert not store.save(CONSUMER, "g", replace(fresh, last_processed=98), fresh)
    after = store.load(CONSUMER, "g")
    assert after == v2
    assert after.version == v2.version


def test_save_returns_the_stored_state_with_the_version_a_next_save_can_compare_to(
    backend: Backend,
) -> None:
    # The gate compare-and-sets its advance against the state its lease save returned, without
    # reading the record again: that version must be exactly the stored one.
    store, rival = backend.make(), backend.make()
    fresh = store.load(CONSUMER, "g")
    v1 = store.save(CONSUMER, "g", replace(fresh, lease_token=1), fresh)
    assert v1 is not None
    assert v1.lease_token == 1
    assert v1.version == store.load(CONSUMER, "g").version
    v2 = store.save(CONSUMER, "g", replace(v1, last_processed=1), v1)
    assert v2 is not None
    assert v2.version != v1.version
    assert v2.version == store.load(CONSUMER, "g").version
    # Another writer in between: the returned version is stale, and the save is refused.
    assert rival.save(CONSUMER, "g", replace(v2, parked=(3,)), rival.load(CONSUMER, "g"))
    assert store.save(CONSUMER, "g", replace(v2, last_processed=2), v2) is None
    assert store.load(CONSUMER, "g").parked == (3,)


def test_every_save_changes_the_version_even_if_the_state_does_not(store: FifoStore) -> None:
    # Firestore keeps update_time on a write that changes nothing: without care, two writers of
    # the same content from one version would both win (two gates taking one lease).
    fresh = store.load(CONSUMER, "g")
    assert store.save(CONSUMER, "g", fresh, fresh)
    v1 = store.load(CONSUMER, "g")
    assert store.save(CONSUMER, "g", v1, v1)
    v2 = store.load(CONSUMER, "g")
    assert v2.version != v1.version
    assert not store.save(CONSUMER, "g", v1, v1)


def test_every_field_round_trips(store: FifoStore) -> None:
    full = GroupState(
        last_processed=41,
        parked=(43, 44, 50),
        gap_since=datetime(2030, 2, 3, 4, 5, 6, 123456, tzinfo=UTC),
        attempts=3,
        blocked_at=42,
        lease_token=17,
        # Not UTC: the instant must survive even if the zone is normalised.
        lease_until=datetime(2030, 2, 3, 6, 5, 7, 654321, tzinfo=timezone(timedelta(hours=2))),
        skipped=((7, 7), (12, 20), (40, 40)),
        next_attempt_at=datetime(2030, 2, 3, 4, 6, 0, tzinfo=UTC),
        keys=((41, "0123456789abcdef"), (43, "fedcba9876543210")),
    )
    fresh = store.load(CONSUMER, "g")
    assert store.save(CONSUMER, "g", full, fresh)
    loaded = store.load(CONSUMER, "g")
    assert loaded == full
    assert isinstance(loaded.parked, tuple) and isinstance(loaded.skipped, tuple)
    assert loaded.lease_until is not None and loaded.lease_until.utcoffset() is not None

    # And back to the empty values: None datetimes, empty tuples, no block.
    empty = GroupState(last_processed=50, lease_token=18)
    assert store.save(CONSUMER, "g", empty, loaded)
    again = store.load(CONSUMER, "g")
    assert again == empty
    assert (again.gap_since, again.lease_until, again.blocked_at) == (None, None, None)
    assert (again.parked, again.skipped) == ((), ())


def test_concurrent_read_modify_write_loses_no_increment(backend: Backend) -> None:
    threads = 8
    # One hot Firestore emulator document wins about 60 contended CAS a second: fewer rounds
    # there keep the test to a few seconds with the same contention.
    per_thread = 20 if backend.name == "firestore" else 50
    stores = [backend.make() for _ in range(threads)]
    start = threading.Barrier(threads)
    wins = itertools.count()  # count() is atomic in CPython: a cheap shared tally

    def increment(store: FifoStore) -> None:
        start.wait()
        for _ in range(per_thread):
            while True:  # the gate's pattern: re-read and retry on a lost compare-and-set
                current = store.load(CONSUMER, "hot")
                new = replace(current, last_processed=current.last_processed + 1)
                if store.save(CONSUMER, "hot", new, current):
                    next(wins)
                    break

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(increment, stores))
    # Each True was one increment; a CAS that let two writers win from one version would
    # leave the total short.
    assert next(wins) == threads * per_thread
    assert stores[0].load(CONSUMER, "hot").last_processed == threads * per_thread


def test_park_is_idempotent_and_round_trips(store: FifoStore) -> None:
    first = Message(
        data=bytes(range(256)),
        attributes={"fifo_group": "g", "fifo_seq": "5", "ünïcødé": "välue ✓"},
        message_id="m-5",
        ordering_key="g",
        publish_time=datetime(2030, 1, 1, 12, 0, 0, 999999, tzinfo=UTC),
    )
    store.park(CONSUMER, "g", 5, first)
    store.park(CONSUMER, "g", 5, message(5, "second copy"))  # a redelivery: keep the first
    loaded = store.parked_message(CONSUMER, "g", 5)
    assert loaded is not None
    assert loaded.data == first.data
    assert dict(loaded.attributes) == dict(first.attributes)
    assert (loaded.message_id, loaded.ordering_key) == ("m-5", "g")
    assert loaded.publish_time == first.publish_time

    no_time = Message(b"x", {}, message_id="", ordering_key="", publish_time=None)
    store.park(CONSUMER, "g", 6, no_time)
    assert store.parked_message(CONSUMER, "g", 6) == no_time


def test_unpark_deletes_only_that_seq(store: FifoStore) -> None:
    for seq in (3, 4, 12345678901):
        store.park(CONSUMER, "g", seq, message(seq))
    store.unpark(CONSUMER, "g", 4)
    store.unpark(CONSUMER, "g", 4)  # twice is fine
    store.unpark(CONSUMER, "g", 99)  # never parked is fine
    assert store.parked_message(CONSUMER, "g", 4) is None
    assert store.parked_message(CONSUMER, "g", 3) == message(3)
    assert store.parked_message(CONSUMER, "g", 12345678901) == message(12345678901)
    # Parked messages are per (consumer, group).
    assert store.parked_message(CONSUMER, "other", 3) is None
    assert store.parked_message("consumer-b", "g", 3) is None


def test_groups_lists_exactly_this_consumers_groups(store: FifoStore) -> None:
    def create(consumer: str, group: str) -> None:
        fresh = store.load(consumer, group)
        assert store.save(consumer, group, replace(fresh, last_processed=1), fresh)

    for group in ("orders", "payments", "a/b"):
        create(CONSUMER, group)
    create("consumer-b", "invoices")
    create(f"{CONSUMER}-2", "refunds")  # a consumer id that extends ours
    store.park(CONSUMER, "only-parked", 2, message(2))  # parking alone creates no state
    # Saving again must not list a group twice.
    current = store.load(CONSUMER, "orders")
    assert store.save(CONSUMER, "orders", replace(current, last_processed=2), current)

    assert store.groups(CONSUMER) == ["a/b", "orders", "payments"]
    assert store.groups("consumer-b") == ["invoices"]
    assert store.groups(f"{CONSUMER}-2") == ["refunds"]
    assert store.groups("nobody") == []


def test_the_listing_holds_groups_with_work_not_idle_dated_ones(store: FifoStore) -> None:
    """What the sweeper visits: a dated (expiring) record with nothing parked is not listed;
    parking or a block lists it again, and dating it again unlists it (Redis keeps a set,
    Firestore a queried field, memory a filter: one rule, base.listed)."""
    later = datetime.now(UTC) + timedelta(days=8)
    fresh = store.load(CONSUMER, "g")
    idle = store.save(CONSUMER, "g", replace(fresh, last_processed=1, expire_at=later), fresh)
    assert idle is not None
    assert store.groups(CONSUMER) == []
    waiting = store.save(CONSUMER, "g", replace(idle, parked=(3,), expire_at=None), idle)
    assert waiting is not None
    assert store.groups(CONSUMER) == ["g"]
    blocked = store.save(CONSUMER, "g", replace(waiting, parked=(2,), blocked_at=2), waiting)
    assert blocked is not None
    assert store.groups(CONSUMER) == ["g"]
    done = replace(blocked, last_processed=2, parked=(), blocked_at=None, expire_at=later)
    assert store.save(CONSUMER, "g", done, blocked) is not None
    assert store.groups(CONSUMER) == []


ODD_NAMES = [
    "tenant/42/orders",
    "../..",
    "a b",
    "ünïcødé-群组-🚀",
    "x" * 500,
    "x" * 499,  # a prefix of the previous one
    "__name__",  # reserved-looking Firestore id
    "with:colons:",
    "{braces}",
]


def test_odd_names_are_kept_apart(store: FifoStore) -> None:
    pairs = [(CONSUMER, name) for name in ODD_NAMES] + [(name, "g") for name in ODD_NAMES]
    # Colons must not let one (consumer, group) pair pose as another.
    pairs += [("a:b", "c"), ("a", "b:c"), ("a", "b"), ("a:", "b"), ("a", ":b")]
    for number, (consumer, group) in enumerate(pairs, start=1):
        fresh = store.load(consumer, group)
        assert fresh.version is None, (consumer, group)
        assert store.save(consumer, group, replace(fresh, last_processed=number), fresh)
        store.park(consumer, group, 1000, message(number))
    for number, (consumer, group) in enumerate(pairs, start=1):
        assert store.load(consumer, group).last_processed == number, (consumer, group)
        assert store.parked_message(consumer, group, 1000) == message(number), (consumer, group)
    assert store.groups(CONSUMER) == sorted(ODD_NAMES)
    assert store.groups("a:b") == ["c"]
    assert sorted(store.groups("a")) == [":b", "b", "b:c"]
    assert store.groups("x" * 500) == ["g"]


def test_redis_down_fails_closed() -> None:
    store = RedisFifoStore.from_url(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens
    expected = GroupState()
    calls: list[Callable[[], object]] = [
        lambda: store.load(CONSUMER, "g"),
        lambda: store.save(CONSUMER, "g", GroupState(last_processed=1), expected),
        lambda: store.park(CONSUMER, "g", 2, message(2)),
        lambda: store.parked_message(CONSUMER, "g", 2),
        lambda: store.unpark(CONSUMER, "g", 2),
        lambda: store.groups(CONSUMER),
    ]
    for call in calls:
        with pytest.raises(StoreUnavailableError):
            call()


@pytest.fixture
def firestore_backend(request: pytest.FixtureRequest) -> Backend:
    return fifo_store_factory(request, "firestore")


def update_applied_but_unanswered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The next ``DocumentReference.update`` is applied, then fails with ServiceUnavailable
    (a response lost in transit), so the caller's retry meets its own write."""
    real_update = DocumentReference.update
    failed = threading.Event()

    def flaky_update(self: DocumentReference, *args: Any, **kwargs: Any) -> Any:
        result = real_update(self, *args, **kwargs)
        if failed.is_set():
            return result
        failed.set()
        raise gexc.ServiceUnavailable("connection reset")

    monkeypatch.setattr(DocumentReference, "update", flaky_update)


def test_firestore_retried_save_that_had_applied_counts_as_won(
    firestore_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = firestore_backend.make()
    fresh = store.load(CONSUMER, "g")
    assert store.save(CONSUMER, "g", replace(fresh, last_processed=1), fresh)
    v1 = store.load(CONSUMER, "g")
    update_applied_but_unanswered(monkeypatch)
    # The retry finds its own first attempt applied (precondition now fails): still a win.
    assert store.save(CONSUMER, "g", replace(v1, last_processed=2, lease_token=5), v1)
    assert store.load(CONSUMER, "g").lease_token == 5


def test_firestore_retried_save_that_lost_to_another_writer_is_refused(
    firestore_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, rival = firestore_backend.make(), firestore_backend.make()
    fresh = store.load(CONSUMER, "g")
    assert store.save(CONSUMER, "g", replace(fresh, last_processed=1), fresh)
    v1 = store.load(CONSUMER, "g")
    real_update = DocumentReference.update
    calls = itertools.count()

    def rival_wins_then_update(self: DocumentReference, *args: Any, **kwargs: Any) -> Any:
        if next(calls) == 0:  # our first attempt: the rival commits, then our call fails
            monkeypatch.setattr(DocumentReference, "update", real_update)
            assert rival.save(CONSUMER, "g", replace(v1, last_processed=7), v1)
            monkeypatch.setattr(DocumentReference, "update", rival_wins_then_update)
            raise gexc.ServiceUnavailable("connection reset")
        return real_update(self, *args, **kwargs)

    monkeypatch.setattr(DocumentReference, "update", rival_wins_then_update)
    assert not store.save(CONSUMER, "g", replace(v1, last_processed=2), v1)
    assert store.load(CONSUMER, "g").last_processed == 7


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_a_version_from_before_a_data_loss_never_matches_a_later_write(
    request: pytest.FixtureRequest, kind: str
) -> None:
    # Redis restarted without persistence (or failed over to a replica behind) hands out
    # versions again from scratch: a writer holding the version of its last save must not match
    # another writer's state of the same "age" after the loss (ABA), or it would overwrite that
    # state unseen. The simulation found it (seeds 16289, 34591, 65468): a number ran twice.
    backend = fifo_store_factory(request, kind)
    store, rival = backend.make(), backend.make()
    fresh = store.load(CONSUMER, "g")
    ours = store.save(CONSUMER, "g", replace(fresh, lease_token=1), fresh)
    assert ours is not None
    if isinstance(store, MemoryFifoStore):
        store._states.clear()  # the in-process store's data, lost
    else:
        assert isinstance(store, RedisFifoStore)
        client = store._client
        for key in client.scan_iter(match=f"{store._prefix}*"):
            client.delete(key)
    lost = rival.load(CONSUMER, "g")
    assert lost.version is None  # the loss is complete: the record is gone
    theirs = rival.save(CONSUMER, "g", replace(lost, lease_token=7, parked=(2,)), lost)
    assert theirs is not None
    assert store.save(CONSUMER, "g", replace(ours, last_processed=1), ours) is None
    assert store.load(CONSUMER, "g").lease_token == 7
