"""``cancel()`` meeting a release that was claimed and never finished (simulation seed 79 of
``--enable relay_store_outage,relay_tasks_refused``).

A relay claimed a due message's fate record and died before its publish (here: the store went
down as it published, so its claim could not be let go). ``cancel()`` found that claim - another
fingerprint than its tombstone's - and answered ``already_delivered=True``. The relay's retries
then met the store outage; Cloud Tasks refused its hand-over task, and its last attempt gave the
message to the operator: it never reached the final topic. "Delivered" is only true once the
release is known done; while the claim is unfinished, whether it was published is unknown, and
``cancel()`` says so (ClaimInProgressError: try again), however long ago the lease ended.

The relay runs on the project's in-memory store behind an outage switch, with a recording sink
and an in-process queue implementing our ``HopScheduler`` protocol.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.delay.cancel import cancel
from pubsub_toolkit.delay.payload import DelayedMessage
from pubsub_toolkit.delay.relay import Relay, RelayOutcome
from pubsub_toolkit.errors import ClaimInProgressError, TransientError
from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from tests.support.sinks import RecordingSink
from tests.unit.test_relay_last_attempt import SwitchableStore

FINAL, DLQ = "projects/p/topics/final", "projects/p/topics/dlq"
MAX_ATTEMPTS = 3
DUE = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=30)


class DiesOnPublish(RecordingSink):
    """The final topic's sink; ``die`` makes the next publish fail with the store going down
    (the relay's process gone before its publish: its claim stays)."""

    def __init__(self, store: SwitchableStore) -> None:
        super().__init__()
        self.store = store
        self.die = False

    def publish(self, topic: str, message: OutboundMessage) -> str:
        if self.die and topic == FINAL:
            self.die = False
            self.store.down = True
            raise TransientError("injected: the relay died before its publish")
        return super().publish(topic, message)


class RefusingQueue:
    """Cloud Tasks refusing every create (relay_tasks_refused): a transient refusal."""

    def schedule(
        self, message: OutboundMessage, deliver_at: datetime, dedup_key: str, hop: int = 0
    ) -> str:
        raise TransientError("injected: tasks.create refused")

    def delete(self, dedup_key: str, hop: int = 0) -> bool:
        return False


class World:
    def __init__(self) -> None:
        self.clock = ManualClock(DUE)
        self.store = SwitchableStore(MemoryDedupStore(self.clock))
        self.sink = DiesOnPublish(self.store)
        self.queue = RefusingQueue()
        self.relay = Relay(
            store=self.store,
            sink=self.sink,
            final_topic=FINAL,
            dead_letter_topic=DLQ,
            lease=LEASE,
            ttl=timedelta(days=8),
            scheduler=self.queue,
            clock=self.clock,
            task_max_attempts=MAX_ATTEMPTS,
        )
        self.body = DelayedMessage(OutboundMessage(b"payload", {"dedup_key": "k"}), "k", DUE)

    def release(self, attempt: int) -> RelayOutcome:
        return self.relay.release(self.body.to_json(), attempt=attempt).outcome

    def die_mid_release(self) -> None:
        """Attempt 1 claims the release and dies before its publish; the store comes back."""
        self.sink.die = True
        with pytest.raises(TransientError):
            self.release(1)
        self.store.down = False

    def cancel(self) -> bool:
        return cancel("k", store=self.store, scheduler=self.queue).already_delivered


def test_cancel_does_not_call_a_release_claimed_but_unfinished_delivered() -> None:
    world = World()
    world.die_mid_release()
    with pytest.raises(ClaimInProgressError):
        world.cancel()
    world.clock.advance(LEASE * 10)  # the lease ended: still nobody knows if it went out
    with pytest.raises(ClaimInProgressError):
        world.cancel()
    # The task's next attempt takes the release over and publishes: now it is delivered.
    assert world.release(2) is RelayOutcome.PUBLISHED
    assert [m.data for m in world.sink.on(FINAL)] == [b"payload"]
    assert world.cancel() is True


def test_a_message_the_relay_gives_up_on_was_never_called_delivered() -> None:
    world = World()
    world.die_mid_release()
    answers: list[bool | None] = []  # None: "try again" (ClaimInProgressError)

    def ask() -> None:
        try:
            answers.append(world.cancel())
        except ClaimInProgressError:  # its caller tries again later
            answers.append(None)

    ask()
    # The store goes down again, and Cloud Tasks refuses the hand-over's task: the relay's
    # last attempt hands the message to the operator, unpublished.
    world.store.down = True
    with pytest.raises(TransientError):
        world.release(2)
    assert world.release(MAX_ATTEMPTS) is RelayOutcome.RESCHEDULED
    world.store.down = False
    ask()
    assert world.sink.on(FINAL) == []
    # asked 2 times, never "delivered" about a message that never went out
    assert len(answers) == 2 and True not in answers
