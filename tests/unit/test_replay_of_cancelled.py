"""``dlq replay`` of a delayed message that ``cancel()`` answered "not delivered" is not
delivered either. Found by the simulation once its operator replays what Pub/Sub forwarded
(seed 581): a delayed message ingress could not take during a store outage went to the
dead-letter topic, its producer cancelled it (``already_delivered=False``), and the operator's
replay - a message with its own fate record (``key#replay:ID``) - was published at once,
because only that record was looked at for a cancel."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.dead_letters.replay import mint
from pubsub_toolkit.delay.cancel import cancel
from pubsub_toolkit.delay.payload import DelayedMessage
from pubsub_toolkit.delay.relay import Relay, RelayOutcome
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from tests.support.sinks import RecordingSink

FINAL, DLQ = "projects/p/topics/final", "projects/p/topics/dlq"
DUE = datetime(2030, 1, 1, tzinfo=UTC)


class NoTasks:
    """Our own TaskDeleter protocol: no task to delete (the message never got one)."""

    def delete(self, dedup_key: str, hop: int = 0) -> bool:
        return False


def _cancelled_before_the_replay() -> tuple[ManualClock, MemoryDedupStore, RecordingSink]:
    """An hour past the due time, "k" cancelled while it was never delivered."""
    clock = ManualClock(DUE + timedelta(hours=1))
    store, sink = MemoryDedupStore(clock), RecordingSink()
    assert not cancel("k", store=store, scheduler=NoTasks()).already_delivered
    return clock, store, sink


def _replay(store: MemoryDedupStore) -> dict[str, str]:
    mint(store, "dl-1", "k")  # as `dlq replay` does before it publishes
    return {
        attr.DEDUP_KEY: "k",
        attr.DELIVER_AT: attr.format_time(DUE),
        attr.REPLAY_ID: "dl-1",
    }


def test_ingress_does_not_deliver_a_replay_of_a_cancelled_message() -> None:
    clock, store, sink = _cancelled_before_the_replay()
    ingress = Ingress(
        store=store,
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(days=8),
        clock=clock,
    )
    ingress.handle(Message(b"payload", _replay(store), message_id="m-replay"))
    assert sink.on(FINAL) == []


def test_the_relay_does_not_deliver_a_replay_of_a_cancelled_message() -> None:
    clock, store, sink = _cancelled_before_the_replay()
    relay = Relay(
        store=store,
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(days=8),
        clock=clock,
    )
    # As ingress schedules a replay: the original's key; the relay derives the replay's own.
    body = DelayedMessage(OutboundMessage(b"payload", _replay(store)), "k", DUE).to_json()
    assert relay.release(body).outcome is RelayOutcome.CANCELLED
    assert sink.on(FINAL) == []
