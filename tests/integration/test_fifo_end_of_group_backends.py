"""A complete group's tombstone on every FIFO store (memory, a real redis-server, the Firestore
emulator), and the gate ending a group on each.

The store contract: a state's ``end_seq`` and ``expire_at`` round-trip; a state with
``expire_at`` may be deleted at that time (Redis ``PEXPIREAT`` on the state and parked hashes,
Firestore's TTL policy on the document's ``expire_at`` field - the emulator does not run TTL
deletions, so there the field itself is checked - memory on its clock), and a state without one
never expires.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from google.cloud import firestore

from pubsub_toolkit.clock import SYSTEM_CLOCK
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core import fifo_rules as rules
from pubsub_toolkit.core.fifo_policy import REASON_AFTER_END, GateOutcome, GatePolicy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.fifo_state.base import FifoStore, GroupState
from pubsub_toolkit.stores.fifo_state.firestore import (
    DEFAULT_COLLECTION,
    EXPIRE_AT_FIELD,
    FirestoreFifoStore,
    document_id,
)
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from pubsub_toolkit.stores.fifo_state.redis import RedisFifoStore
from tests.support.sinks import RecordingSink

CONSUMER = "consumer-a"
DLQ = "projects/p/topics/dlq"
RETENTION = timedelta(days=8)


@dataclass
class Backend:
    """A store, and a raw view of where it keeps a group's record."""

    name: str
    store: FifoStore
    raw: Any = None  # the Redis client / the Firestore client
    prefix: str = ""

    def ttl_ms(self, group: str, kind: str = "s") -> int:
        """Redis's PTTL of the group's state (``s``) or parked (``p``) hash."""
        key = f"{self.prefix}{kind}:{len(CONSUMER)}:{CONSUMER}:{group}"
        return int(self.raw.pttl(key))

    def document(self, group: str) -> dict[str, Any]:
        ref = self.raw.collection(DEFAULT_COLLECTION).document(document_id(CONSUMER, group))
        snapshot = ref.get()
        assert snapshot.exists
        return dict(snapshot.to_dict())


@pytest.fixture(params=("memory", "redis", "firestore"))
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    suffix = uuid.uuid4().hex[:12]
    if request.param == "memory":
        yield Backend("memory", MemoryFifoStore())
    elif request.param == "redis":
        import redis

        url = request.getfixturevalue("redis_url")
        prefix = f"test-{suffix}:"
        client = redis.Redis.from_url(url)
        yield Backend("redis", RedisFifoStore.from_url(url, prefix=prefix), client, prefix)
        client.close()
    else:
        request.getfixturevalue("firestore_emulator")
        client = firestore.Client(project=f"test-{suffix}")
        yield Backend("firestore", FirestoreFifoStore(client), client)


def message(seq: int, *, end: bool = False) -> Message:
    attributes = {"fifo_group": "g", "fifo_seq": str(seq), "dedup_key": f"k{seq}"}
    if end:
        attributes["fifo_end"] = "true"
    return Message(f"g:{seq}".encode(), attributes, message_id=f"m{seq}")


def complete(end: int, expire_at: datetime, **fields: Any) -> GroupState:
    return replace(GroupState(last_processed=end, **fields), end_seq=end, expire_at=expire_at)


def now() -> datetime:
    # The stores expire on the wall clock (Redis's, Firestore's): so does this test.
    return SYSTEM_CLOCK.now()


# --- the store contract -----------------------------------------------------------------------


def test_the_end_and_its_expiry_round_trip(backend: Backend) -> None:
    store, fresh = backend.store, backend.store.load(CONSUMER, "g")
    at = now() + RETENTION
    assert store.save(CONSUMER, "g", complete(4, at), fresh)
    loaded = store.load(CONSUMER, "g")
    assert loaded.complete and loaded.end_seq == 4 and loaded.last_processed == 4
    assert abs(loaded.expire_at - at) < timedelta(milliseconds=1)  # type: ignore[operator]


def test_a_tombstone_is_given_its_expiry_and_an_open_state_none(backend: Backend) -> None:
    store, fresh = backend.store, backend.store.load(CONSUMER, "g")
    opened = store.save(CONSUMER, "g", GroupState(last_processed=1), fresh)
    assert opened is not None
    if backend.name == "redis":
        assert backend.ttl_ms("g") == -1  # persistent
    if backend.name == "firestore":
        assert backend.document("g")[EXPIRE_AT_FIELD] is None
    at = now() + RETENTION
    assert store.save(CONSUMER, "g", complete(1, at), opened)
    if backend.name == "redis":
        left = backend.ttl_ms("g")
        # Rounded up to the millisecond: never before its time.
        ceiling = RETENTION + timedelta(milliseconds=1)
        assert RETENTION - timedelta(minutes=1) < timedelta(milliseconds=left) <= ceiling
    if backend.name == "firestore":
        stored = backend.document("g")[EXPIRE_AT_FIELD]
        assert abs(stored - at) < timedelta(milliseconds=1)  # the field the TTL policy reads
    assert store.load(CONSUMER, "g").complete


# Not Firestore: the emulator runs no TTL deletions (its expire_at field is checked above).
@pytest.mark.parametrize("backend", ["memory", "redis"], indirect=True)
def test_a_tombstone_past_its_time_is_gone(backend: Backend) -> None:
    store, fresh = backend.store, backend.store.load(CONSUMER, "g")
    store.park(CONSUMER, "g", 3, message(3))  # a copy a crash left beside the record
    assert store.save(CONSUMER, "g", complete(2, now() - timedelta(seconds=1)), fresh)
    assert store.load(CONSUMER, "g") == GroupState()
    assert store.parked_message(CONSUMER, "g", 3) is None
    assert store.groups(CONSUMER) == []


