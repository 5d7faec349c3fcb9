"""``cancel()`` racing a ``dlq replay`` of the same delayed message.

A delayed message that never went out (the relay gave up on it) is on the dead-letter topic;
the operator replays it while its producer cancels it. ``cancel()``'s answer must stay true
whenever it is asked - and a message it called "not delivered" is never delivered, a replay
included. Before the fix the replay's release claimed only its own fate record
(``key#replay:ID``) and ``cancel()`` read only the original's (``key``): a cancel landing
after the replay's tombstone check, or during or after its publish, wrote a tombstone nobody
looked at again and answered "not delivered" about a message on the final topic.

Each case runs the replay's release through ingress (due already) or the relay (scheduled),
with ``cancel()`` at one moment of it. A cancel during the publish finds the record held by
the release, as it would the original's own, and its caller tries again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.delay.cancel import RELAY_NAMESPACE, CancelResult, cancel
from pubsub_toolkit.delay.payload import DelayedMessage
from pubsub_toolkit.delay.relay import Relay, RelayOutcome
from pubsub_toolkit.errors import ClaimInProgressError, TransientError
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.stores.dedup.base import DedupRecord
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit_cli.dead_letters.replay import replay
from tests.support.sinks import RecordingSink

FINAL, DLQ, ORIGIN = "projects/p/topics/final", "projects/p/topics/dlq", "projects/p/topics/in"
SUBSCRIPTION = "projects/p/subscriptions/dlq-pull"
DUE = datetime(2030, 1, 1, tzinfo=UTC)


class NoTasks:
    """Our own TaskDeleter protocol: the relay gave up, no task is left to delete."""

    def delete(self, dedup_key: str, hop: int = 0) -> bool:
        return False


@dataclass
class DeadLetterSubscription:
    """The few calls ``replay`` makes of a SubscriberClient, on one letter (a fake of ours)."""

    letter: Message
    acked: bool = False

    def pull(self, **_: Any) -> SimpleNamespace:
        if self.acked:
            return SimpleNamespace(received_messages=[])
        message = SimpleNamespace(
            data=self.letter.data,
            attributes=self.letter.attributes,
            message_id=self.letter.message_id,
            publish_time=None,
        )
        return SimpleNamespace(received_messages=[SimpleNamespace(ack_id="a1", message=message)])

    def acknowledge(self, **_: Any) -> None:
        self.acked = True

    def modify_ack_deadline(self, **_: Any) -> None:
        pass


class HookedStore(MemoryDedupStore):
    """A memory store that runs ``on_read_original`` once, right after the release of the
    replay has read the original's fate record (its tombstone check)."""

    on_read_original: Callable[[], None] | None = None

    def get(self, namespace: str, key: str) -> DedupRecord | None:
        record = super().get(namespace, key)
        hook = self.on_read_original
        if hook is not None and (namespace, key) == (RELAY_NAMESPACE, "k"):
            self.on_read_original = None
            hook()
        return record


class HookedSink(RecordingSink):
    """A recording sink that runs ``on_final`` once, as a message is published to the final
    topic (after the releaser's decision, before the publish returns)."""

    on_final: Callable[[], None] | None = None

    def publish(self, topic: str, message: OutboundMessage) -> str:
        hook = self.on_final
        if hook is not None and topic == FINAL:
            self.on_final = None
            hook()
        return super().publish(topic, message)


