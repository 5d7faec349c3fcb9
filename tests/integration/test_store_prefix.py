"""Two deployments on one Firestore database or one redis-server, told apart by their store
prefix (PUBSUB_TOOLKIT_STORE_PREFIX): each numbers a group from 1, keeps its own FIFO state and
its own stats, though both use the same group, consumer and scope names.

Without the prefix the counters are one document (one key) per group for everybody: the two
deployments' producers would interleave their numbers, and each consumer would wait for the
other's numbers forever under the default ``wait`` gap policy.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis
from google.cloud import firestore

from pubsub_toolkit.config import Settings
from pubsub_toolkit.stores import factory
from pubsub_toolkit.stores.dedup.base import ClaimStatus
from pubsub_toolkit.stores.fifo_state.base import GroupState
from tests.integration.test_backends import LEASE, TTL


def deployment(project: str, prefix: str, **backend: str) -> Settings:
    return Settings(
        project=project,
        final_topic="final",
        dead_letter_topic="dlq",
        store_prefix=prefix,
        **backend,  # type: ignore[arg-type]
    )


def assert_apart(blue: Settings, green: Settings) -> tuple[str, str]:
    """The same group, consumer, scope and dedup key in both deployments: nothing is shared.
    Returns the group and consumer used (blue's counter at 4, its consumer processed 4)."""
    group, consumer, scope, key = (f"{kind}-{uuid.uuid4().hex[:8]}" for kind in "gcsk")
    blue_backend = factory.backend_from_settings(blue)
    green_backend = factory.backend_from_settings(green)
    try:
        # The producers' counters (as the Publisher gets them): each numbers from 1.
        blue_counter = factory.counter_from_settings(blue)
        green_counter = factory.counter_from_settings(green)
        assert list(blue_counter.reserve(group, 3).numbers()) == [1, 2, 3]
        assert list(green_counter.reserve(group, 2).numbers()) == [1, 2]
        assert list(blue_counter.reserve(group, 1).numbers()) == [4]
        assert list(green_backend.counter().reserve(group, 1).numbers()) == [3]

        # FIFO state of the same (consumer, group).
        blue_fifo = blue_backend.fifo_store()
        assert blue_fifo.save(consumer, group, GroupState(last_processed=4), GroupState())
        assert blue_fifo.groups(consumer) == [group]
        green_fifo = green_backend.fifo_store()
        assert green_fifo.load(consumer, group) == GroupState()
        assert green_fifo.groups(consumer) == []
        # Green's own state (its producer numbered 3 so far) leaves blue's where it was.
        assert green_fifo.save(consumer, group, GroupState(last_processed=3), GroupState())
        assert blue_fifo.load(consumer, group).last_processed == 4
        assert green_fifo.load(consumer, group).last_processed == 3

        # Stats of the same scope: the status pages do not mix.
        blue_backend.stats_store(scope=scope).add({"published": 5})
        green_backend.stats_store(scope=scope).add({"published": 1})
        assert blue_backend.stats_store(scope=scope).totals() == {"published": 5}
        assert green_backend.stats_store(scope=scope).totals() == {"published": 1}

        # Dedup records: the same key is new to each.
        for backend in (blue_backend, green_backend):
            claim = backend.dedup_store().claim("ns", key, "fp", lease=LEASE, ttl=TTL)
            assert claim.status is ClaimStatus.ACQUIRED
    finally:
        blue_backend.close()
        green_backend.close()

    # The asyncio path's stores take the same names.
    async def async_apart() -> None:
        blue_stores = factory.async_stores_from_settings(blue)
        green_stores = factory.async_stores_from_settings(green)
        try:
            assert (await blue_stores.fifo.load(consumer, group)).last_processed == 4
            assert (await green_stores.fifo.load(consumer, group)).last_processed == 3
            blue_claim = await blue_stores.dedup.claim("ns", key, "fp", lease=LEASE, ttl=TTL)
            assert blue_claim.status is ClaimStatus.IN_PROGRESS  # the sync store's record
            async_key = f"{key}-async"
            for stores in (blue_stores, green_stores):
                claim = await stores.dedup.claim("ns", async_key, "fp", lease=LEASE, ttl=TTL)
                assert claim.status is ClaimStatus.ACQUIRED
        finally:
            for stores in (blue_stores, green_stores):
                close = getattr(stores.client, "aclose", None) or stores.client.close
                result = close()
                if asyncio.iscoroutine(result):
                    await result

    asyncio.run(async_apart())
    return group, consumer


def test_two_firestore_deployments_with_their_own_prefixes_share_nothing(
    firestore_emulator: str, project_id: str
) -> None:
    blue = deployment(project_id, "blue_")
    green = deployment(project_id, "green_")
    assert_apart(blue, green)
    # The collections are the prefixed ones; a deployment without a prefix keeps today's.
    client = firestore.Client(project=project_id)
    for prefix in ("blue_", "green_"):
        for name in ("fifo_counters", "fifo_state", "stats", "dedup"):
            collection = f"{prefix}pubsub_toolkit_{name}"
            assert list(client.collection(collection).limit(1).stream()), collection
    assert not list(client.collection("pubsub_toolkit_fifo_counters").limit(1).stream())
    plain = deployment(project_id, "")
    assert list(factory.counter_from_settings(plain).reserve("g", 1).numbers()) == [1]
    assert list(client.collection("pubsub_toolkit_fifo_counters").limit(1).stream())
    client.close()  # type: ignore[no-untyped-call]


def test_two_redis_deployments_with_their_own_prefixes_share_nothing(redis_url: str) -> None:
    blue = deployment("p", "blue_", store_backend="redis", redis_url=redis_url)
    green = deployment("p", "green_", store_backend="redis", redis_url=redis_url)
    assert_apart(blue, green)
    observer = redis.Redis.from_url(redis_url)
    try:
        for prefix in ("blue_", "green_"):
            for kind in ("dedup", "fifo", "fifo_state", "stats"):
                pattern = f"{prefix}pubsub_toolkit:{kind}:*"
                assert next(observer.scan_iter(match=pattern), None) is not None, pattern
    finally:
        observer.close()


def test_the_operator_cli_sees_the_prefixed_deployment(
    firestore_emulator: str, project_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fifo skip|replay` (gate_and_counter) and `status`/`dashboard` (LiveStatusSource) read
    Settings.from_env: with blue's PUBSUB_TOOLKIT_STORE_PREFIX they see blue's stores only."""
    from pubsub_toolkit_cli.cli.operations import gate_and_counter
    from pubsub_toolkit_cli.dashboard.sources import LiveStatusSource

    group, consumer = assert_apart(
        deployment(project_id, "blue_"), deployment(project_id, "green_")
    )
    env = {
        "GOOGLE_CLOUD_PROJECT": project_id,
        "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
        "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dlq",
        "PUBSUB_TOOLKIT_STORE_PREFIX": "blue_",
        "PUBSUB_TOOLKIT_CONSUMER_ID": consumer,
        # No Cloud Monitoring for the status page on an emulator (nothing is pulled here).
        "PUBSUB_EMULATOR_HOST": "127.0.0.1:1",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    _gate, store, counter = gate_and_counter(consumer)
    assert store.load(consumer, group).last_processed == 4
    assert list(counter.reserve(group, 1).numbers()) == [5]  # blue's fifth (one shared counter: 8)
    # The status page's stores, as `status` and `dashboard` build them.
    source = LiveStatusSource.from_env(env)
    assert source._fifo_store.load(consumer, group).last_processed == 4
    assert list(source._counter.reserve(group, 1).numbers()) == [6]
