"""A producer's ``dedup_key`` may contain ``#replay:`` - the text a DLQ replay's fate key is
built with (``key#replay:ID``). Whether a message is cancelled must not depend on reading the
original key back out of that text (a review finding): ``order#replay:7`` is a key of its own,
not a replay of ``order``, and a replay of ``order#replay:7`` is refused when
``order#replay:7`` was cancelled - the callers name the original key from the replay's
attributes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.core.ingress import IngressOutcome
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
MARKED = "order#replay:7"  # a producer's own key that reads like a replay's fate key


class NoTasks:
    """Our own TaskDeleter protocol: no task to delete."""

    def delete(self, dedup_key: str, hop: int = 0) -> bool:
        return False


class World:
    """An hour past the due time: one store, one sink, ingress and the relay on them."""

    def __init__(self) -> None:
        self.clock = ManualClock(DUE + timedelta(hours=1))
        self.store, self.sink = MemoryDedupStore(self.clock), RecordingSink()
        common: dict[str, Any] = {
            "store": self.store,
            "sink": self.sink,
            "final_topic": FINAL,
            "dead_letter_topic": DLQ,
            "lease": timedelta(seconds=30),
            "ttl": timedelta(days=8),
            "clock": self.clock,
        }
        self.ingress, self.relay = Ingress(**common), Relay(**common)

    def cancel(self, key: str) -> bool:
        """cancel(key); True when it answered "not delivered"."""
        return cancel(key, store=self.store, scheduler=NoTasks()).cancelled

    def deliver(self, path: str, key: str, replay_id: str | None = None) -> bool:
        """The due message ``key`` (a replay of it with ``replay_id``) through ingress or the
        relay; True when it was published to the final topic."""
        attributes = {attr.DEDUP_KEY: key, attr.DELIVER_AT: attr.format_time(DUE)}
        if replay_id is not None:
            mint(self.store, replay_id, key)  # as `dlq replay` does before it publishes
            attributes[attr.REPLAY_ID] = replay_id
        before = len(self.sink.on(FINAL))
        if path == "ingress":
            message = Message(b"payload", attributes, message_id=f"m-{key}-{replay_id}")
            outcome = self.ingress.handle(message).outcome
            assert outcome in (IngressOutcome.PUBLISHED, IngressOutcome.CANCELLED)
        else:
            delayed = DelayedMessage(OutboundMessage(b"payload", attributes), key, DUE)
            assert self.relay.release(delayed.to_json()).outcome in (
                RelayOutcome.PUBLISHED,
                RelayOutcome.CANCELLED,
            )
        assert self.sink.on(DLQ) == []
        return len(self.sink.on(FINAL)) > before


PATHS = ("ingress", "relay")


@pytest.mark.parametrize("path", PATHS)
def test_a_key_containing_the_replay_mark_is_not_cancelled_by_a_cancel_of_its_prefix(
    path: str,
) -> None:
    world = World()
    assert world.cancel("order")
    assert world.deliver(path, MARKED)  # a message of its own: nobody cancelled it


@pytest.mark.parametrize("path", PATHS)
def test_a_replay_of_a_cancelled_key_containing_the_replay_mark_is_refused(path: str) -> None:
    world = World()
    assert world.cancel(MARKED)
    assert not world.deliver(path, MARKED)
    assert not world.deliver(path, MARKED, replay_id="dl-1")
    assert world.sink.on(FINAL) == []


@pytest.mark.parametrize("path", PATHS)
def test_a_replay_of_a_key_containing_the_replay_mark_is_delivered_when_not_cancelled(
    path: str,
) -> None:
    world = World()
    assert world.cancel("order")  # another key: the prefix of this one
    assert world.deliver(path, MARKED, replay_id="dl-1")
