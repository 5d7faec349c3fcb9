"""FIFO groups on a real redis-server that loses what it acknowledged, or forgets an idle group.

The producer side is the real ``Publisher`` with the Redis sequence counter, the consumer side
the real ``FifoGate`` with the Redis FIFO store, both on the session's redis-server. "Redis
restarted empty" deletes every key of the test's own prefixes - what a restart without
persistence does to them - so other tests sharing the server are untouched. Each test is one
defect of issue 24 (a reviewer's finding on the local stack).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta

import pytest
import redis

from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.fifo_policy import GateOutcome, GatePolicy
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.errors import TransientError
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.stores.counters.redis import RedisSequenceCounter
from pubsub_toolkit.stores.fifo_state.redis import RedisFifoStore
from tests.support.sinks import RecordingSink
from tests.support.waiting import wait_until

ORIGIN = "projects/p/topics/origin"
DLQ = "projects/p/topics/dlq"
GROUP = "orders"


class Stack:
    """A Publisher and one consumer process's gate on one Redis, under the test's prefixes."""

    def __init__(
        self,
        url: str,
        *,
        retention: timedelta | None = None,
        during_handler: Callable[[Message], object] | None = None,
    ) -> None:
        self.prefix = f"loss-{uuid.uuid4().hex[:12]}:"
        self.client = redis.Redis.from_url(url)
        ttl = {} if retention is None else {"ttl": retention}
        self.counter = RedisSequenceCounter.from_url(url, prefix=f"{self.prefix}c:", **ttl)
        self.published = RecordingSink()
        self.publisher = Publisher(self.published, ORIGIN, counter=self.counter)
        self.dead_letters = RecordingSink()
        self.handled: list[str] = []
        self._during_handler = during_handler
        self._delivered = 0
        log = DecisionLog("consumer-a")
        policy = GatePolicy() if retention is None else GatePolicy(completed_retention=retention)
        self.gate = FifoGate(
            RedisFifoStore.from_url(url, prefix=f"{self.prefix}s:"),
            consumer="consumer-a",
            handler=self._handle,
            dead_letters=DeadLetterer(self.dead_letters, DLQ, log),
            policy=policy,
            log=log,
        )

    def _handle(self, message: Message) -> None:
        self.handled.append(message.attributes["dedup_key"])
        if self._during_handler is not None:
            self._during_handler(message)

    def publish(self, *keys: str) -> None:
        for key in keys:
            self.publisher.publish(key.encode(), fifo_group=GROUP, dedup_key=key)

    def deliver_new(self) -> list[GateOutcome]:
        """Deliver every message published since the last call, in order, once each - and
        again while the gate nacks it (Pub/Sub redelivers a nacked message)."""
        outcomes = []
        for out in self.published.on(ORIGIN)[self._delivered :]:
            self._delivered += 1
            message = Message(out.data, dict(out.attributes), message_id=uuid.uuid4().hex)
            outcomes.append(self.deliver(message))
        return outcomes

    def deliver(self, message: Message) -> GateOutcome:
        for _ in range(5):
            try:
                seq = int(message.attributes["fifo_seq"])
                return self.gate.deliver(message, GROUP, seq).outcome
            except TransientError:
                continue  # nacked: delivered again
        raise AssertionError(f"{message.attributes['dedup_key']} nacked five times")

    def restart_empty(self) -> None:
        """Every key of this stack gone, as after a Redis restart without persistence."""
        for key in self.client.scan_iter(match=f"{self.prefix}*"):
            self.client.delete(key)

    def dead_lettered(self) -> list[tuple[str, str]]:
        return [
            (m.attributes["dedup_key"], m.attributes["error_reason"])
            for m in self.dead_letters.on(DLQ)
        ]


@pytest.fixture
def stack(redis_url: str) -> Stack:
    return Stack(redis_url)


@pytest.mark.parametrize("new", [3, 100])
def test_new_messages_after_redis_restarted_empty_run_not_acked_as_duplicates(
    stack: Stack, new: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Defect 2: the consumer processed 100 messages; Redis restarts empty; the counter starts
    again at 1. The gate's repair restored the group to 100, and the new #1.. were acked as
    duplicates (or dead-lettered as reused numbers) - never handled. The counter's new epoch
    tells them apart: they are a new sequence and run, in order."""
    stack.publish(*(f"old-{i}" for i in range(1, 101)))
    assert set(stack.deliver_new()) == {GateOutcome.PROCESSED}
    stack.restart_empty()
    fresh = [f"new-{i}" for i in range(1, new + 1)]
    stack.publish(*fresh)
    assert set(stack.deliver_new()) == {GateOutcome.PROCESSED}
    assert stack.handled[100:] == fresh
    assert stack.dead_lettered() == []
    outcomes = {getattr(r, "decision", {}).get("outcome") for r in caplog.records}
    assert "store_rollback" in outcomes  # the loss is still reported
    assert "sequence_restarted" in outcomes


