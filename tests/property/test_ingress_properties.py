"""Ingress end to end on hostile input: nothing lost - every delivery has exactly one fate.

With the in-memory store, a recording sink (our MessageSink) and a recording scheduler, every
delivery - random attributes and payloads, and raw junk events - ends as exactly one of
published to the final topic, scheduled, duplicate, or dead-lettered with a ``error_reason``;
``handle`` never raises (no transient fault is injected), and the counts add up:
``in == published + scheduled + duplicates + dead-lettered``. A second delivery of the same
input is never published, scheduled or dead-lettered again.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.core.ingress import IngressOutcome
from pubsub_toolkit.dead_letters.replay import REASON_FORGED_REPLAY
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from tests.property.strategies import CONTRACT_REASONS, attribute_maps, hostile_text, payloads
from tests.property.test_cloudevent_properties import events
from tests.support.sinks import RecordingSink

FINAL, DLQ = "projects/p/topics/final", "projects/p/topics/dlq"
NOW = datetime(2030, 1, 1, tzinfo=UTC)
REASONS = CONTRACT_REASONS | {
    "delayed_delivery_unavailable",
    "delay_too_long",
    REASON_FORGED_REPLAY,
}


class RecordingScheduler:
    def __init__(self) -> None:
        self.scheduled: list[tuple[OutboundMessage, datetime, str]] = []

    def schedule(self, message: OutboundMessage, deliver_at: datetime, dedup_key: str) -> str:
        self.scheduled.append((message, deliver_at, dedup_key))
        return f"task-{len(self.scheduled)}"


deliveries = st.lists(
    st.one_of(
        st.builds(
            lambda d, a, i: ("message", Message(d, a, message_id=i)),
            payloads,
            attribute_maps(),
            st.sampled_from(["1", "2", "3", ""]) | hostile_text,
        ),
        st.builds(lambda e: ("event", e), events),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=100)
@given(inputs=deliveries)
def test_every_delivery_is_published_scheduled_duplicate_or_dead_lettered(
    inputs: list[tuple[str, object]],
) -> None:
    clock = ManualClock(NOW)
    sink, scheduler = RecordingSink(), RecordingScheduler()
    ingress = Ingress(
        store=MemoryDedupStore(clock),
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(days=1),
        scheduler=scheduler,
        clock=clock,
    )
    outcomes: list[IngressOutcome] = []
    routed_keys: set[str | None] = set()  # keys that reached final, a task or the dead letters
    for kind, value in inputs + inputs:  # every input delivered twice
        if kind == "message":
            assert isinstance(value, Message)
            result = ingress.handle(value)
        else:
            result = ingress.handle_event_data(value)
        outcomes.append(result.outcome)
        if result.outcome is IngressOutcome.DUPLICATE:
            # Only a key that was already routed may be dropped: nothing lost.
            assert result.dedup_key in routed_keys, result
        else:
            routed_keys.add(result.dedup_key)
        if result.outcome is IngressOutcome.DEAD_LETTERED:
            assert result.detail in REASONS, result.detail

    # Fillers stand for a FIFO number ingress forwards no message for (one dead-lettered, or a
    # renumbered duplicate): they are not deliveries of their own.
    fillers = [m for m in sink.on(FINAL) if attr.FIFO_FILLER in m.attributes]
    published = [m for m in sink.on(FINAL) if attr.FIFO_FILLER not in m.attributes]
    dead = sink.on(DLQ)
    # Count in = count out: every delivery has one outcome, and each routing left one trace.
    assert len(outcomes) == 2 * len(inputs)
    assert outcomes.count(IngressOutcome.PUBLISHED) == len(published)
    assert outcomes.count(IngressOutcome.SCHEDULED) == len(scheduler.scheduled)
    # A dead-lettered input is copied once; its redelivery reports the same fate, no 2nd copy.
    assert len(dead) <= outcomes.count(IngressOutcome.DEAD_LETTERED)
    assert len(published) + len(scheduler.scheduled) + len(dead) <= len(inputs)
    assert len(fillers) <= len(dead) + outcomes.count(IngressOutcome.DUPLICATE)
    for message in dead:
        assert message.attributes["error_reason"] in REASONS
    for message in published:
        assert message.attributes["dedup_key"]
        assert message.attributes["content_sha256"]
        # A producer's replay_id is never minted: such a message is dead-lettered as forged.
        assert attr.REPLAY_ID not in message.attributes
        assert not {attr.ERROR_REASON, attr.ERROR_DETAIL} & message.attributes.keys()
    for filler in fillers:
        assert filler.attributes[attr.FIFO_FILLER]
        assert attr.parse_fifo_seq(filler.attributes[attr.FIFO_SEQ]) >= 1
        assert filler.ordering_key == filler.attributes[attr.FIFO_GROUP]
    for _message, due, _key in scheduler.scheduled:
        assert due > NOW, "a due-now message was scheduled instead of published"
    # The second delivery of every input published and scheduled nothing more.
    assert not {IngressOutcome.PUBLISHED, IngressOutcome.SCHEDULED} & set(outcomes[len(inputs) :])
