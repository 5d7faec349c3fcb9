"""Issue 24, defect 6: ``cancel()`` asked long after a release still answers "delivered".

The release record used to expire with ``DEDUP_TTL`` while a cancel tombstone lives 366 days:
a cancel more than ``DEDUP_TTL`` after the release found no record, wrote a tombstone and
answered ``already_delivered=False`` about a message on the final topic since. Here on every
dedup backend (the in-memory store, a real redis-server, the Firestore emulator), each store on
a clock the test moves - the stores treat a record past its ``expire_at`` as absent, as
Firestore's late TTL deletion requires - and, on Redis, with the server's own key TTL.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.delay.cancel import RELAY_NAMESPACE, TOMBSTONE_TTL, cancel
from pubsub_toolkit.delay.payload import DelayedMessage
from pubsub_toolkit.delay.relay import Relay, RelayOutcome
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message, OutboundMessage
from tests.support.sinks import RecordingSink
from tests.support.stores import BACKENDS, store_factory

FINAL, DLQ = "projects/p/topics/final", "projects/p/topics/dlq"
DEDUP_TTL = timedelta(days=8)  # the default PUBSUB_TOOLKIT_DEDUP_TTL_SECONDS


def wiring(store: Any, sink: RecordingSink, clock: ManualClock) -> dict[str, Any]:
    """What the relay and ingress are built with here: one store, the topics, lease and TTL."""
    return {
        "store": store,
        "sink": sink,
        "final_topic": FINAL,
        "dead_letter_topic": DLQ,
        "lease": timedelta(seconds=30),
        "ttl": DEDUP_TTL,
        "clock": clock,
    }


class NoTasks:
    """Our own TaskDeleter protocol: the task ran, there is nothing left to delete."""

    def delete(self, dedup_key: str, hop: int = 0) -> bool:
        return False


@pytest.mark.parametrize("backend", BACKENDS)
def test_cancel_after_dedup_ttl_still_says_delivered(
    request: pytest.FixtureRequest, backend: str, unique: str
) -> None:
    clock = ManualClock(datetime.now(UTC))
    store = store_factory(request, backend)(clock=clock)
    sink = RecordingSink()
    relay = Relay(**wiring(store, sink, clock))
    key = f"reminder-{unique}"
    message = OutboundMessage(b"remind me", {"dedup_key": key})
    task = DelayedMessage(message, key, clock.now()).to_json()
    assert relay.release(task).outcome is RelayOutcome.PUBLISHED
    released_at = clock.now()

    clock.advance(DEDUP_TTL + timedelta(days=1))
    answer = cancel(key, store=store, scheduler=NoTasks())
    assert answer.already_delivered and not answer.cancelled
    record = store.get(RELAY_NAMESPACE, key)
    assert record is not None and record.expire_at >= released_at + TOMBSTONE_TTL
    assert len(sink.on(FINAL)) == 1
    # The same answer again later, and the task run once more publishes nothing.
    clock.advance(timedelta(days=200))
    assert cancel(key, store=store, scheduler=NoTasks()).already_delivered
    assert relay.release(task).outcome is RelayOutcome.DUPLICATE
    assert len(sink.on(FINAL)) == 1


def test_redis_keeps_the_release_record_as_long_as_a_tombstone(redis_url: str, unique: str) -> None:
    """The server's own TTL on the key (what really deletes it), not only the record's field."""
    from pubsub_toolkit.stores.dedup.redis import RedisDedupStore

    prefix = f"ttl-{unique}:"
    relay = Relay(
        store=RedisDedupStore.from_url(redis_url, prefix=prefix),
        sink=RecordingSink(),
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=DEDUP_TTL,
    )
    message = OutboundMessage(b"x", {"dedup_key": "k"})
    relay.release(DelayedMessage(message, "k", datetime.now(UTC)).to_json())
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        [name] = client.keys(f"{prefix}*")  # the release record, the only one written
        assert name.endswith(f"{RELAY_NAMESPACE}:k")
        remaining = timedelta(milliseconds=client.pttl(name))
    finally:
        client.close()
    assert remaining > DEDUP_TTL + timedelta(days=1)
    assert remaining > TOMBSTONE_TTL - timedelta(hours=1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_delay_already_due_at_ingress_is_still_delivered_to_a_late_cancel(
    request: pytest.FixtureRequest, backend: str, unique: str
) -> None:
    """Ingress releases a delayed message that is due on arrival through the relay's record: that
    record, too, must outlive ``DEDUP_TTL``."""
    clock = ManualClock(datetime.now(UTC))
    store = store_factory(request, backend)(clock=clock)
    sink = RecordingSink()
    ingress = Ingress(**wiring(store, sink, clock))
    key = f"due-{unique}"
    ingress.handle(Message(b"x", {"dedup_key": key, "delay_seconds": "0"}, message_id="1"))
    assert len(sink.on(FINAL)) == 1

    clock.advance(DEDUP_TTL + timedelta(days=1))
    answer = cancel(key, store=store, scheduler=NoTasks())
    assert answer.already_delivered and not answer.cancelled
