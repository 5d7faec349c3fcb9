"""The Redis dedup store's fast paths, against a real redis-server, counted on the wire.

Each test counts what the store's own client sends (a connection class that counts every
write to the socket and every command in it), so a fast path that silently falls back to a
slower one - a loser reading the record in a second round trip, a takeover through
WATCH/GET/MULTI, a pipeline per call - fails here, without any timing.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest
import redis

from pubsub_toolkit.stores.dedup.base import ClaimStatus
from pubsub_toolkit.stores.dedup.redis import RedisDedupStore

LEASE, TTL = timedelta(seconds=30), timedelta(hours=1)


class CountingConnection(redis.Connection):
    """Counts socket writes (one per round trip: a command or a packed batch) and commands."""

    lock: ClassVar[threading.Lock] = threading.Lock()
    round_trips: ClassVar[int] = 0
    commands: ClassVar[Counter[str]] = Counter()

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        with CountingConnection.lock:
            CountingConnection.round_trips += 1
        super().send_packed_command(command, check_health)

    def send_command(self, *args: Any, **kwargs: Any) -> None:
        self._count([args])
        super().send_command(*args, **kwargs)

    def pack_commands(self, commands: Any) -> Any:
        commands = list(commands)
        self._count(commands)
        return super().pack_commands(commands)

    @staticmethod
    def _count(commands: list[Any]) -> None:
        with CountingConnection.lock:
            for command in commands:
                name = command[0]
                CountingConnection.commands[
                    (name.decode() if isinstance(name, bytes) else str(name)).upper()
                ] += 1

    @classmethod
    def reset(cls) -> None:
        with cls.lock:
            cls.round_trips = 0
            cls.commands = Counter()


class SteppedClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.value = datetime(2030, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self.value


@pytest.fixture
def make_store(redis_url: str) -> Iterator[Any]:
    """``make(clock=None)``: a store on a counting client; every store of one test shares the
    key prefix (several workers of one deployment)."""
    prefix = f"test-fast-{uuid.uuid4().hex[:12]}:"
    clients: list[redis.Redis] = []

    def make(
        clock: Any = None, connection_class: type[redis.Connection] = CountingConnection
    ) -> Any:
        client = redis.Redis.from_url(redis_url, connection_class=connection_class)
        clients.append(client)
        kwargs = {} if clock is None else {"clock": clock}
        store = RedisDedupStore(client, prefix=prefix, **kwargs)
        # Open the store's connections and load its scripts: connection set-up is not the
        # protocol under test.
        warm = store.claim("warm-up", uuid.uuid4().hex, "fp", lease=LEASE, ttl=TTL)
        store.complete("warm-up", warm.record.key, warm, None, ttl=TTL)
        return store

    yield make
    for client in clients:
        client.close()


def counted() -> tuple[int, Counter[str]]:
    with CountingConnection.lock:
        return CountingConnection.round_trips, Counter(CountingConnection.commands)


def test_claim_and_complete_of_a_new_key_are_two_plain_round_trips(make_store: Any) -> None:
    store = make_store()
    CountingConnection.reset()
    claim = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    store.complete("ns", "k", claim, "ok", ttl=TTL)
    round_trips, commands = counted()
    assert claim.status is ClaimStatus.ACQUIRED
    assert (round_trips, commands) == (2, Counter({"SET": 1, "EVALSHA": 1}))


@pytest.mark.parametrize(
    ("second_fingerprint", "finish_first", "expected"),
    [
        ("fp", False, ClaimStatus.IN_PROGRESS),
        ("fp", True, ClaimStatus.DONE),
        ("other", False, ClaimStatus.MISMATCH),
    ],
)
def test_a_loser_learns_the_holders_record_in_one_round_trip(
    make_store: Any, second_fingerprint: str, finish_first: bool, expected: ClaimStatus
) -> None:
    first, second = make_store(), make_store()
    holder = first.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    if finish_first:
        first.complete("ns", "k", holder, "the result", ttl=TTL)
    CountingConnection.reset()
    loser = second.claim("ns", "k", second_fingerprint, lease=LEASE, ttl=TTL)
    round_trips, commands = counted()
    assert loser.status is expected
    assert loser.token == holder.token == 1
    assert loser.record is not None and loser.record.fingerprint == "fp"
    assert loser.record.result == ("the result" if finish_first else None)
    assert (round_trips, commands) == (1, Counter({"SET": 1}))


def test_an_expired_lease_is_taken_over_with_one_compare_and_set(make_store: Any) -> None:
    clock = SteppedClock()
    first, second = make_store(clock), make_store(clock)
    stale = first.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    clock.value += LEASE + timedelta(seconds=1)
    CountingConnection.reset()
    taken = second.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    round_trips, commands = counted()
    assert (taken.status, taken.token) == (ClaimStatus.TAKEN_OVER, 2)
    assert (round_trips, commands) == (2, Counter({"SET": 1, "EVALSHA": 1}))
    assert "WATCH" not in commands and "MULTI" not in commands
    with pytest.raises(Exception, match="no longer held"):
        first.complete("ns", "k", stale, "late", ttl=TTL)  # the fencing token still fences
    second.complete("ns", "k", taken, "ok", ttl=TTL)
    assert second.get("ns", "k").result == "ok"


def test_a_takeover_loses_to_a_contender_who_wrote_first(make_store: Any, redis_url: str) -> None:
    """Two workers read the same expired record; the one whose compare-and-set comes second
    gets the winner's record back (in_progress), never a second takeover."""
    clock = SteppedClock()
    first, second, third = make_store(clock), make_store(clock), make_store(clock)
    first.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    clock.value += LEASE + timedelta(seconds=1)
    rkey = third._key("ns", "k")
    reader = redis.Redis.from_url(redis_url)
    expired_raw = reader.get(rkey)  # what `third` read before `second` took the key over
    reader.close()
    winner = second.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    assert winner.status is ClaimStatus.TAKEN_OVER
    CountingConnection.reset()
    late = third._claim_existing(
        rkey, expired_raw, namespace="ns", key="k", fingerprint="fp", lease=LEASE, ttl=TTL
    )
    round_trips, _ = counted()
    assert (late.status, late.token) == (ClaimStatus.IN_PROGRESS, winner.token)
    assert round_trips == 1  # the compare-and-set's reply carried the winner's record


