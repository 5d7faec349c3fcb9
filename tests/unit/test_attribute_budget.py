"""A message ingress accepts is never refused later for an attribute the toolkit adds itself
(issue 24, defect 10), and the settings that keep the contract's limits (DEDUP_TTL,
PUBSUB_TOOLKIT_CONSUMER_ID).

Ingress, the consumer's processor (``RetryLater``), the real task plan and the real Relay run on
the in-memory store with a recording sink (our own protocols), as in ``test_retry_later.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit import tracing
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.retry import retry_copy
from pubsub_toolkit.core.ingress import IngressOutcome
from pubsub_toolkit.dead_letters.send import DLQ_WRAPPED, DeadLetterer, dead_letter_copy
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.delay.relay import Relay, RelayOutcome
from pubsub_toolkit.delay.scheduler import TaskPlan, plan_task
from pubsub_toolkit.envelope import check_publishable
from pubsub_toolkit.errors import ConfigurationError, RetryLater
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

FINAL, DLQ = "projects/p/topics/final", "projects/p/topics/dlq"
CONSUMER = "consumer-a"


@dataclass
class InProcessTasks:
    """Our own scheduler: the production task plan, released through a Relay when due."""

    clock: ManualClock
    tasks: dict[str, TaskPlan] = field(default_factory=dict)
    relay: Relay | None = None

    def schedule(
        self, message: OutboundMessage, deliver_at: datetime, dedup_key: str, hop: int = 0
    ) -> str:
        plan = plan_task(message, deliver_at, dedup_key, hop, now=self.clock.now())
        self.tasks.setdefault(plan.task_id, plan)
        return plan.task_id

    def run_due(self) -> list[RelayOutcome]:
        assert self.relay is not None
        due = [t for t, p in self.tasks.items() if p.schedule_time <= self.clock.now()]
        return [self.relay.release(self.tasks.pop(t).body).outcome for t in due]


def later(message: Message) -> None:
    raise RetryLater(timedelta(minutes=5), "not yet")


@dataclass
class Path:
    """Ingress, a consumer whose handler always asks for a retry, and the delay path."""

    clock: ManualClock
    sink: RecordingSink
    ingress: Ingress
    processor: MessageProcessor
    tasks: InProcessTasks


@pytest.fixture
def path() -> Path:
    clock, sink = ManualClock(datetime(2030, 1, 1, tzinfo=UTC)), RecordingSink()
    store = MemoryDedupStore(clock)
    tasks = InProcessTasks(clock)
    tasks.relay = Relay(
        store=store,
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(minutes=1),
        ttl=timedelta(days=8),
        scheduler=tasks,
        clock=clock,
    )
    ingress = Ingress(
        store=store,
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(minutes=1),
        ttl=timedelta(days=8),
        scheduler=tasks,
        clock=clock,
    )
    dedup = IdempotentProcessor(
        store, namespace=CONSUMER, lease=timedelta(minutes=1), ttl=timedelta(days=8), clock=clock
    )
    processor = MessageProcessor(
        handler=later,
        dedup=dedup,
        gate=FifoGate(MemoryFifoStore(), consumer=CONSUMER, handler=later, clock=clock),
        dead_letters=DeadLetterer(sink, DLQ, DecisionLog(CONSUMER)),
        scheduler=tasks,
        max_attempts=5,
        clock=clock,
    )
    return Path(clock, sink, ingress, processor, tasks)


def producer_message(own: int, n: int, **contract: str) -> Message:
    """``own`` attributes of the producer's own, plus the contract's ``contract``."""
    attributes = {f"a{i:03}": "v" for i in range(own)} | contract
    return Message(b"payload", attributes, message_id=f"m{n}")


@pytest.mark.parametrize(
    "contract",
    [{}, {attr.DEDUP_KEY: "k"}, {attr.DEDUP_KEY: "k", attr.DELAY_SECONDS: "0"}],
    ids=["no key", "own key", "own key and delay"],
)
def test_every_message_ingress_accepts_can_retry_later_and_be_dead_lettered_unwrapped(
    path: Path, contract: dict[str, str]
) -> None:
    accepted = []
    for own in range(80, attr.MAX_ATTRIBUTES + 1):
        keyed = {k: (f"{v}-{own}" if k == attr.DEDUP_KEY else v) for k, v in contract.items()}
        result = path.ingress.handle(producer_message(own, own, **keyed))
        if result.outcome is IngressOutcome.DEAD_LETTERED:
            assert result.detail == attr.REASON_TOO_MANY_ATTRIBUTES, own
            continue
        assert result.outcome is IngressOutcome.PUBLISHED, own
        accepted.append(own)
        delivered = path.sink.on(FINAL)[-1]
        message = Message(delivered.data, delivered.attributes, message_id=f"f{own}")
        # The consumer asks for a retry: scheduled, not dead-lettered too_many_attributes.
        assert path.processor.process(message) == "retry_scheduled", (own, path.sink.on(DLQ))
        path.clock.advance(timedelta(minutes=5))
        assert path.tasks.run_due() == [RelayOutcome.PUBLISHED], own
        retried = path.sink.on(FINAL)[-1]
        assert retried.attributes[attr.RETRY_ATTEMPT] == "2"
        # A replay's id and a dead-letter copy's reason fit too: the copy is not wrapped.
        replayed = {**retried.attributes, attr.REPLAY_ID: "12345"}
        check_publishable(retried.data, replayed)
        copy = dead_letter_copy(Message(retried.data, replayed), "fifo_poison", "x" * 2000)
        assert DLQ_WRAPPED not in copy.attributes, own
    refused = [m.attributes[attr.ERROR_REASON] for m in path.sink.on(DLQ)]
    assert set(refused) == {attr.REASON_TOO_MANY_ATTRIBUTES}  # ingress's refusals, nothing later
    # Ingress keeps room for exactly what the toolkit may add: no fewer accepted than that.
    own_names = len(contract.keys() - attr.ADDED_AFTER_INGRESS.keys() - {attr.DELAY_SECONDS})
    largest = attr.MAX_ATTRIBUTES - len(attr.ADDED_AFTER_INGRESS) - own_names
    assert accepted == list(range(80, largest + 1))


def test_the_refusal_names_the_room_the_toolkit_keeps(path: Path) -> None:
    result = path.ingress.handle(producer_message(95, 1))
    assert (result.outcome, result.detail) == (
        IngressOutcome.DEAD_LETTERED,
        attr.REASON_TOO_MANY_ATTRIBUTES,
    )
    [dead] = path.sink.on(DLQ)
    assert "95 attributes of the producer's own; at most 88" in dead.attributes[attr.ERROR_DETAIL]


def test_the_reserved_room_covers_every_name_and_byte_the_toolkit_adds() -> None:
    added = attr.ADDED_AFTER_INGRESS
    # The trace context a forwarding hop writes is reserved under the names tracing uses.
    assert {tracing.TRACEPARENT, tracing.TRACESTATE} <= added.keys()
    for name, most in added.items():
        assert len(name.encode()) <= attr.MAX_ATTRIBUTE_KEY_BYTES
        assert most <= attr.MAX_ATTRIBUTE_VALUE_BYTES, name
    reserved = attr.MAX_REQUEST_BYTES - attr.MAX_MESSAGE_BYTES
    assert sum(len(name.encode()) + most for name, most in added.items()) <= reserved
    # The longest consumer id the settings accept still fits its retry copy.
    consumer = ConsumerSettings(consumer_id="c" * 1024).consumer_id
    copy = retry_copy(Message(b"x", {attr.DEDUP_KEY: "k"}), "k", consumer, 99_999_999)
    check_publishable(copy.data, copy.attributes)


def test_a_consumer_id_that_cannot_travel_as_an_attribute_is_refused() -> None:
    with pytest.raises(ConfigurationError) as caught:
        ConsumerSettings.from_env({"PUBSUB_TOOLKIT_CONSUMER_ID": "é" * 513})
    assert str(caught.value) == (
        "consumer_id (PUBSUB_TOOLKIT_CONSUMER_ID) is 1026 bytes: at most 1024 (it is a message "
        "attribute's "
        "value on RetryLater copies)"
    )


BASE = {
    "GOOGLE_CLOUD_PROJECT": "p",
    "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
    "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dlq",
}


@pytest.mark.parametrize("seconds", ["3600", "604800"])
def test_a_dedup_ttl_within_the_redelivery_window_is_refused_naming_the_variable(
    seconds: str,
) -> None:
    expected = (
        f"dedup_ttl (PUBSUB_TOOLKIT_DEDUP_TTL_SECONDS) is {seconds} s: it must exceed 604800 s (7 "
        "days, how "
        "long Pub/Sub redelivers an unacked message), or a late redelivery would run again; "
        "the default is 8 days"
    )
    builds: list[Callable[[], Settings]] = [
        lambda: Settings.from_env({**BASE, "PUBSUB_TOOLKIT_DEDUP_TTL_SECONDS": seconds}),
        lambda: Settings(
            project="p",
            final_topic="final",
            dead_letter_topic="dlq",
            dedup_ttl=timedelta(seconds=int(seconds)),
        ),
    ]
    for build in builds:
        with pytest.raises(ConfigurationError) as caught:
            build()
        assert str(caught.value) == expected


def test_a_dedup_ttl_beyond_the_window_is_accepted() -> None:
    settings = Settings.from_env({**BASE, "PUBSUB_TOOLKIT_DEDUP_TTL_SECONDS": "604801"})
    assert settings.dedup_ttl == timedelta(seconds=604801)


def test_a_message_with_every_toolkit_attribute_is_dead_lettered_as_it_is() -> None:
    # The fullest message a consumer can dead-letter: the producer's 88, ingress's stamps, a
    # delay, trace context, a RetryLater count and a replay id. Its copy adds only the reason.
    fullest = {f"a{i:03}": "v" for i in range(88)} | {
        name: "x"
        for name in attr.ADDED_AFTER_INGRESS.keys() - {attr.ERROR_REASON, attr.ERROR_DETAIL}
    }
    fullest[attr.DELIVER_AT] = "2030-01-01T00:00:00Z"
    copy = dead_letter_copy(Message(b"data", fullest, message_id="m1"), "fifo_poison", "failed")
    assert DLQ_WRAPPED not in copy.attributes
    assert copy.data == b"data" and len(copy.attributes) == attr.MAX_ATTRIBUTES
    check_publishable(copy.data, copy.attributes)
