"""The last attempt's hand-over (``LastAttempt.continued``): what a create that failed means, and
where hand-overs end.

1. A create of the hand-over task that timed out *after* Cloud Tasks applied it was taken for a
   failure: the relay dead-lettered the message (a FIFO one with a filler), and the task it had
   made after all released it too - both delivered and dead-lettered (review finding). The
   task's name is fixed (key, FIFO number, hop), so a re-create answers AlreadyExists when an
   earlier one was applied; only a request refused as it is (InvalidArgument,
   FailedPrecondition: the same for every create of the name) is known not to have made it.
   The last attempt but one hands over already, and answers 5xx for a create in doubt: the
   last attempt creates the same name again. When the last attempt's tries too all end in
   doubt, the relay dead-letters nothing: the message goes to the operator whole in an ALERT
   (``relay_handover_unconfirmed``), naming the task.
2. Every transient failure of the last attempt hands over (the store, the final topic, Cloud
   Tasks, a release claimed by a run still going), but not for ever: once the message is
   ``DEDUP_TTL`` past its due time (the last attempt: ``HANDOVER_GRACE`` more, see
   :mod:`tests.unit.test_relay_handover_limit_doubt`) it is dead-lettered with its reason.

The relay runs on the project's in-memory store behind an outage switch, with an in-process
queue implementing our ``HopScheduler`` protocol through the real ``plan_task``.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.delay.last_attempt import (
    HANDOVER_GRACE,
    REASON_RETRIES_EXHAUSTED,
    REASON_STORE_UNAVAILABLE,
)
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
DEDUP_TTL = timedelta(days=8)
DUE = datetime(2030, 1, 1, tzinfo=UTC)


class Queue:
    """Tasks by name, as Cloud Tasks keeps them. ``faults`` are the next creates' fates:
    ``"timeout"`` applies the create and then fails it, ``"fail"`` fails it unapplied, and
    ``"refuse"`` refuses it (a PermanentError, as the scheduler maps InvalidArgument), and
    ``"quota"`` refuses this call only (RESOURCE_EXHAUSTED)."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.tasks: dict[str, bytes] = {}
        self.faults: list[str] = []

    def schedule(
        self, message: OutboundMessage, deliver_at: datetime, dedup_key: str, hop: int = 0
    ) -> str:
        fault = self.faults.pop(0) if self.faults else None
        if fault == "refuse":
            raise PermanentError("schedule_rejected", "injected: Cloud Tasks refused it")
        if fault == "fail":
            raise TransientError("injected: Cloud Tasks unavailable")
        if fault == "quota":  # as the scheduler wraps RESOURCE_EXHAUSTED
            raise TransientError("injected: quota") from gexc.ResourceExhausted("quota")
        plan = plan_task(message, deliver_at, dedup_key, hop, now=self.clock.now())
        self.tasks.setdefault(plan.task_id, plan.body)  # an existing name: AlreadyExists
        if fault == "timeout":
            raise TransientError("injected: the create timed out (it was applied)")
        return plan.task_id


class World:
    def __init__(self, sink: RecordingSink | None = None) -> None:
        self.clock = ManualClock(DUE)
        self.store = SwitchableStore(MemoryDedupStore(self.clock))
        self.sink = sink or RecordingSink()
        self.queue = Queue(self.clock)
        self.relay = Relay(
            store=self.store,
            sink=self.sink,
            final_topic=FINAL,
            dead_letter_topic=DLQ,
            lease=timedelta(seconds=30),
            ttl=DEDUP_TTL,
            scheduler=self.queue,
            clock=self.clock,
            task_max_attempts=MAX_ATTEMPTS,
        )

    def last_attempt(self, body: bytes, *, store_down: bool = True) -> RelayOutcome:
        """The task's last attempt (the earlier ones failed the same way)."""
        self.store.down = store_down
        try:
            return self.relay.release(body, attempt=MAX_ATTEMPTS).outcome
        finally:
            self.store.down = False

    def run_queued(self) -> list[RelayOutcome]:
        """Cloud Tasks runs every queued task once, the store back."""
        tasks, self.queue.tasks = list(self.queue.tasks.values()), {}
        return [self.relay.release(task, attempt=1).outcome for task in tasks]


def fifo_body(key: str = "k", seq: str = "2") -> bytes:
    attributes = {"dedup_key": key, "fifo_group": "g", "fifo_seq": seq}
    return DelayedMessage(OutboundMessage(b"payload", attributes, "g"), key, DUE).to_json()


