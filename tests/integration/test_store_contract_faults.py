"""The store code the simulation replaces by memory stores, under the faults the simulation
models, against the real thing: memory, Redis standalone, Redis Cluster and the Firestore
emulator, each through its sync and its asyncio store (see :mod:`tests.support.store_targets`).

* **Restart empty** - the data set wiped (FLUSHALL and SCRIPT FLUSH; the emulator's delete-all):
  a store never claims done a key it no longer knows, and an old FIFO version never matches
  again (no ABA). That the code above notices such a loss through its witness (ALERT, not run
  twice) is the core's table (tests/unit/test_core_idempotent_run.py,
  tests/unit/test_fifo_gate.py) and, on a real redis-server, test_fifo_store_loss_redis.py.
* **Error replies** (Redis) - READONLY (a failover) and OOM (maxmemory, noeviction) are "store
  unavailable", and the call that failed changed nothing: it succeeds once the server heals.
* **A timeout after commit** - the write landed, the reply did not: the retry of ``complete``
  with the same claim succeeds (no false "stale"), and on Redis a real lost reply (a proxy drops
  it after the server applied the script) is retried to the same answer.

Redis Cluster refuses the FIFO gate store at configuration (its script writes two keys).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.errors import ConfigurationError, StoreUnavailableError
from pubsub_toolkit.stores.dedup.base import ClaimStatus, RecordState
from pubsub_toolkit.stores.fifo_state.base import GroupState
from tests.support.redis_servers import PrivateRedis, ReplyDroppingProxy, private_redis
from tests.support.store_targets import REDIS_TARGETS, TARGETS, Target, build

LEASE = timedelta(seconds=30)
TTL = timedelta(hours=1)


@pytest.fixture(scope="module")
def redis_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    with private_redis(tmp_path_factory.mktemp("contract-redis")) as server:
        yield server


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    with private_redis(tmp_path_factory.mktemp("contract-cluster"), cluster=True) as server:
        yield server


@pytest.fixture(params=TARGETS)
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    with build(request.param, request) as made:
        yield made


# --- restart empty ---------------------------------------------------------------------------


def test_a_store_emptied_by_a_restart_never_claims_a_key_done(target: Target) -> None:
    store = target.make_dedup(ManualClock())
    claim = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    store.complete("ns", "k", claim, "result", ttl=TTL)
    assert store.get("ns", "k").state is RecordState.DONE
    target.wipe()
    assert store.get("ns", "k") is None
    again = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    assert again.status is ClaimStatus.ACQUIRED  # not DUPLICATE: it does not know any more


def test_a_fifo_state_lost_by_a_restart_reads_as_new_and_its_old_version_never_matches(
    target: Target,
) -> None:
    if target.cluster:
        with pytest.raises(ConfigurationError, match="cannot run on Redis Cluster"):
            target.make_fifo()
        return
    store, rival = target.make_fifo(), target.make_fifo()
    saved = store.save("c", "g", GroupState(last_processed=3), store.load("c", "g"))
    assert saved is not None
    target.wipe()
    assert store.load("c", "g").last_processed == 0
    assert store.save("c", "g", GroupState(last_processed=4), saved) is None
    # After the loss another worker writes the group as often as we had: a store that counts
    # versions would issue ours again, and our stale write would replace theirs unseen (ABA).
    lost = rival.load("c", "g")
    theirs = rival.save("c", "g", GroupState(last_processed=1, lease_token=7), lost)
    assert theirs is not None
    assert store.save("c", "g", GroupState(last_processed=4), saved) is None  # no ABA
    assert store.load("c", "g").lease_token == 7


# --- a timeout after commit -----------------------------------------------------------------


def test_a_complete_retried_after_its_write_landed_succeeds(target: Target) -> None:
    store = target.make_dedup(ManualClock())
    claim = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    store.complete("ns", "k", claim, "result", ttl=TTL)  # landed; its answer was lost
    store.complete("ns", "k", claim, "result", ttl=TTL)  # the retry: no false "stale"
    record = store.get("ns", "k")
    assert (record.state, record.result) == (RecordState.DONE, "result")
    assert store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.DONE


@pytest.mark.parametrize("flavour", ["redis", "async-redis"])
def test_a_reply_lost_after_the_server_applied_the_write_is_retried_to_the_same_answer(
    redis_standalone: PrivateRedis, flavour: str, request: pytest.FixtureRequest
) -> None:
    redis_standalone.heal()
    proxy = ReplyDroppingProxy(redis_standalone.port)  # (its __enter__ is typed TcpProxy)
    with proxy:
        through_proxy = PrivateRedis(
            f"redis://127.0.0.1:{proxy.port}/0", redis_standalone.port, cluster=False
        )
        with build(flavour, request, server=through_proxy) as target:
            store, fifo = target.make_dedup(ManualClock()), target.make_fifo()
            claim = store.claim("ns", "lost-reply", "fp", lease=LEASE, ttl=TTL)
            state = fifo.load("c", "lost-reply")
            proxy.drop_next_reply()
            try:
                store.complete("ns", "lost-reply", claim, "result", ttl=TTL)
            except StoreUnavailableError:
                store.complete("ns", "lost-reply", claim, "result", ttl=TTL)  # the caller's retry
            assert proxy.dropped == 1
            record = store.get("ns", "lost-reply")
            assert (record.state, record.result) == (RecordState.DONE, "result")
            proxy.drop_next_reply()
            try:
                saved = fifo.save("c", "lost-reply", GroupState(last_processed=1), state)
            except StoreUnavailableError:
                saved = "unknown"  # the gate re-reads then (see its _advance_recorded)
            assert proxy.dropped == 2
            assert saved is not None  # never a false "lost the race" for our own write
            assert fifo.load("c", "lost-reply").last_processed == 1


# --- error replies --------------------------------------------------------------------------

FAULT_CASES = [
    (name, fault)
    for name in REDIS_TARGETS
    for fault in ("replica", "full")
    if not (name.endswith("cluster") and fault == "replica")  # a cluster node takes no REPLICAOF
]


@pytest.mark.parametrize(("name", "fault"), FAULT_CASES)
def test_an_error_reply_is_store_unavailable_and_changes_nothing(
    name: str, fault: str, request: pytest.FixtureRequest
) -> None:
    with build(name, request) as target:
        assert target.server is not None
        store = target.make_dedup(ManualClock())
        fifo = None if target.cluster else target.make_fifo()
        claim = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
        state = None if fifo is None else fifo.load("c", "g")
        (target.server.make_replica if fault == "replica" else target.server.make_full)()
        try:
            with pytest.raises(StoreUnavailableError):
                store.claim("ns", "other", "fp", lease=LEASE, ttl=TTL)
            with pytest.raises(StoreUnavailableError):
                store.complete("ns", "k", claim, "result", ttl=TTL)
            if fifo is not None:
                with pytest.raises(StoreUnavailableError):
                    fifo.save("c", "g", GroupState(last_processed=1), state)
        finally:
            target.server.heal()
        store.complete("ns", "k", claim, "result", ttl=TTL)  # the same claim: still ours
        assert store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.DONE
        if fifo is not None:
            assert fifo.save("c", "g", GroupState(last_processed=1), state) is not None
