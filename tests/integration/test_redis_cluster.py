"""Redis Cluster (Memorystore for Redis Cluster): what runs there and what is refused up front.

A real redis-server in cluster mode, as a one-node cluster owning all 16384 slots. One node is
enough to be faithful where it matters: Redis checks that a script's or transaction's keys
share a *slot* (CROSSSLOT), not a node, and redis-py's cluster client behaves as it does
against many nodes (slot routing, its own pipeline rules).

* The dedup store and the sequence counter touch one key per operation: they run there with a
  ``redis.cluster.RedisCluster`` client, and their ``from_url`` picks one for a cluster node.
* The FIFO gate store's compare-and-set writes two keys at once: it refuses a cluster client,
  and a cluster node behind ``from_url``, with a ConfigurationError naming the alternatives.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.errors import ConfigurationError, StaleClaimError
from pubsub_toolkit.stores.backends.redis import RedisBackend
from pubsub_toolkit.stores.counters.redis import RedisSequenceCounter
from pubsub_toolkit.stores.dedup.base import ClaimStatus, RecordState
from pubsub_toolkit.stores.dedup.redis import RedisDedupStore
from pubsub_toolkit.stores.fifo_state import redis as redis_state
from pubsub_toolkit.stores.fifo_state.base import GroupState
from pubsub_toolkit.stores.fifo_state.redis import RedisFifoStore
from pubsub_toolkit_local.emulators import redis_server
from pubsub_toolkit_local.processes import LOOPBACK, free_port, start_service

LEASE = timedelta(seconds=30)
TTL = timedelta(hours=1)


@pytest.fixture(scope="module")
def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``redis://`` URL of a one-node Redis Cluster that owns every slot."""
    port, bus_port = free_port(), free_port()
    work_dir = tmp_path_factory.mktemp("redis-cluster")
    standalone = redis_server(port)  # the same binary and flags as the shared fixture's
    spec = replace(
        standalone,
        name="redis-cluster",
        argv=(
            *standalone.argv,
            *("--cluster-enabled", "yes", "--cluster-port", str(bus_port)),
            *("--cluster-config-file", str(work_dir / "nodes.conf")),
        ),
        cwd=str(work_dir),
    )
    service = start_service(spec, work_dir)
    try:
        admin = redis.Redis(host=LOOPBACK, port=port)
        admin.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        deadline = time.monotonic() + 20
        while admin.cluster("info").get("cluster_state") != "ok":
            assert time.monotonic() < deadline, "the one-node cluster never reached state ok"
            time.sleep(0.1)
        admin.close()
        yield f"redis://{LOOPBACK}:{port}/0"
    finally:
        service.stop()


@pytest.fixture
def cluster_client(cluster_url: str) -> Iterator[RedisCluster]:
    client = RedisCluster.from_url(cluster_url)
    yield client
    client.close()


def test_the_fifo_script_really_cannot_run_on_a_cluster(cluster_url: str) -> None:
    # Why the FIFO store refuses: its two keys hash to different slots, so Redis rejects the
    # script outright with CROSSSLOT (here through a plain client: what would reach the server).
    plain = redis.Redis.from_url(cluster_url)
    keys = ["pubsub_toolkit:fifo_state:s:1:c:g", "pubsub_toolkit:fifo_state:g:1:c"]
    assert len({key_slot(k.encode()) for k in keys}) == 2
    with pytest.raises(redis.ResponseError, match="hash to the same slot"):
        plain.eval(redis_state._SAVE_IF_VERSION, 2, *keys, "", "{}", "w", "g")
    plain.close()


def test_fifo_store_refuses_a_cluster_client(cluster_client: RedisCluster) -> None:
    with pytest.raises(ConfigurationError) as refused:
        RedisFifoStore(cluster_client)
    text = str(refused.value)
    assert "Redis Cluster" in text
    assert "Basic or Standard tier" in text
    assert "PUBSUB_TOOLKIT_STORE_BACKEND=firestore" in text