def released(world: World) -> list[OutboundMessage]:
    """The final topic's messages, without fillers (a number handed to the operator is filled:
    tests/unit/test_relay_unconfirmed_handover_fills.py)."""
    return [m for m in world.sink.on(FINAL) if "fifo_filler" not in m.attributes]


def alerts(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, Any]]:
    decisions = [getattr(r, "decision", {}) for r in caplog.records]
    return [d for d in decisions if d.get("alert") == name]


def test_a_handover_whose_every_create_timed_out_after_it_was_applied_is_not_dead_lettered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World()
    world.queue.faults = ["timeout"] * 10  # every try: applied, then "failed"
    caplog.set_level("INFO")
    assert world.last_attempt(fifo_body()) is RelayOutcome.RESCHEDULED
    assert world.sink.on(DLQ) == [] and released(world) == []  # no letter; its number filled
    # The task was made after all: it releases the message - once, and only there.
    assert world.run_queued() == [RelayOutcome.PUBLISHED]
    [published] = released(world)
    assert (published.data, published.attributes["fifo_seq"]) == (b"payload", "2")
    assert world.sink.on(DLQ) == []
    # In doubt, the operator has the message whole and the task's name to look for.
    [alert] = alerts(caplog, "relay_handover_unconfirmed")
    assert base64.b64decode(alert["data_base64"]) == b"payload"
    assert alert["attributes"]["fifo_seq"] == "2"
    assert (alert["fifo_group"], alert["fifo_seq"], alert["hop"]) == ("g", "2", 1)
    assert (
        alert["task_id"]
        == plan_task(
            OutboundMessage(
                b"payload", {"dedup_key": "k", "fifo_group": "g", "fifo_seq": "2"}, "g"
            ),
            DUE,
            "k",
            1,
            now=DUE,
        ).task_id
    )


def test_the_last_attempt_but_one_answers_5xx_for_a_create_in_doubt_and_the_last_learns_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    world = World()
    caplog.set_level("INFO")
    world.store.down = True
    world.queue.faults = ["timeout"] * 3  # made, but no try could tell
    with pytest.raises(TransientError):  # kept alive: Cloud Tasks retries it once more
        world.relay.release(fifo_body(), attempt=MAX_ATTEMPTS - 1)
    assert len(world.queue.tasks) == 1 and world.sink.published == {}
    # The last attempt creates the same name: AlreadyExists, so the task is known made.
    assert world.last_attempt(fifo_body()) is RelayOutcome.RESCHEDULED
    assert alerts(caplog, "relay_handover_unconfirmed") == []
    assert [a["attempt"] for a in alerts(caplog, "relay_deferred")] == [MAX_ATTEMPTS]
    assert world.run_queued() == [RelayOutcome.PUBLISHED]
    assert len(world.sink.on(FINAL)) == 1 and world.sink.on(DLQ) == []


def test_the_last_attempt_but_one_hands_over_a_task_it_made() -> None:
    world = World()
    world.store.down = True
    result = world.relay.release(fifo_body(), attempt=MAX_ATTEMPTS - 1)
    assert (result.outcome, result.detail) == (RelayOutcome.RESCHEDULED, "hop 1")
    world.store.down = False
    assert world.run_queued() == [RelayOutcome.PUBLISHED]
    assert len(world.sink.on(FINAL)) == 1 and world.sink.on(DLQ) == []


def test_a_create_that_timed_out_is_learned_by_the_next_try_of_the_same_name() -> None:
    world = World()
    world.queue.faults = ["timeout"]  # applied; the second try finds it (AlreadyExists)
    assert world.last_attempt(fifo_body()) is RelayOutcome.RESCHEDULED
    assert world.run_queued() == [RelayOutcome.PUBLISHED]
    assert len(world.sink.on(FINAL)) == 1 and world.sink.on(DLQ) == []


def test_a_create_refused_outright_is_known_not_made_and_is_dead_lettered_with_its_filler() -> None:
    world = World()
    world.queue.faults = ["refuse"]  # (another try would be refused the same)
    assert world.last_attempt(fifo_body()) is RelayOutcome.DEAD_LETTERED
    [dead] = world.sink.on(DLQ)
    assert dead.attributes["error_reason"] == REASON_STORE_UNAVAILABLE
    [filler] = world.sink.on(FINAL)
    assert filler.attributes["fifo_filler"] == f"dead_lettered:{REASON_STORE_UNAVAILABLE}"
    assert world.queue.tasks == {}