RACES = 10  # bounded: the races a loaded machine gets to show the coalescing once


def test_concurrent_claims_of_one_key_share_round_trips_and_one_wins(make_store: Any) -> None:
    """Each race: one winner, one SET per caller. Whether callers meet in one round trip
    depends on how the OS schedules the eight threads (on a loaded machine they can run one
    after another), so sharing is required in at least one of a bounded number of races."""
    store = make_store()
    shared_trips: list[int] = []
    for race in range(RACES):
        CountingConnection.reset()
        barrier = threading.Barrier(8)

        def claim(_: int, key: str = f"race-{race}", barrier: threading.Barrier = barrier) -> bool:
            barrier.wait()
            return bool(store.claim("ns", key, "fp", lease=LEASE, ttl=TTL).owns_key)

        with ThreadPoolExecutor(8) as pool:
            wins = list(pool.map(claim, range(8)))
        round_trips, commands = counted()
        assert sum(wins) == 1
        assert commands == Counter({"SET": 8})
        shared_trips.append(round_trips)
        if round_trips < 8:
            break
    assert min(shared_trips) < 8, f"same-key claims never shared a round trip: {shared_trips}"


def test_concurrent_callers_use_one_pooled_connection_and_give_it_back(make_store: Any) -> None:
    """One round trip at a time per store: however many threads call, the store uses one of
    the client's pooled connections, kept between back-to-back flushes and back in the pool
    as soon as nobody calls."""
    store = make_store()
    pool = store._client.connection_pool

    def cycle(i: int) -> None:
        key = f"pooled-{i}"
        claim = store.claim("ns", key, "fp", lease=LEASE, ttl=TTL)
        store.complete("ns", key, claim, "ok", ttl=TTL)

    with ThreadPoolExecutor(8) as threads:
        list(threads.map(cycle, range(2000)))
    assert not pool._in_use_connections, "the store kept a connection while idle"
    assert len(pool._available_connections) == 1
    assert store.get("ns", "pooled-1999").result == "ok"


class OldRedisConnection(CountingConnection):
    """A server before Redis 7.0: SET with both NX and GET is a syntax error."""

    def send_command(self, *args: Any, **kwargs: Any) -> None:
        words = {str(a).upper() for a in args if isinstance(a, str)}
        if args and str(args[0]).upper() == "SET" and {"NX", "GET"} <= words:
            args = (args[0], args[1], args[2], "NX", "XX")  # answered with "ERR syntax error"
        super().send_command(*args, **kwargs)


def test_before_redis_7_a_claim_is_still_one_round_trip(make_store: Any) -> None:
    first = make_store(connection_class=OldRedisConnection)
    first.claim("ns", "warm", "fp", lease=LEASE, ttl=TTL)  # learns that NX GET is refused
    CountingConnection.reset()
    holder = first.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    loser = first.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    round_trips, commands = counted()
    assert (holder.status, loser.status) == (ClaimStatus.ACQUIRED, ClaimStatus.IN_PROGRESS)
    assert (round_trips, commands) == (2, Counter({"EVALSHA": 2}))


def test_raw_calls_survive_a_dropped_connection_and_a_script_flush(
    make_store: Any, redis_url: str
) -> None:
    store = make_store()
    claim = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    admin = redis.Redis.from_url(redis_url)
    admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    admin.script_flush()
    store.complete("ns", "k", claim, "ok", ttl=TTL)  # reconnects, reloads the script
    assert store.get("ns", "k").result == "ok"
    assert store.claim("ns", "k2", "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.ACQUIRED
    admin.close()


def test_a_forked_child_opens_its_own_connection(make_store: Any) -> None:
    """A pre-forking server forks after the store was used: parent and child must not share
    the private connection's socket (their replies would cross)."""
    store = make_store()
    keys = [f"held-{i}" for i in range(200)]
    for key in keys:
        store.claim("ns", key, "fp", lease=LEASE, ttl=TTL)

    def every_reply_is_its_own(order: list[str]) -> bool:
        # Each claim finds the record held: its reply names its own key, never the other's.
        for key in order:
            record = store.claim("ns", key, "fp", lease=LEASE, ttl=TTL).record
            if record is None or record.key != key:
                return False
        return True

    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if every reply it read was its own
        ok = False
        try:
            ok = every_reply_is_its_own(keys)
        finally:
            os._exit(0 if ok else 1)
    assert every_reply_is_its_own(keys[::-1])
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