@dataclass
class World:
    """An hour past the due time of "k", whose relay gave up: its letter is on the DLQ."""

    clock: ManualClock = field(default_factory=lambda: ManualClock(DUE + timedelta(hours=1)))
    answers: list[CancelResult] = field(default_factory=list)
    busy: int = 0  # cancels that found a release holding the record (try again)

    def __post_init__(self) -> None:
        self.store, self.sink = HookedStore(self.clock), HookedSink()
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

    def cancel(self) -> None:
        """cancel("k"), as its caller does: tried again while a release holds the record."""
        try:
            self.answers.append(cancel("k", store=self.store, scheduler=NoTasks()))
        except ClaimInProgressError:
            self.busy += 1

    def replay_copy(self, letter_id: str = "dl-1") -> Message:
        """``dlq replay`` of the letter: the copy it publishes to the origin topic."""
        letter = Message(
            b"payload",
            {
                attr.DEDUP_KEY: "k",
                attr.DELIVER_AT: attr.format_time(DUE),
                attr.ERROR_REASON: "relay_gave_up",
                attr.ERROR_DETAIL: "the queue's last attempt failed",
            },
            message_id=letter_id,
        )
        subscription, sink = DeadLetterSubscription(letter), RecordingSink()
        replayed = replay(
            subscription, SUBSCRIPTION, sink, ORIGIN, store=self.store, select=lambda d: True
        )
        assert [d.dead_letter_id for d in replayed] == [letter_id]
        [copy] = sink.on(ORIGIN)
        return Message(copy.data, copy.attributes, message_id=f"origin-{letter_id}")

    def release(self, path: str, copy: Message) -> None:
        """The replay's release: ingress takes the due copy at once; the relay releases it
        when ingress scheduled it (the task body carries the original's key)."""
        if path == "ingress":
            self.ingress.handle(copy)
        else:
            message = OutboundMessage(copy.data, copy.attributes)
            self.relay.release(DelayedMessage(message, "k", DUE).to_json())


PATHS = ("ingress", "relay")
MOMENTS = ("before", "after_the_check", "during_the_publish", "after")


@pytest.mark.parametrize("moment", MOMENTS)
@pytest.mark.parametrize("path", PATHS)
def test_cancel_racing_a_replay_answers_truthfully_and_not_delivered_means_never(
    path: str, moment: str
) -> None:
    world = World()
    copy = world.replay_copy()
    if moment == "before":
        world.cancel()
    elif moment == "after_the_check":
        world.store.on_read_original = world.cancel
    elif moment == "during_the_publish":
        world.sink.on_final = world.cancel
    world.release(path, copy)
    if moment == "after" or world.busy:
        world.cancel()
    [answer] = world.answers
    published = world.sink.on(FINAL)
    assert answer.already_delivered == bool(published), (answer, published)
    assert world.sink.on(DLQ) == []  # a refused replay is no "mismatch" dead letter
    # Asked again later, cancel() says the same; and another replay changes nothing.
    world.cancel()
    assert world.answers[-1].already_delivered == answer.already_delivered
    world.release(path, world.replay_copy("dl-2"))
    assert len(world.sink.on(FINAL)) == (2 if answer.already_delivered else 0)


@pytest.mark.parametrize("path", PATHS)
def test_a_cancel_after_a_replay_failed_to_publish_is_told_to_wait_and_the_retry_delivers(
    path: str,
) -> None:
    """A release whose publish failed still holds the record, as the original's own does: the
    cancel after it is told to try again (whether the publish went out is not known until the
    release finishes: test_cancel_pending_release.py), and the replay's retry - Pub/Sub's
    redelivery, Cloud Tasks' next attempt - is not refused but publishes; then "delivered"."""
    world = World()
    copy = world.replay_copy()
    world.sink.fail_next = 1  # the final topic's publish: nothing went out yet
    with pytest.raises(TransientError):
        world.release(path, copy)
    world.cancel()
    assert (world.answers, world.busy) == ([], 1)
    world.release(path, copy)
    assert len(world.sink.on(FINAL)) == 1 and world.sink.on(DLQ) == []
    world.cancel()
    assert [a.already_delivered for a in world.answers] == [True]


def test_the_originals_own_task_after_its_released_replay_publishes_nothing_more() -> None:
    """Pub/Sub may forward a message ingress did schedule (its ack lost): the replay released
    first holds the original's record, so the original's task, firing later, is a duplicate."""
    world = World()
    world.release("ingress", world.replay_copy())
    original = OutboundMessage(
        b"payload", {attr.DEDUP_KEY: "k", attr.DELIVER_AT: attr.format_time(DUE)}
    )
    assert world.relay.release(DelayedMessage(original, "k", DUE).to_json()).outcome is (
        RelayOutcome.DUPLICATE
    )
    assert len(world.sink.on(FINAL)) == 1
    world.cancel()
    assert world.answers[-1].already_delivered
