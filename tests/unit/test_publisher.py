"""Publisher: contract attributes stamped, ordering key, one block per batch, argument errors."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.envelope import parse_envelope
from pubsub_toolkit.errors import TransientError
from pubsub_toolkit.message import Message
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.stores.counters.base import SequenceBlock
from pubsub_toolkit.stores.counters.memory import MemorySequenceCounter
from tests.support.sinks import RecordingSink

TOPIC = "projects/p/topics/origin"
NOW = datetime(2030, 1, 1, tzinfo=UTC)


class CountingCounter:
    """A MemorySequenceCounter that records every reserve call (one call = one round trip)."""

    def __init__(self) -> None:
        self.inner = MemorySequenceCounter()
        self.calls: list[tuple[str, int]] = []

    def reserve(self, group: str, count: int = 1) -> SequenceBlock:
        self.calls.append((group, count))
        return self.inner.reserve(group, count)

    def current(self, group: str) -> int:
        return self.inner.current(group)


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def counter() -> CountingCounter:
    return CountingCounter()


@pytest.fixture
def publisher(sink: RecordingSink, counter: CountingCounter) -> Publisher:
    return Publisher(sink, TOPIC, counter)


def test_plain_publish_keeps_attributes_and_has_no_ordering_key(
    publisher: Publisher, sink: RecordingSink, counter: CountingCounter
) -> None:
    caller_attrs = {"kind": "invoice"}
    message_id = publisher.publish(b"data", caller_attrs).result()
    [message] = sink.on(TOPIC)
    assert message_id == "1"
    assert message.data == b"data"
    assert dict(message.attributes) == {"kind": "invoice"}
    assert message.ordering_key == ""
    assert counter.calls == []
    assert caller_attrs == {"kind": "invoice"}  # the caller's mapping is not modified


def test_fifo_publish_numbers_the_group_and_sets_the_ordering_key(
    publisher: Publisher, sink: RecordingSink
) -> None:
    for _ in range(3):
        publisher.publish(b"x", {"k": "v"}, fifo_group="orders/42")
    publisher.publish(b"x", fifo_group="other")
    messages = sink.on(TOPIC)
    assert [(m.attributes[attr.FIFO_GROUP], m.attributes[attr.FIFO_SEQ]) for m in messages] == [
        ("orders/42", "1"),
        ("orders/42", "2"),
        ("orders/42", "3"),
        ("other", "1"),
    ]
    assert [m.ordering_key for m in messages] == ["orders/42"] * 3 + ["other"]
    assert messages[0].attributes["k"] == "v"


def test_dedup_key_and_deliver_at_are_stamped_in_contract_format(
    publisher: Publisher, sink: RecordingSink
) -> None:
    due = datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=2)))
    publisher.publish(b"x", dedup_key="order-7", deliver_at=due)
    [message] = sink.on(TOPIC)
    assert message.attributes[attr.DEDUP_KEY] == "order-7"
    assert message.attributes[attr.DELIVER_AT] == "2030-01-02T01:04:05.000006Z"
    assert attr.DELAY_SECONDS not in message.attributes


@pytest.mark.parametrize(
    ("delay", "expected"),
    [
        (timedelta(seconds=90), "90"),
        (timedelta(milliseconds=1500), "1.5"),
        (timedelta(microseconds=1), "0.000001"),
        (timedelta(0), "0"),
        (timedelta(days=40), "3456000"),
    ],
)
def test_delay_becomes_delay_seconds(
    publisher: Publisher, sink: RecordingSink, delay: timedelta, expected: str
) -> None:
    publisher.publish(b"x", delay=delay)
    [message] = sink.on(TOPIC)
    assert message.attributes[attr.DELAY_SECONDS] == expected
    assert attr.DELIVER_AT not in message.attributes


def test_published_attributes_parse_back_under_the_contract(
    publisher: Publisher, sink: RecordingSink
) -> None:
    due = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    publisher.publish(b"payload", {"a": "b"}, fifo_group="g", dedup_key="k1", deliver_at=due)
    [out] = sink.on(TOPIC)
    envelope = parse_envelope(
        Message(out.data, out.attributes, message_id="9"), now=datetime(2030, 1, 1, tzinfo=UTC)
    )
    assert (envelope.fifo_group, envelope.fifo_seq) == ("g", 1)
    assert (envelope.dedup_key, envelope.deliver_at) == ("k1", due)


def test_batch_reserves_one_block_and_publishes_in_order(
    publisher: Publisher, sink: RecordingSink, counter: CountingCounter
) -> None:
    publisher.publish(b"first", fifo_group="g")
    items = [(b"a", {"n": "1"}), (b"b", {"n": "2", attr.DEDUP_KEY: "kb"}), (b"c", {})]
    ids = publisher.publish_batch("g", items)
    assert counter.calls == [("g", 1), ("g", 3)]  # one counter round trip for the batch
    messages = sink.on(TOPIC)[1:]
    assert ids == ["2", "3", "4"]
    assert [m.data for m in messages] == [b"a", b"b", b"c"]
    assert [m.attributes[attr.FIFO_SEQ] for m in messages] == ["2", "3", "4"]
    assert {m.ordering_key for m in messages} == {"g"}
    assert messages[1].attributes[attr.DEDUP_KEY] == "kb"
    assert messages[0].attributes["n"] == "1"


def test_empty_batch_reserves_nothing(publisher: Publisher, counter: CountingCounter) -> None:
    assert publisher.publish_batch("g", []) == []
    assert counter.calls == []


def test_failed_publish_leaves_a_logged_gap_and_raises(
    publisher: Publisher,
    sink: RecordingSink,
    counter: CountingCounter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink.fail_next = 1
    with caplog.at_level(logging.WARNING), pytest.raises(TransientError):
        publisher.publish(b"x", fifo_group="g").result()
    assert "fifo_seq 1" in caplog.text
    assert counter.current("g") == 1  # the number is spent, never reused
    publisher.publish(b"x", fifo_group="g")
    assert [m.attributes[attr.FIFO_SEQ] for m in sink.on(TOPIC)] == ["2"]


NAIVE = datetime(2030, 1, 1)  # noqa: DTZ001 - deliberately naive, to test the rejection
AWARE = datetime(2030, 1, 1, tzinfo=UTC)

INVALID_PUBLISHES: list[tuple[str, dict[str, Any], str]] = [
    ("both due times", {"delay": timedelta(1), "deliver_at": AWARE}, "not both"),
    ("naive deliver_at", {"deliver_at": NAIVE}, "timezone-aware"),
    ("negative delay", {"delay": timedelta(seconds=-1)}, "negative"),
    ("blank group", {"fifo_group": "  "}, "non-blank"),
    ("empty group", {"fifo_group": ""}, "non-blank"),
    ("group too long", {"fifo_group": "é" * 513}, "1024"),
    ("seq attribute", {"attributes": {attr.FIFO_SEQ: "5"}}, "set by the Publisher"),
    ("group attribute", {"attributes": {attr.FIFO_GROUP: "g"}}, "set by the Publisher"),
    ("dedup key twice", {"attributes": {attr.DEDUP_KEY: "a"}, "dedup_key": "b"}, "both"),
    ("due time twice", {"attributes": {attr.DELAY_SECONDS: "5"}, "deliver_at": AWARE}, "both"),
    ("empty dedup key", {"dedup_key": " "}, "invalid_dedup_key"),
    ("empty data", {"data": b""}, "empty_data"),
    ("bad delay attribute", {"attributes": {attr.DELAY_SECONDS: "soon"}}, "invalid_delay"),
    (
        "too many attributes",
        {"attributes": {f"a{i}": "v" for i in range(95)}, "fifo_group": "g"},
        "too_many_attributes",
    ),
]


@pytest.mark.parametrize(
    ("kwargs", "message"), [c[1:] for c in INVALID_PUBLISHES], ids=[c[0] for c in INVALID_PUBLISHES]
)
def test_invalid_arguments_raise_before_reserving_or_publishing(
    publisher: Publisher,
    sink: RecordingSink,
    counter: CountingCounter,
    kwargs: dict[str, Any],
    message: str,
) -> None:
    kwargs = dict(kwargs)
    data = kwargs.pop("data", b"x")
    attributes = kwargs.pop("attributes", None)
    kwargs.setdefault("fifo_group", "g")  # a FIFO publish, so a gap would show in the counter
    with pytest.raises(ValueError, match=message):
        publisher.publish(data, attributes, **kwargs)
    assert counter.calls == []
    assert sink.on(TOPIC) == []


@pytest.mark.parametrize(
    ("data", "attributes"), [("text", None), (b"x", {"n": 1}), (b"x", {1: "v"})]
)
def test_wrong_types_raise_type_error(
    publisher: Publisher, sink: RecordingSink, data: Any, attributes: Mapping[Any, Any] | None
) -> None:
    with pytest.raises(TypeError):
        publisher.publish(data, attributes, fifo_group="g")
    assert sink.on(TOPIC) == []


def test_fifo_group_without_a_counter_is_rejected(sink: RecordingSink) -> None:
    publisher = Publisher(sink, TOPIC)
    with pytest.raises(ValueError, match="needs a sequence counter"):
        publisher.publish(b"x", fifo_group="g")
    with pytest.raises(ValueError, match="needs a sequence counter"):
        publisher.publish_batch("g", [(b"x", {})])
    assert publisher.publish(b"x").result() == "1"  # plain publishing needs no counter
    assert len(sink.on(TOPIC)) == 1


def test_one_invalid_batch_item_rejects_the_whole_batch(
    publisher: Publisher, sink: RecordingSink, counter: CountingCounter
) -> None:
    items = [(b"ok", {}), (b"bad", {attr.DELIVER_AT: "tomorrow"}), (b"ok", {})]
    with pytest.raises(ValueError, match="invalid_deliver_at"):
        publisher.publish_batch("g", items)
    assert counter.calls == []
    assert sink.on(TOPIC) == []


def test_empty_topic_is_rejected(sink: RecordingSink) -> None:
    with pytest.raises(ValueError, match="topic"):
        Publisher(sink, "")


# --- end_of_group: a group's last message -----------------------------------------------------


def test_end_of_group_stamps_fifo_end_on_the_numbered_message(
    publisher: Publisher, sink: RecordingSink
) -> None:
    publisher.publish(b"first", fifo_group="g")
    publisher.publish(b"last", fifo_group="g", end_of_group=True)
    first, last = sink.on(TOPIC)
    assert attr.FIFO_END not in first.attributes
    assert last.attributes[attr.FIFO_END] == "true" and last.attributes[attr.FIFO_SEQ] == "2"
    envelope = parse_envelope(Message(last.data, last.attributes, message_id="m"), now=NOW)
    assert envelope.fifo_end  # what ingress will read


def test_end_of_group_without_a_group_is_refused_before_anything_is_published(
    publisher: Publisher, sink: RecordingSink, counter: CountingCounter
) -> None:
    with pytest.raises(ValueError, match="needs fifo_group"):
        publisher.publish(b"x", end_of_group=True)
    assert sink.on(TOPIC) == [] and counter.calls == []


def test_end_of_group_must_be_a_bool(publisher: Publisher, sink: RecordingSink) -> None:
    with pytest.raises(TypeError, match="bool"):
        publisher.publish(b"x", fifo_group="g", end_of_group="false")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bool"):
        publisher.publish_batch("g", [(b"x", {})], end_of_group=1)  # type: ignore[arg-type]
    assert sink.on(TOPIC) == []


def test_fifo_end_by_hand_is_refused_in_favour_of_the_keyword(
    publisher: Publisher, sink: RecordingSink, counter: CountingCounter
) -> None:
    with pytest.raises(ValueError, match="end_of_group=True"):
        publisher.publish(b"x", {attr.FIFO_END: "true"}, fifo_group="g")
    with pytest.raises(ValueError, match="end_of_group=True"):
        publisher.publish_batch("g", [(b"x", {attr.FIFO_END: "true"})])
    assert sink.on(TOPIC) == [] and counter.calls == []


def test_a_batch_with_end_of_group_marks_only_its_last_item(
    publisher: Publisher, sink: RecordingSink, counter: CountingCounter
) -> None:
    publisher.publish_batch("g", [(b"a", {}), (b"b", {}), (b"c", {})], end_of_group=True)
    assert counter.calls == [("g", 3)]
    marks = [m.attributes.get(attr.FIFO_END) for m in sink.on(TOPIC)]
    assert marks == [None, None, "true"]
    assert sink.on(TOPIC)[-1].attributes[attr.FIFO_SEQ] == "3"
    publisher.publish_batch("h", [(b"a", {}), (b"b", {})])
    assert all(attr.FIFO_END not in m.attributes for m in sink.on(TOPIC)[3:])


def test_an_empty_batch_cannot_end_a_group(publisher: Publisher, counter: CountingCounter) -> None:
    with pytest.raises(ValueError, match="has none"):
        publisher.publish_batch("g", [], end_of_group=True)
    assert counter.calls == []