def test_an_old_copy_after_the_restart_is_a_duplicate_and_one_that_never_ran_is_kept(
    stack: Stack,
) -> None:
    """The other side of a new sequence: a redelivery of a message the old sequence ran is a
    duplicate (not run again), and one the old sequence never reached is dead-lettered with
    the reason - it will never get its turn."""
    stack.publish("a-1", "a-2", "a-3")
    old = [Message(o.data, dict(o.attributes), message_id="x") for o in stack.published.on(ORIGIN)]
    stack.deliver(old[0])
    stack.deliver(old[1])
    stack.restart_empty()
    stack._delivered = 3
    stack.publish("b-1")
    assert stack.deliver_new() == [GateOutcome.PROCESSED]
    assert stack.deliver(old[1]) is GateOutcome.DUPLICATE
    assert stack.deliver(old[2]) is GateOutcome.DEAD_LETTERED
    assert stack.handled == ["a-1", "a-2", "b-1"]
    assert stack.dead_lettered() == [("a-3", "fifo_sequence_restarted")]


def test_the_message_in_flight_when_redis_restarts_empty_runs_once(redis_url: str) -> None:
    """Defect 3: Redis restarts empty while a handler runs (40 ms, far within its lease). The
    repair fenced the run's own lease, its advance was refused as "the handler outlived its
    lease", and the redelivery ran the message a second time in the same process. The repair
    keeps this process's own live lease: the advance is recorded, the redelivery is a
    duplicate."""
    restarted: list[str] = []

    def restart_during(message: Message) -> None:
        if message.attributes["dedup_key"] == "k-3" and not restarted:
            restarted.append("k-3")
            stack.restart_empty()

    stack = Stack(redis_url, during_handler=restart_during)
    stack.publish("k-1", "k-2", "k-3")
    messages = [
        Message(o.data, dict(o.attributes), message_id="m") for o in stack.published.on(ORIGIN)
    ]
    assert [stack.gate.deliver(m, GROUP, i) for i, m in enumerate(messages, 1)][-1].outcome is (
        GateOutcome.PROCESSED
    )
    assert stack.deliver(messages[2]) is GateOutcome.DUPLICATE  # a redelivery of #3
    assert stack.handled == ["k-1", "k-2", "k-3"]
    stack.publish("k-4")
    assert stack.deliver_new()[-1] is GateOutcome.PROCESSED
    assert stack.handled == ["k-1", "k-2", "k-3", "k-4"]
    assert stack.dead_lettered() == []


def test_a_group_idle_past_the_retention_resumes_at_once(redis_url: str) -> None:
    """Defect 4: the group's record expired after its idle retention, its counter did not: the
    next number waited for #1 for ever (gap policy ``wait``). The counter now lives as long as
    the group's record, so both are gone and the group resumes at 1, in a new epoch."""
    retention = timedelta(milliseconds=300)
    stack = Stack(redis_url, retention=retention)
    stack.publish("first-1", "first-2")
    assert set(stack.deliver_new()) == {GateOutcome.PROCESSED}
    wait_until(
        lambda: not list(stack.client.scan_iter(match=f"{stack.prefix}*")),
        timeout=10,
        what="the counter and the group's record to expire",
    )
    stack.publish("later-1")
    assert stack.deliver_new() == [GateOutcome.PROCESSED]
    assert stack.handled == ["first-1", "first-2", "later-1"]


def test_the_counter_expires_no_later_than_the_idle_groups_record(stack: Stack) -> None:
    """With the defaults (DEDUP_TTL) the counter's key carries an expiry, and it ends no
    later than the group's record, which the consumer dates after the producer's last
    reservation: they cannot outlive each other the wrong way round."""
    stack.publish("k-1")
    assert stack.deliver_new() == [GateOutcome.PROCESSED]
    state_key = next(iter(stack.client.scan_iter(match=f"{stack.prefix}s:s:*")))
    # Both read at one server instant (MULTI): reading one after the other let the second's
    # remaining time shrink by the milliseconds in between. The record's expiry is dated by
    # the consumer's clock, the counter's by Redis's: a second of tolerance for that.
    pipe = stack.client.pipeline(transaction=True)
    counter_ttl, state_ttl = pipe.pttl(f"{stack.prefix}c:{GROUP}").pttl(state_key).execute()
    assert 0 < counter_ttl <= state_ttl + 1000


def test_a_copy_parked_after_an_idle_save_does_not_expire_with_the_old_date(
    redis_url: str,
) -> None:
    """Suspected with defect 4: an idle save dates the parked hash; a copy parked there before
    the state that lists it is saved must not keep that date (it would be lost when it
    fires, while the group waits for it)."""
    from pubsub_toolkit.stores.fifo_state.base import GroupState

    prefix = f"loss-{uuid.uuid4().hex[:12]}:"
    store = RedisFifoStore.from_url(redis_url, prefix=prefix)
    client = redis.Redis.from_url(redis_url)
    state = store.save("c", GROUP, GroupState(last_processed=1), GroupState())
    assert state is not None
    # Another process parks #3 first; this process's idle save lands after (it had read #1).
    store.park("c", GROUP, 3, Message(b"3", {"dedup_key": "k-3"}, message_id="m3"))
    from datetime import UTC, datetime

    idle = GroupState(last_processed=1, expire_at=datetime.now(UTC) + timedelta(days=1))
    state = store.save("c", GROUP, idle, state)
    assert state is not None
    listed = GroupState(last_processed=1, parked=(3,), keys=((3, "d"),))
    assert store.save("c", GROUP, listed, state) is not None
    parked_key = next(iter(client.scan_iter(match=f"{prefix}p:*")))
    assert client.pttl(parked_key) == -1  # kept for good while listed
