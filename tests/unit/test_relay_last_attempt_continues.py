"""On Cloud Tasks' last attempt with its store still down, the relay hands the message to a task
of its own (the next hop: same body and due time, a fresh retry budget) instead of
dead-lettering it: once the store is back that task releases it - or finds it released.

Dead-lettering at once put messages already delivered on the dead-letter topic (the
simulation's ``relay_store_outage``, "both an effect and dead-lettered": seeds 614, 619, 938,
1209, 1272 of ``--enable relay_store_outage``): a task whose create had timed out after Cloud
Tasks applied it outlived the message's release by ingress (or a consumer's retry), and the
relay, unable to read the release record, could not tell.

The relay runs on the project's in-memory store behind an outage switch, with an in-process
queue implementing our ``HopScheduler`` protocol through the real ``plan_task`` (task names
fixed by key and hop, so a create of an existing name is AlreadyExists: "already scheduled").
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.delay.payload import DelayedMessage
from pubsub_toolkit.delay.relay import Relay, RelayOutcome
from pubsub_toolkit.delay.scheduler import plan_task
from pubsub_toolkit.errors import PermanentError, TransientError
from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from tests.support.sinks import RecordingSink
from tests.unit.test_relay_last_attempt import SwitchableStore

FINAL, DLQ = "projects/p/topics/final", "projects/p/topics/dlq"
MAX_ATTEMPTS = 3


class Queue:
    """Tasks by name, as Cloud Tasks keeps them; ``refusing`` refuses every create (as the
    scheduler maps InvalidArgument: known not made)."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.tasks: dict[str, bytes] = {}
        self.refusing = False

    def schedule(
        self, message: OutboundMessage, deliver_at: datetime, dedup_key: str, hop: int = 0
    ) -> str:
        if self.refusing:
            raise PermanentError("schedule_rejected", "injected: Cloud Tasks refused it")
        plan = plan_task(message, deliver_at, dedup_key, hop, now=self.clock.now())
        self.tasks.setdefault(plan.task_id, plan.body)  # an existing name: AlreadyExists
        return plan.task_id


class World:
    def __init__(self) -> None:
        self.clock = ManualClock(datetime(2030, 1, 1, tzinfo=UTC))
        self.memory = MemoryDedupStore(self.clock)
        self.store = SwitchableStore(self.memory)
        self.sink = RecordingSink()
        self.queue = Queue(self.clock)

    def relay(self) -> Relay:
        """One relay instance (each knows only what it published itself)."""
        return Relay(
            store=self.store,
            sink=self.sink,
            final_topic=FINAL,
            dead_letter_topic=DLQ,
            lease=timedelta(seconds=30),
            ttl=timedelta(days=8),
            scheduler=self.queue,
            clock=self.clock,
            task_max_attempts=MAX_ATTEMPTS,
        )

    def every_attempt_fails(self, relay: Relay, body: bytes) -> RelayOutcome:
        """The store down through the task's whole budget; the outcome of the attempt that
        answered 2xx (the last but one, when it handed the message over; else the last)."""
        self.store.down = True
        for attempt in range(1, MAX_ATTEMPTS - 1):
            with pytest.raises(TransientError):
                relay.release(body, attempt=attempt)
        try:
            outcome = relay.release(body, attempt=MAX_ATTEMPTS - 1).outcome
        except TransientError:  # not handed over: the last attempt settles it
            outcome = relay.release(body, attempt=MAX_ATTEMPTS).outcome
        self.store.down = False
        return outcome


def body(key: str = "k") -> bytes:
    message = OutboundMessage(b"payload", {"dedup_key": key})
    return DelayedMessage(message, key, datetime(2030, 1, 1, tzinfo=UTC)).to_json()


def test_a_message_released_elsewhere_is_not_dead_lettered_by_a_task_that_outlived_it() -> None:
    world = World()
    # Another instance released it (as ingress does a message already due), recorded in the
    # store; a copy of its task - a create that timed out once applied - is still queued.
    assert world.relay().release(body(), attempt=1).outcome is RelayOutcome.PUBLISHED
    orphan = world.relay()
    assert world.every_attempt_fails(orphan, body()) is RelayOutcome.RESCHEDULED
    assert world.sink.on(DLQ) == []
    # The hand-over task runs once the store is back: the release record answers.
    [(_, continued)] = world.queue.tasks.items()
    assert DelayedMessage.from_json(continued).hop == 1
    assert orphan.release(continued, attempt=1).outcome is RelayOutcome.DUPLICATE
    assert len(world.sink.on(FINAL)) == 1 and world.sink.on(DLQ) == []


def test_a_message_never_released_is_released_by_the_next_task_once_the_store_is_back() -> None:
    world = World()
    relay = world.relay()
    assert world.every_attempt_fails(relay, body()) is RelayOutcome.RESCHEDULED
    # A second run of the same last attempt (Cloud Tasks runs a task twice at times) makes no
    # second task: the name is the key's and the hop's.
    world.store.down = True
    assert relay.release(body(), attempt=MAX_ATTEMPTS).outcome is RelayOutcome.RESCHEDULED
    world.store.down = False
    [continued] = world.queue.tasks.values()
    assert relay.release(continued, attempt=1).outcome is RelayOutcome.PUBLISHED
    [published] = world.sink.on(FINAL)
    assert (published.data, published.attributes["dedup_key"]) == (b"payload", "k")
    assert world.sink.on(DLQ) == []


def test_when_no_next_task_can_be_made_the_last_attempt_dead_letters() -> None:
    world = World()
    world.queue.refusing = True
    assert world.every_attempt_fails(world.relay(), body()) is RelayOutcome.DEAD_LETTERED
    [dead] = world.sink.on(DLQ)
    assert dead.attributes["error_reason"] == "relay_store_unavailable"
    assert world.sink.on(FINAL) == []
