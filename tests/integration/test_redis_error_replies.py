"""A Redis *error reply* that means "cannot take writes now" is "store unavailable", as a lost
connection is: READONLY (the server became a replica: a failover) and OOM (maxmemory with
noeviction), from the sync and the asyncio clients.

So when the effect already ran and its done record / the FIFO advance hits such a reply, the
code above takes its "store unavailable" branch: it retries until the store answers, or raises
its ALERT (``complete_failed``, ``advance_failed``) and a transient error - never a silent rerun.
The faults are real: a redis-server of this module's own, made a replica or full, then healed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor, Outcome
from pubsub_toolkit.errors import StoreUnavailableError
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.counters.redis import RedisSequenceCounter
from pubsub_toolkit.stores.dedup.redis import RedisDedupStore
from pubsub_toolkit.stores.dedup.redis_async import AsyncRedisDedupStore, connect_async
from pubsub_toolkit.stores.fifo_state.base import GroupState
from pubsub_toolkit.stores.fifo_state.redis import RedisFifoStore
from pubsub_toolkit.stores.fifo_state.redis_async import AsyncRedisFifoStore
from tests.support.redis_servers import PrivateRedis, private_redis

LEASE = timedelta(seconds=60)
TTL = timedelta(hours=1)
FAULTS = ("replica", "full")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    with private_redis(tmp_path_factory.mktemp("redis-error-replies")) as running:
        yield running


@pytest.fixture
def fresh(server: PrivateRedis) -> Iterator[PrivateRedis]:
    server.heal()
    server.flush()
    yield server
    server.heal()


def breaker(server: PrivateRedis, fault: str) -> Callable[[], None]:
    return server.make_replica if fault == "replica" else server.make_full


class HealingClock(ManualClock):
    """A manual clock whose first retry wait heals the server: "the store answers again"."""

    def __init__(self, server: PrivateRedis) -> None:
        super().__init__()
        self._server = server
        self.waits = 0

    def sleep(self, seconds: float) -> None:
        self.waits += 1
        if self.waits == 1:
            self._server.heal()
        super().sleep(seconds)


@pytest.mark.parametrize("fault", FAULTS)
def test_every_sync_store_call_hit_by_the_reply_is_store_unavailable(
    fresh: PrivateRedis, fault: str
) -> None:
    dedup = RedisDedupStore.from_url(fresh.url)
    fifo = RedisFifoStore.from_url(fresh.url)
    counter = RedisSequenceCounter.from_url(fresh.url)
    claim = dedup.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
    state = fifo.load("c", "g")
    breaker(fresh, fault)()
    with pytest.raises(StoreUnavailableError):
        dedup.claim("ns", "other", "fp", lease=LEASE, ttl=TTL)
    with pytest.raises(StoreUnavailableError):
        dedup.complete("ns", "k", claim, "result", ttl=TTL)
    with pytest.raises(StoreUnavailableError):
        dedup.release("ns", "k", claim)
    with pytest.raises(StoreUnavailableError):
        fifo.save("c", "g", GroupState(last_processed=1), state)
    with pytest.raises(StoreUnavailableError):
        counter.reserve("g")
    fresh.heal()
    dedup.complete("ns", "k", claim, "result", ttl=TTL)  # the same claim, once it answers


@pytest.mark.parametrize("fault", FAULTS)
def test_every_async_store_call_hit_by_the_reply_is_store_unavailable(
    fresh: PrivateRedis, fault: str
) -> None:
    async def scenario() -> None:
        client = connect_async(fresh.url, needed_by="tests")
        try:
            dedup, fifo = AsyncRedisDedupStore(client), AsyncRedisFifoStore(client)
            claim = await dedup.claim("ns", "k", "fp", lease=LEASE, ttl=TTL)
            state = await fifo.load("c", "g")
            breaker(fresh, fault)()
            with pytest.raises(StoreUnavailableError):
                await dedup.claim("ns", "other", "fp", lease=LEASE, ttl=TTL)
            with pytest.raises(StoreUnavailableError):
                await dedup.complete("ns", "k", claim, "result", ttl=TTL)
            with pytest.raises(StoreUnavailableError):
                await fifo.save("c", "g", GroupState(last_processed=1), state)
        finally:
            await client.aclose()

    asyncio.run(scenario())


@pytest.mark.parametrize("fault", FAULTS)
def test_a_done_record_refused_by_the_server_is_retried_until_it_answers(
    fresh: PrivateRedis, fault: str
) -> None:
    clock = HealingClock(fresh)
    processor = IdempotentProcessor(
        RedisDedupStore.from_url(fresh.url, clock=clock),
        namespace="consumer",
        lease=LEASE,
        ttl=TTL,
        clock=clock,
    )
    runs: list[str] = []

    def effect() -> str:
        runs.append("ran")
        breaker(fresh, fault)()  # the failover / full memory comes after the effect
        return "result"

    first = processor.process("k", "fp", effect)
    assert first.outcome is Outcome.PROCESSED
    assert clock.waits >= 1  # the done write was refused, waited for, and written
    again = processor.process("k", "fp", effect)  # the redelivery
    assert again.outcome is Outcome.DUPLICATE
    assert runs == ["ran"]


@pytest.mark.parametrize("fault", FAULTS)
def test_a_done_record_the_server_keeps_refusing_is_an_alert_not_a_silent_rerun(
    fresh: PrivateRedis, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock()
    processor = IdempotentProcessor(
        RedisDedupStore.from_url(fresh.url, clock=clock),
        namespace="consumer",
        lease=LEASE,
        ttl=TTL,
        clock=clock,
    )

    def effect() -> str:
        breaker(fresh, fault)()
        return "result"

    with caplog.at_level(logging.ERROR), pytest.raises(StoreUnavailableError):
        processor.process("k", "fp", effect)
    alerts = [r.getMessage() for r in caplog.records if "ALERT" in r.getMessage()]
    assert any("complete_failed" in a or "not recorded" in a for a in alerts), alerts


def fifo_message(seq: int) -> Message:
    return Message(f"g:{seq}".encode(), {"fifo_group": "g", "fifo_seq": str(seq)})


@pytest.mark.parametrize("fault", FAULTS)
def test_a_fifo_advance_refused_by_the_server_is_retried_until_it_answers(
    fresh: PrivateRedis, fault: str
) -> None:
    clock = HealingClock(fresh)
    runs: list[int] = []

    def handler(message: Message) -> None:
        runs.append(int(message.attributes["fifo_seq"]))
        breaker(fresh, fault)()

    gate = FifoGate(RedisFifoStore.from_url(fresh.url), consumer="c", handler=handler, clock=clock)
    gate.deliver(fifo_message(1), "g", 1)
    assert clock.waits >= 1
    gate.deliver(fifo_message(1), "g", 1)  # the redelivery: already past it
    assert runs == [1]
    assert RedisFifoStore.from_url(fresh.url).load("c", "g").last_processed == 1


@pytest.mark.parametrize("fault", FAULTS)
def test_a_fifo_advance_the_server_keeps_refusing_raises_the_advance_failed_alert(
    fresh: PrivateRedis, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    def handler(message: Message) -> None:
        breaker(fresh, fault)()

    gate = FifoGate(
        RedisFifoStore.from_url(fresh.url), consumer="c", handler=handler, clock=ManualClock()
    )
    with caplog.at_level(logging.ERROR), pytest.raises(StoreUnavailableError):
        gate.deliver(fifo_message(1), "g", 1)
    alerts = [r.getMessage() for r in caplog.records if "ALERT" in r.getMessage()]
    assert any("advance was not recorded" in a for a in alerts), alerts