def test_only_a_refused_request_says_a_create_was_not_applied() -> None:
    from pubsub_toolkit.delay.scheduler import create_refused

    assert create_refused(PermanentError("schedule_rejected", "InvalidArgument"))
    # A timeout may have been applied; a quota or permission refusal of this call says nothing
    # of an earlier create of the name (an earlier attempt's, a duplicate run's).
    assert not create_refused(TransientError("could not create task: 504 Deadline Exceeded"))
    assert not create_refused(TransientError("could not create task: 429 Quota exceeded"))
    assert not create_refused(RuntimeError("a bug in the client"))


def test_a_quota_refusal_after_an_earlier_attempts_create_in_doubt_is_not_dead_lettered() -> None:
    world = World()
    world.store.down = True
    world.queue.faults = ["timeout"] * 3  # the last attempt but one: made, unknown to it
    with pytest.raises(TransientError):
        world.relay.release(fifo_body(), attempt=MAX_ATTEMPTS - 1)
    world.queue.faults = ["quota"] * 3  # the last: refused for quota - says nothing of that
    assert world.last_attempt(fifo_body()) is RelayOutcome.RESCHEDULED
    assert world.sink.on(DLQ) == [] and released(world) == []
    assert world.run_queued() == [RelayOutcome.PUBLISHED]
    assert len(released(world)) == 1 and world.sink.on(DLQ) == []


def test_a_final_topic_outage_through_the_budget_hands_over_as_a_store_outage_does(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class FinalTopicDown(RecordingSink):
        down = True

        def publish(self, topic: str, message: OutboundMessage) -> str:
            if topic == FINAL and self.down:
                raise TransientError("injected: Pub/Sub unavailable")
            return super().publish(topic, message)

    sink = FinalTopicDown()
    world = World(sink)
    caplog.set_level("INFO")
    assert world.last_attempt(fifo_body(), store_down=False) is RelayOutcome.RESCHEDULED
    [alert] = alerts(caplog, "relay_deferred")
    assert "Pub/Sub unavailable" in caplog.records[-1].getMessage()
    assert alert["hop"] == 1
    sink.down = False
    assert world.run_queued() == [RelayOutcome.PUBLISHED]
    assert len(sink.on(FINAL)) == 1 and sink.on(DLQ) == []


@pytest.mark.parametrize(
    ("store_down", "reason"),
    [(True, REASON_STORE_UNAVAILABLE), (False, REASON_RETRIES_EXHAUSTED)],
)
def test_hand_overs_end_dedup_ttl_past_the_due_time_with_a_dead_letter(
    store_down: bool, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    class FinalTopicDown(RecordingSink):
        def publish(self, topic: str, message: OutboundMessage) -> str:
            if topic == FINAL and "fifo_filler" not in message.attributes:
                raise TransientError("injected: Pub/Sub unavailable")
            return super().publish(topic, message)

    world = World(FinalTopicDown())
    caplog.set_level("INFO")
    # Still handed over just inside DEDUP_TTL past due ...
    world.clock.advance(DEDUP_TTL - timedelta(minutes=1))
    assert world.last_attempt(fifo_body(), store_down=store_down) is RelayOutcome.RESCHEDULED
    [(_, handed)] = world.queue.tasks.items()
    assert DelayedMessage.from_json(handed).hop == 1
    # ... but that task's own last attempt, past it (and past the grace a last attempt has to
    # settle a create left in doubt inside it), dead-letters: not handed over for ever.
    world.clock.advance(timedelta(minutes=1) + HANDOVER_GRACE)
    world.queue.tasks = {}
    assert world.last_attempt(handed, store_down=store_down) is RelayOutcome.DEAD_LETTERED
    assert world.queue.tasks == {}
    [dead] = world.sink.on(DLQ)
    assert dead.attributes["error_reason"] == reason
    assert "DEDUP_TTL" in dead.attributes["error_detail"]
    [filler] = world.sink.on(FINAL)
    assert filler.attributes["fifo_filler"] == f"dead_lettered:{reason}"
    [gave_up] = alerts(caplog, "relay_gave_up")
    assert gave_up["reason"] == reason