def test_fifo_store_from_url_refuses_a_cluster_node(cluster_url: str) -> None:
    # A plain client pointed at a cluster node: INFO cluster says cluster_enabled:1.
    with pytest.raises(ConfigurationError, match=r"cluster node.*Basic or Standard tier"):
        RedisFifoStore.from_url(cluster_url)


def test_fifo_store_from_url_accepts_a_standalone_server(redis_url: str) -> None:
    store = RedisFifoStore.from_url(redis_url, prefix=f"standalone-{uuid.uuid4().hex[:8]}:")
    assert store.save("c", "g", GroupState(last_processed=1), GroupState())
    assert store.load("c", "g").last_processed == 1


def test_dedup_store_runs_on_a_cluster_client(cluster_client: RedisCluster) -> None:
    clock = ManualClock()
    store = RedisDedupStore(cluster_client, prefix=f"c-{uuid.uuid4().hex[:8]}:", clock=clock)
    # Several keys (different slots): the claim pipeline routes each SET NX to its slot.
    for key in ("a", "b", "c"):
        assert store.claim("ns", key, "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.ACQUIRED
    first = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    clock.advance(LEASE + timedelta(seconds=1))
    second = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)  # WATCH/MULTI on one key
    assert (second.status, second.token) == (ClaimStatus.TAKEN_OVER, first.token + 1)
    with pytest.raises(StaleClaimError):
        store.complete("ns", "k", first, "stale", ttl=TTL)  # the fencing script, direct
    cluster_client.script_flush()  # the script must be reloaded on its shard
    store.complete("ns", "k", second, "fresh", ttl=TTL)
    store.complete("ns", "k", second, "fresh", ttl=TTL)  # a retried complete succeeds
    store.release("ns", "k", second)  # never undoes a done record
    record = store.get("ns", "k")
    assert record is not None
    assert (record.state, record.token, record.result) == (RecordState.DONE, 2, "fresh")
    assert store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.DONE


def test_dedup_store_and_counter_from_url_use_a_cluster_client(cluster_url: str) -> None:
    prefix = f"u-{uuid.uuid4().hex[:8]}:"
    store = RedisDedupStore.from_url(cluster_url, prefix=prefix)
    assert isinstance(store._client, RedisCluster)
    claim = store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    store.complete("ns", "k", claim, "r", ttl=TTL)
    assert store.claim("ns", "k", "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.DONE

    counter = RedisSequenceCounter.from_url(cluster_url, prefix=prefix)
    assert isinstance(counter._client, RedisCluster)
    assert counter.reserve("g1", 3).first == 1
    assert counter.reserve("g2").first == 1
    assert counter.reserve("g1").first == 4
    assert (counter.current("g1"), counter.current("g2"), counter.current("g3")) == (4, 1, 0)


def test_from_url_keeps_a_plain_client_for_a_standalone_server(redis_url: str) -> None:
    store = RedisDedupStore.from_url(redis_url)
    counter = RedisSequenceCounter.from_url(redis_url)
    assert not isinstance(store._client, RedisCluster)
    assert not isinstance(counter._client, RedisCluster)


def test_a_redis_backend_on_a_cluster_node_gets_a_cluster_client(cluster_url: str) -> None:
    """One client for every store, and still a cluster client where the stores get one: the
    one-key stores run on it, the FIFO gate store refuses it by name."""
    backend = RedisBackend.from_url(cluster_url)
    try:
        assert isinstance(backend.client, RedisCluster)
        unique = uuid.uuid4().hex[:8]
        dedup = backend.dedup_store(prefix=f"backend-{unique}:")
        assert dedup.claim("ns", "k", "fp", lease=LEASE, ttl=TTL).status is ClaimStatus.ACQUIRED
        counter = backend.counter(prefix=f"backend-{unique}:")
        assert list(counter.reserve("g", 2).numbers()) == [1, 2]
        stats = backend.stats_store(scope=f"backend-{unique}")
        stats.add({"published": 2})
        assert stats.totals() == {"published": 2}
        with pytest.raises(ConfigurationError) as refused:
            backend.fifo_store()
        assert "Redis Cluster" in str(refused.value)
        assert "Basic or Standard tier" in str(refused.value)
    finally:
        backend.close()