def test_saving_an_open_state_over_a_tombstone_makes_it_persistent_again(
    backend: Backend,
) -> None:
    # Only a complete group's record may expire (a repair, say, rewrites the record).
    store, fresh = backend.store, backend.store.load(CONSUMER, "g")
    tombstone = store.save(CONSUMER, "g", complete(2, now() + RETENTION), fresh)
    assert tombstone is not None
    assert store.save(CONSUMER, "g", GroupState(last_processed=2), tombstone)
    if backend.name == "redis":
        assert backend.ttl_ms("g") == -1
    if backend.name == "firestore":
        assert backend.document("g")[EXPIRE_AT_FIELD] is None
    assert not store.load(CONSUMER, "g").complete


@pytest.mark.parametrize("backend", ["redis"], indirect=True)  # Redis's own layout
def test_redis_unlists_a_complete_group_with_nothing_parked_and_expires_its_parked_hash(
    backend: Backend,
) -> None:
    store, fresh = backend.store, backend.store.load(CONSUMER, "g")
    store.park(CONSUMER, "g", 3, message(3))
    listed = store.save(CONSUMER, "g", complete(2, now() + RETENTION, parked=(3,)), fresh)
    assert listed is not None
    assert store.groups(CONSUMER) == ["g"]  # still to be swept: #3 is parked
    assert backend.ttl_ms("g", "p") > 0  # the parked hash goes with the tombstone
    store.unpark(CONSUMER, "g", 3)
    assert store.save(CONSUMER, "g", complete(2, now() + RETENTION), listed)
    assert store.groups(CONSUMER) == []  # nothing to sweep; the record itself stays
    assert store.load(CONSUMER, "g").end_seq == 2


# --- the gate on each store ---------------------------------------------------------------------


def test_the_gate_ends_the_group_and_dead_letters_a_later_number(backend: Backend) -> None:
    sink, seen = RecordingSink(), []
    log = DecisionLog(CONSUMER)
    gate = FifoGate(
        backend.store,
        consumer=CONSUMER,
        handler=lambda m: seen.append(int(m.attributes["fifo_seq"])),
        dead_letters=DeadLetterer(sink, DLQ, log),
        policy=GatePolicy(completed_retention=RETENTION),
        log=log,
    )
    assert gate.deliver(message(4), "g", 4).outcome is GateOutcome.PARKED  # early, past the end
    assert gate.deliver(message(1), "g", 1).outcome is GateOutcome.PROCESSED
    assert gate.deliver(message(2, end=True), "g", 2).outcome is GateOutcome.PROCESSED
    assert gate.deliver(message(3), "g", 3).outcome is GateOutcome.DEAD_LETTERED
    assert gate.deliver(message(2, end=True), "g", 2).outcome is GateOutcome.DUPLICATE
    assert seen == [1, 2]
    reasons = sorted((m.attributes["fifo_seq"], m.attributes["error_reason"]) for m in sink.on(DLQ))
    assert reasons == [("3", REASON_AFTER_END), ("4", REASON_AFTER_END)]
    state = backend.store.load(CONSUMER, "g")
    assert state.complete and state.end_seq == 2 and state.parked == ()
    assert state.expire_at is not None and state.expire_at > now() + RETENTION / 2
    assert backend.store.parked_message(CONSUMER, "g", 4) is None
    if backend.name == "redis":
        assert backend.ttl_ms("g") > 0
    if backend.name == "firestore":
        assert backend.document("g")[EXPIRE_AT_FIELD] is not None
    assert rules.after_end(state, 5, message(5)) is rules.EndVerdict.REFUSED


@pytest.mark.parametrize("backend", ["firestore"], indirect=True)  # transactional mode
def test_a_transactional_gate_ends_the_group_too(backend: Backend) -> None:
    sink = RecordingSink()
    log = DecisionLog(CONSUMER)
    gate = FifoGate(
        backend.store,
        consumer=CONSUMER,
        handler=lambda _m: None,
        transactional_handler=lambda _m, _t: None,
        dead_letters=DeadLetterer(sink, DLQ, log),
        log=log,
    )
    assert gate.deliver(message(1, end=True), "g", 1).outcome is GateOutcome.PROCESSED
    assert backend.document("g")[EXPIRE_AT_FIELD] is not None
    assert gate.deliver(message(2), "g", 2).outcome is GateOutcome.DEAD_LETTERED
    assert [m.attributes["error_reason"] for m in sink.on(DLQ)] == [REASON_AFTER_END]


def test_an_idle_groups_record_expires_and_one_with_work_never_does(backend: Backend) -> None:
    gate = FifoGate(backend.store, consumer=CONSUMER, handler=lambda _m: None)
    gate.deliver(message(1), "g", 1)  # idle now: nothing parked, not blocked
    expire_at = backend.store.load(CONSUMER, "g").expire_at
    assert expire_at is not None
    assert RETENTION - timedelta(minutes=1) < expire_at - SYSTEM_CLOCK.now() <= RETENTION
    assert backend.store.groups(CONSUMER) == []  # nothing for the sweeper
    if backend.name == "redis":
        assert backend.ttl_ms("g") > (RETENTION - timedelta(minutes=1)).total_seconds() * 1000
    if backend.name == "firestore":
        assert backend.document("g")[EXPIRE_AT_FIELD] is not None
    gate.deliver(message(3), "g", 3)  # #2 missing: #3 parked, the group needs attention
    assert backend.store.load(CONSUMER, "g").expire_at is None
    assert backend.store.groups(CONSUMER) == ["g"]
    if backend.name == "redis":
        assert backend.ttl_ms("g") == -1
    if backend.name == "firestore":
        assert backend.document("g")[EXPIRE_AT_FIELD] is None
