"""Delayed delivery under faults: a failing relay, a task executed twice, skewed due times.

The full chain with a relay refusing each task's first two attempts is proven in
``tests/integration/test_delay.py`` (ingress -> Cloud Tasks emulator -> proxy -> relay ->
final). This adds, on the real Pub/Sub emulator and the Firestore emulator as the relay's store:

* **relay fails N times, then its answer is lost**: the publish fails (503) three times, then
  succeeds but Cloud Tasks never sees the 200 and runs the task again - and again, 8 times at
  once: **one** message on the final topic;
* **deliver_at skew** at ingress with the real scheduler on the Cloud Tasks emulator: a due time
  in the past (by seconds, days, centuries) is published at once - the contract does not
  dead-letter late messages; beyond the 365-day limit it is dead-lettered with
  ``delay_too_long``; beyond Cloud Tasks' 30-day horizon but within the limit it is scheduled
  at the horizon and the relay hops it (a new task) instead of publishing early;
* **clock skew**: a producer whose clock runs ahead gets its message scheduled, never delivered
  early; one whose clock runs behind gets it now; ``delay_seconds`` is relative, so immune; a
  relay whose clock says the task fired early by more than a moment re-schedules it.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from google.cloud import firestore, pubsub_v1, tasks_v2

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.core.ingress import IngressOutcome
from pubsub_toolkit.delay.auth import AppEngineQueueAuthenticator
from pubsub_toolkit.delay.payload import DelayedMessage
from pubsub_toolkit.delay.relay import Relay, RelayOutcome
from pubsub_toolkit.delay.scheduler import (
    HORIZON,
    REASON_DELAY_TOO_LONG,
    CloudTasksScheduler,
    HttpTarget,
    tasks_client,
)
from pubsub_toolkit.errors import TransientError
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.producer.sink import PubSubSink
from pubsub_toolkit.stores.dedup.firestore import FirestoreDedupStore
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit_local.tasks_emulator import CloudTasksEmulator
from pubsub_toolkit_local.topology import drain
from tests.conftest import repo_root
from tests.support.sinks import RecordingSink

FINAL, DLQ = "projects/p/topics/final", "projects/p/topics/dlq"
QUEUE = "projects/p/locations/l/queues/q"


def _relay_app(relay: Relay) -> Any:
    spec = importlib.util.spec_from_file_location(
        "relay_main", repo_root() / "appengine/relay/main.py"
    )
    assert spec is not None and spec.loader is not None
    module: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.create_app(relay=relay, authenticator=AppEngineQueueAuthenticator("q"))


class FailingFirst:
    """A MessageSink that refuses the first ``n`` publishes (transient), then forwards."""

    def __init__(self, sink: PubSubSink, n: int) -> None:
        self._sink, self.left = sink, n
        self._lock = threading.Lock()

    def publish(self, topic: str, message: OutboundMessage) -> str:
        with self._lock:
            if self.left > 0:
                self.left -= 1
                raise TransientError("injected: Pub/Sub unavailable")
        return self._sink.publish(topic, message)


@pytest.mark.usefixtures("firestore_emulator")
def test_relay_failing_then_executed_again_and_again_publishes_once(
    pubsub_emulator: str, project_id: str
) -> None:
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    final = publisher.create_topic(name=f"projects/{project_id}/topics/final").name
    dlq = publisher.create_topic(name=f"projects/{project_id}/topics/dlq").name
    final_sub = subscriber.create_subscription(
        name=f"projects/{project_id}/subscriptions/final-sub", topic=final
    ).name
    sink = PubSubSink(publisher)
    relay = Relay(
        store=FirestoreDedupStore(firestore.Client(project=project_id)),
        sink=FailingFirst(sink, 3),
        final_topic=final,
        dead_letter_topic=dlq,
        lease=timedelta(seconds=30),
        ttl=timedelta(hours=1),
    )
    client = _relay_app(relay).test_client()
    body = DelayedMessage(
        OutboundMessage(b"due", {"dedup_key": "task-1", "k": "v"}, ordering_key=""),
        "task-1",
        datetime.now(UTC) - timedelta(seconds=1),
    ).to_json()

    def run_task() -> int:
        return int(
            client.post("/release", data=body, headers={"X-AppEngine-QueueName": "q"}).status_code
        )

    assert [run_task() for _ in range(3)] == [503, 503, 503]  # Cloud Tasks retries each
    assert run_task() == 200  # published; pretend this answer was lost
    statuses: list[int] = []
    threads = [threading.Thread(target=lambda: statuses.append(run_task())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    # A copy that met the first one's live claim answers 503 and is retried: still no 2nd copy.
    assert set(statuses) <= {200, 503} and len(statuses) == 8
    while 503 in statuses:  # Cloud Tasks' retries of those, until they are answered 200
        statuses.remove(503)
        assert run_task() == 200
    delivered = drain(final_sub, expected=1, timeout=20, quiet=1.5)
    assert [m.attributes["dedup_key"] for m in delivered] == ["task-1"]
    assert delivered[0].data == b"due" and delivered[0].attributes["k"] == "v"
    subscriber.close()


# --- due times and clocks -------------------------------------------------------------------


@pytest.fixture
def scheduler() -> Iterator[CloudTasksScheduler]:
    with CloudTasksEmulator() as emulator:
        client = tasks_client(emulator.address)
        client.create_queue(parent="projects/p/locations/l", queue=tasks_v2.Queue(name=QUEUE))
        client.pause_queue(name=QUEUE)  # inspect tasks; dispatch nothing
        yield CloudTasksScheduler(
            client, queue=QUEUE, target=HttpTarget("http://127.0.0.1:9/release", "i@p", "a")
        )


def _ingress(scheduler: CloudTasksScheduler, sink: RecordingSink) -> Ingress:
    return Ingress(
        store=MemoryDedupStore(),
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(hours=1),
        scheduler=scheduler,
    )


def _relay(scheduler: CloudTasksScheduler, sink: RecordingSink, clock: ManualClock) -> Relay:
    """A relay whose clock the test sets (its idea of "now" when Cloud Tasks calls)."""
    return Relay(
        store=MemoryDedupStore(),
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(hours=1),
        scheduler=scheduler,
        clock=clock,
    )


def _task_time(scheduler: CloudTasksScheduler, key: str, hop: int = 0) -> datetime:
    task = scheduler._client.get_task(name=scheduler.task_name(key, hop))
    return datetime.fromtimestamp(task.schedule_time.timestamp(), UTC)


def test_due_times_in_the_past_far_future_and_beyond_the_horizon(
    scheduler: CloudTasksScheduler,
) -> None:
    sink = RecordingSink()
    ingress = _ingress(scheduler, sink)
    now = datetime.now(UTC)

    def send(key: str, **attrs: str) -> IngressOutcome:
        return ingress.handle(Message(b"x", {"dedup_key": key, **attrs})).outcome

    past = {
        "1s-late": attr.format_time(now - timedelta(seconds=1)),
        "a-day-late": attr.format_time(now - timedelta(days=1)),
        "centuries-late": "0999-01-01T00:00:00Z",
        "offset-late": (now - timedelta(hours=1)).astimezone().isoformat(),
    }
    for key, due in past.items():
        assert send(key, deliver_at=due) is IngressOutcome.PUBLISHED, key
    assert [m.attributes["dedup_key"] for m in sink.on(FINAL)] == list(past)
    # What was forwarded still parses at the next hop (a year before 1000 included).
    for message in sink.on(FINAL):
        attr.parse_time(message.attributes["deliver_at"])

    assert send("too-far", deliver_at=attr.format_time(now + timedelta(days=400))) is (
        IngressOutcome.DEAD_LETTERED
    )
    [dead] = sink.on(DLQ)
    assert dead.attributes["error_reason"] == REASON_DELAY_TOO_LONG
    assert dead.attributes["dedup_key"] == "too-far"

    far = now + timedelta(days=45)
    assert send("beyond-horizon", deliver_at=attr.format_time(far)) is IngressOutcome.SCHEDULED
    parked = _task_time(scheduler, "beyond-horizon") - datetime.now(UTC)
    assert HORIZON - timedelta(minutes=1) < parked <= HORIZON, parked
    assert len(sink.on(FINAL)) == len(past), "a future message was published"

    # At the horizon the relay (its clock then) hops the message instead of publishing it.
    task = scheduler._client.get_task(
        request={"name": scheduler.task_name("beyond-horizon"), "response_view": 2}
    )
    relay_sink = RecordingSink()
    relay = _relay(scheduler, relay_sink, ManualClock(now + HORIZON))
    result = relay.release(task.http_request.body)
    assert (result.outcome, result.detail) == (RelayOutcome.RESCHEDULED, "hop 1")
    # The hop is a new task, again parked no later than the due time (the scheduler's own clock
    # is real here, so it parks at its horizon once more).
    assert datetime.now(UTC) < _task_time(scheduler, "beyond-horizon", hop=1) <= far
    assert relay_sink.published == {}


def test_clock_skew_never_delivers_early(scheduler: CloudTasksScheduler) -> None:
    sink = RecordingSink()
    ingress = _ingress(scheduler, sink)
    now = datetime.now(UTC)
    producer_ahead = now + timedelta(minutes=5)  # its "now" is our future
    producer_behind = now - timedelta(minutes=5)

    ahead = ingress.handle(
        Message(b"x", {"dedup_key": "ahead", "deliver_at": attr.format_time(producer_ahead)})
    )
    behind = ingress.handle(
        Message(
            b"x",
            {
                "dedup_key": "behind",
                "deliver_at": attr.format_time(producer_behind + timedelta(seconds=10)),
            },
        )
    )
    relative = ingress.handle(Message(b"x", {"dedup_key": "relative", "delay_seconds": "60"}))
    assert ahead.outcome is IngressOutcome.SCHEDULED  # never early by our clock
    assert abs(_task_time(scheduler, "ahead") - producer_ahead) < timedelta(milliseconds=1)
    assert behind.outcome is IngressOutcome.PUBLISHED
    assert relative.outcome is IngressOutcome.SCHEDULED
    due = _task_time(scheduler, "relative")
    assert now + timedelta(seconds=60) <= due <= datetime.now(UTC) + timedelta(seconds=60)
    assert [m.attributes["dedup_key"] for m in sink.on(FINAL)] == ["behind"]

    # Cloud Tasks fires a task while the relay's clock says it is 10 s early (beyond MAX_WAIT):
    # re-scheduled (hop), not published.
    relay_sink = RecordingSink()
    relay = _relay(scheduler, relay_sink, ManualClock(producer_ahead - timedelta(seconds=10)))
    body = DelayedMessage(OutboundMessage(b"x", {"dedup_key": "early"}), "early", producer_ahead)
    assert relay.release(body.to_json()).outcome is RelayOutcome.RESCHEDULED
    assert relay_sink.published == {}
