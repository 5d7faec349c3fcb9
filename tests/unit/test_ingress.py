"""Ingress decisions with the in-memory store and a recording sink (our own protocols)."""

from __future__ import annotations

import base64
import json
import logging
from datetime import timedelta

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.core.ingress import IngressOutcome
from pubsub_toolkit.dead_letters.send import DLQ_WRAPPED
from pubsub_toolkit.errors import TransientError
from pubsub_toolkit.ingress.pipeline import REASON_DELAY_UNAVAILABLE, Ingress
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore
from tests.support.sinks import RecordingSink

FINAL, DLQ = "projects/p/topics/final", "projects/p/topics/dlq"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def ingress(sink: RecordingSink, clock: ManualClock) -> Ingress:
    return Ingress(
        store=MemoryDedupStore(clock),
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(days=8),
        clock=clock,
    )


def test_new_message_is_published_with_stamped_attributes(
    ingress: Ingress, sink: RecordingSink
) -> None:
    sent = {"a": "1", "fifo_group": "g", "fifo_seq": "1"}
    result = ingress.handle(Message(b"hello", sent, message_id="7"))
    assert result.outcome is IngressOutcome.PUBLISHED
    [out] = sink.on(FINAL)
    assert out.data == b"hello"
    assert out.ordering_key == "g"
    assert out.attributes["dedup_key"] == "7"
    assert out.attributes["a"] == "1"
    assert out.attributes["content_sha256"] == attr.content_fingerprint(b"hello", sent)


def test_redelivery_and_republished_copy_are_duplicates(
    ingress: Ingress, sink: RecordingSink
) -> None:
    first = Message(b"x", {"dedup_key": "k"}, message_id="1")
    copy = Message(b"x", {"dedup_key": "k"}, message_id="2")  # re-published: new message_id
    assert ingress.handle(first).outcome is IngressOutcome.PUBLISHED
    assert ingress.handle(first).outcome is IngressOutcome.DUPLICATE
    assert ingress.handle(copy).outcome is IngressOutcome.DUPLICATE
    assert len(sink.on(FINAL)) == 1
    assert ingress.metrics.get("duplicate") == 2


def test_reused_key_with_other_content_is_dead_lettered_with_alert(
    ingress: Ingress, sink: RecordingSink, caplog: pytest.LogCaptureFixture
) -> None:
    ingress.handle(Message(b"x", {"dedup_key": "k"}, message_id="1"))
    with caplog.at_level(logging.ERROR, logger="pubsub_toolkit"):
        result = ingress.handle(Message(b"DIFFERENT", {"dedup_key": "k"}, message_id="2"))
    assert result.outcome is IngressOutcome.DEAD_LETTERED
    assert result.detail == attr.REASON_FINGERPRINT_MISMATCH
    [dead] = sink.on(DLQ)
    assert dead.data == b"DIFFERENT"
    assert dead.attributes["error_reason"] == attr.REASON_FINGERPRINT_MISMATCH
    assert any("ALERT" in r.getMessage() for r in caplog.records)
    assert ingress.metrics.get("mismatch") == 1


def test_contract_violation_is_dead_lettered_with_reason_and_original(
    ingress: Ingress, sink: RecordingSink
) -> None:
    result = ingress.handle(Message(b"x", {"deliver_at": "later", "keep": "me"}, message_id="5"))
    assert result.outcome is IngressOutcome.DEAD_LETTERED
    [dead] = sink.on(DLQ)
    assert dead.data == b"x"
    assert dead.attributes["keep"] == "me"
    assert dead.attributes["error_reason"] == attr.REASON_INVALID_DELIVER_AT
    assert "later" in dead.attributes["error_detail"]
    assert dead.attributes["origin_message_id"] == "5"
    assert sink.on(FINAL) == []


def test_oversized_attributes_are_wrapped_so_nothing_is_lost(
    ingress: Ingress, sink: RecordingSink
) -> None:
    big = "v" * 2000
    ingress.handle(Message(b"payload", {"big": big}, message_id="5"))
    [dead] = sink.on(DLQ)
    assert dead.attributes[DLQ_WRAPPED] == "json"
    assert dead.attributes["error_reason"] == attr.REASON_ATTRIBUTE_TOO_LARGE
    wrapped = json.loads(dead.data)
    assert base64.b64decode(wrapped["data_base64"]) == b"payload"
    assert wrapped["attributes"] == {"big": big}


def test_due_later_without_scheduler_is_dead_lettered_not_delivered_early(
    ingress: Ingress, sink: RecordingSink
) -> None:
    result = ingress.handle(Message(b"x", {"delay_seconds": "60"}, message_id="1"))
    assert result.outcome is IngressOutcome.DEAD_LETTERED
    assert result.detail == REASON_DELAY_UNAVAILABLE
    assert sink.on(FINAL) == []


def test_due_now_or_in_the_past_is_published_at_once(ingress: Ingress, sink: RecordingSink) -> None:
    ingress.handle(Message(b"x", {"delay_seconds": "0"}, message_id="1"))
    ingress.handle(Message(b"y", {"deliver_at": "2000-01-01T00:00:00Z"}, message_id="2"))
    assert len(sink.on(FINAL)) == 2


def test_due_even_slightly_later_is_never_published_early(
    ingress: Ingress, sink: RecordingSink
) -> None:
    result = ingress.handle(Message(b"x", {"delay_seconds": "0.2"}, message_id="1"))
    assert result.outcome is IngressOutcome.DEAD_LETTERED  # no scheduler here: not early, ever
    assert sink.on(FINAL) == []


def test_transient_publish_failure_raises_and_redelivery_succeeds(
    ingress: Ingress, sink: RecordingSink
) -> None:
    message = Message(b"x", {}, message_id="1")
    sink.fail_next = 1
    with pytest.raises(TransientError):
        ingress.handle(message)
    assert ingress.handle(message).outcome is IngressOutcome.PUBLISHED
    assert len(sink.on(FINAL)) == 1


def test_redelivered_bad_message_is_dead_lettered_once(
    ingress: Ingress, sink: RecordingSink
) -> None:
    bad = Message(b"x", {"fifo_seq": "1"}, message_id="9")
    assert ingress.handle(bad).outcome is IngressOutcome.DEAD_LETTERED
    assert ingress.handle(bad).outcome is IngressOutcome.DEAD_LETTERED
    late = Message(b"x", {"delay_seconds": "60"}, message_id="10")
    ingress.handle(late)
    assert ingress.handle(late).outcome is IngressOutcome.DUPLICATE
    assert [m.attributes["error_reason"] for m in sink.on(DLQ)] == [
        attr.REASON_SEQ_WITHOUT_GROUP,
        REASON_DELAY_UNAVAILABLE,
    ]


def test_a_producers_retry_of_a_refused_message_is_dead_lettered_once(
    ingress: Ingress, sink: RecordingSink
) -> None:
    # An outbox's retry after a publish that timed out once Pub/Sub had accepted it: the same
    # dedup_key and content under a new message id (and a new trace context) is one message.
    attrs = {"dedup_key": "order-7", "dlq_wrapped": "json"}
    first = Message(b"x", {**attrs, "googclient_traceparent": "00-a-b-01"}, message_id="1")
    retry = Message(b"x", {**attrs, "googclient_traceparent": "00-c-d-01"}, message_id="2")
    other = Message(b"y", attrs, message_id="3")  # other content: another message
    unkeyed = [Message(b"x", {"dlq_wrapped": "json"}, message_id=i) for i in ("4", "5")]
    # A `dlq replay` took the letter off the dead-letter topic: refused again, a new letter.
    replay = Message(b"x", {**attrs, "replay_id": "r1"}, message_id="6")
    for message in (first, retry, other, *unkeyed, replay, replay):
        assert ingress.handle(message).outcome is IngressOutcome.DEAD_LETTERED
    letters = sink.on(DLQ)
    assert [m.attributes["error_reason"] for m in letters] == [attr.REASON_RESERVED_ATTRIBUTE] * 5
    assert [m.attributes["origin_message_id"] for m in letters] == ["1", "3", "4", "5", "6"]


def test_failed_dead_letter_publish_raises_so_nothing_is_lost(
    ingress: Ingress, sink: RecordingSink
) -> None:
    sink.fail_next = 1
    with pytest.raises(TransientError):
        ingress.handle(Message(b"", {}, message_id="1"))
    assert ingress.handle(Message(b"", {}, message_id="1")).outcome is IngressOutcome.DEAD_LETTERED


@pytest.mark.parametrize(
    "data",
    [
        None,
        "text",
        {"no_message": 1},
        {"message": {"data": "***not base64***"}},
        {"message": {"data": "eA==", "attributes": {"k": 5}}},
    ],
)
def test_malformed_events_are_dead_lettered_whole(
    ingress: Ingress, sink: RecordingSink, data: object
) -> None:
    result = ingress.handle_event_data(data)
    assert result.outcome is IngressOutcome.DEAD_LETTERED
    [dead] = sink.on(DLQ)
    assert dead.attributes["error_reason"] == attr.REASON_MALFORMED_EVENT
    assert json.loads(dead.data) == data


def test_event_data_is_decoded(ingress: Ingress, sink: RecordingSink) -> None:
    data = {
        "message": {
            "data": base64.b64encode(b"hi").decode(),
            "attributes": {"a": "b"},
            "messageId": "77",
            "publishTime": "2030-01-01T00:00:00Z",
        }
    }
    assert ingress.handle_event_data(data).outcome is IngressOutcome.PUBLISHED
    [out] = sink.on(FINAL)
    assert out.data == b"hi"
    assert out.attributes["origin_message_id"] == "77"
    assert out.attributes["origin_publish_time"] == "2030-01-01T00:00:00.000000Z"


def test_every_decision_is_one_json_log_line(
    ingress: Ingress, capsys: pytest.CaptureFixture[str]
) -> None:
    from pubsub_toolkit.observability import configure_logging

    configure_logging()
    ingress.handle(Message(b"x", {"dedup_key": "k"}, message_id="1"))
    ingress.handle(Message(b"x", {"dedup_key": "k"}, message_id="1"))
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    outcomes = [(e["severity"], e["outcome"], e["dedup_key"], e["consumer"]) for e in lines]
    assert outcomes == [
        ("INFO", "processed", "k", "ingress"),
        ("INFO", "duplicate", "k", "ingress"),
    ]


def test_every_decision_names_the_delivery_it_was_about(
    ingress: Ingress, caplog: pytest.LogCaptureFixture
) -> None:
    """Decision logs carry the Pub/Sub message id, so each line traces to one delivery (the
    soak's ledger matches deduplicated copies by it)."""
    caplog.set_level(logging.INFO, logger="pubsub_toolkit")
    ingress.handle(Message(b"x", {attr.DEDUP_KEY: "k"}, message_id="m-1"))
    ingress.handle(Message(b"x", {attr.DEDUP_KEY: "k"}, message_id="m-2"))
    ingress.handle(Message(b"x", {attr.DELAY_SECONDS: "soon"}, message_id="m-3"))
    decisions = [r.decision for r in caplog.records if hasattr(r, "decision")]
    seen = [(d["outcome"], d.get("message_id")) for d in decisions]
    assert ("processed", "m-1") in seen and ("duplicate", "m-2") in seen
    assert any(message_id == "m-3" for _, message_id in seen)


def fifo(key: str, seq: int, data: bytes | None = None, **extra: str) -> Message:
    attributes = {"fifo_group": "G", "fifo_seq": str(seq), "dedup_key": key, **extra}
    return Message(data or key.encode(), attributes, message_id=f"m{seq}")


def test_a_renumbered_producer_retry_becomes_a_filler_and_the_group_runs_on(
    ingress: Ingress, sink: RecordingSink, clock: ManualClock
) -> None:
    """Defect 1: k1, k2, k2 again (the retry got number 3), k4 -> k1, k2, k4 handled,
    whichever copy of k2 reaches ingress first."""
    from pubsub_toolkit.consumer.gate import FifoGate
    from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore

    outcomes = [
        ingress.handle(fifo(k, s, k.encode())).outcome
        for k, s in [("k1", 1), ("k2", 2), ("k2", 3), ("k4", 4)]
    ]
    assert outcomes[2] is IngressOutcome.DUPLICATE
    assert ingress.handle(fifo("k2", 3, b"k2")).outcome is IngressOutcome.DUPLICATE  # again
    final = sink.on(FINAL)
    # The retry's number goes on as a filler naming the first copy's, once however often the
    # retry is redelivered ...
    assert [
        (m.attributes["dedup_key"], m.attributes["fifo_seq"], m.attributes.get("fifo_filler"))
        for m in final
    ] == [
        ("k1", "1", None),
        ("k2", "2", None),
        ("k2", "3", "renumbered_copy_of:2"),
        ("k4", "4", None),
    ]
    # ... and the consumer's gate runs k2 once, at its first number.
    handled: list[str] = []
    gate = FifoGate(
        MemoryFifoStore(),
        consumer="c",
        handler=lambda m: handled.append(m.attributes["dedup_key"]),
        clock=clock,
    )
    for message in reversed(final):  # the worst order
        gate.deliver(
            Message(message.data, message.attributes), "G", int(message.attributes["fifo_seq"])
        )
    assert handled == ["k1", "k2", "k4"]


def test_a_dead_lettered_fifo_message_leaves_a_tombstone_filler(
    ingress: Ingress, sink: RecordingSink
) -> None:
    ingress.handle(fifo("k1", 1))
    bad = fifo("k2", 2, delay_seconds="1", deliver_at="2030-01-01T00:00:00Z")
    assert ingress.handle(bad).outcome is IngressOutcome.DEAD_LETTERED
    ingress.handle(bad)  # redelivered: still one dead letter, one filler
    [dead] = sink.on(DLQ)
    assert dead.attributes["error_reason"] == "conflicting_delay"
    [filler] = [m for m in sink.on(FINAL) if attr.FIFO_FILLER in m.attributes]
    assert filler.attributes["fifo_filler"] == "dead_lettered:conflicting_delay"
    assert filler.attributes["fifo_seq"] == "2" and filler.ordering_key == "G"


def test_a_fingerprint_mismatch_is_dead_lettered_once_however_often_redelivered(
    ingress: Ingress, sink: RecordingSink
) -> None:
    ingress.handle(Message(b"original", {"dedup_key": "k"}, message_id="1"))
    impostor = Message(b"different", {"dedup_key": "k"}, message_id="2")
    for _ in range(3):
        assert ingress.handle(impostor).outcome is IngressOutcome.DEAD_LETTERED
    [dead] = sink.on(DLQ)
    assert dead.attributes["error_reason"] == "fingerprint_mismatch"


def test_a_replay_id_nobody_minted_is_dead_lettered_and_delivers_nothing_twice(
    ingress: Ingress, sink: RecordingSink
) -> None:
    ingress.handle(Message(b"x", {"dedup_key": "k"}, message_id="1"))
    forged = Message(b"x", {"dedup_key": "k", "replay_id": "anything"}, message_id="2")
    assert ingress.handle(forged).outcome is IngressOutcome.DEAD_LETTERED
    assert len(sink.on(FINAL)) == 1
    assert sink.on(DLQ)[0].attributes["error_reason"] == "forged_replay_id"


def test_a_minted_replay_goes_through_once(
    ingress: Ingress, sink: RecordingSink, clock: ManualClock
) -> None:
    from pubsub_toolkit.dead_letters import replay as replays

    store = MemoryDedupStore(clock)
    ingress = Ingress(
        store=store,
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(days=8),
        clock=clock,
    )
    ingress.handle(Message(b"x", {"dedup_key": "k"}, message_id="1"))
    replays.mint(store, "dlq-7", "k")
    replay = Message(b"x", {"dedup_key": "k", "replay_id": "dlq-7"}, message_id="2")
    assert ingress.handle(replay).outcome is IngressOutcome.PUBLISHED
    assert ingress.handle(replay).outcome is IngressOutcome.DUPLICATE
    assert len(sink.on(FINAL)) == 2
    other_key = Message(b"y", {"dedup_key": "j", "replay_id": "dlq-7"}, message_id="3")
    assert ingress.handle(other_key).outcome is IngressOutcome.DEAD_LETTERED  # minted for "k"


def test_a_replay_keeps_the_fingerprint_of_the_message_it_replays(
    sink: RecordingSink, clock: ManualClock
) -> None:
    """A message published with ``delay_seconds`` (``--delay``, ``Publisher(delay=...)``)
    leaves ingress with ``deliver_at`` instead, and its fingerprint covers the producer's
    ``delay_seconds``. A dead letter of it (the consumer's, the relay's) carries ``deliver_at``,
    and a replay's fingerprint recomputed over that differed: the consumer called the replay a
    reused key (``fingerprint_mismatch``, dead-lettered again, for every replay) and the relay
    raised the same ALERT. Found replaying a delayed message on the local stack."""
    from pubsub_toolkit.dead_letters import replay as replays

    store = MemoryDedupStore(clock)
    ingress = Ingress(
        store=store,
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(days=8),
        clock=clock,
    )
    sent = {"dedup_key": "k", "delay_seconds": "0"}
    ingress.handle(Message(b"x", sent, message_id="1"))
    [out] = sink.on(FINAL)
    assert "delay_seconds" not in out.attributes and "deliver_at" in out.attributes
    # What `dlq replay` publishes: the letter (the final copy) without error_*, plus replay_id.
    replays.mint(store, "dlq-7", "k")
    replay = Message(b"x", {**out.attributes, "replay_id": "dlq-7"}, message_id="2")
    assert ingress.handle(replay).outcome is IngressOutcome.PUBLISHED
    [_, again] = sink.on(FINAL)
    assert again.attributes["content_sha256"] == out.attributes["content_sha256"]
    assert again.attributes["deliver_at"] == out.attributes["deliver_at"]


def test_a_renumbered_retry_that_reaches_ingress_first_keeps_the_first_place(
    ingress: Ingress, sink: RecordingSink, clock: ManualClock
) -> None:
    """k2's retry (number 4, after k3) arrives before k2 itself: k2 still runs before k3."""
    from pubsub_toolkit.consumer.gate import FifoGate
    from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore

    for key, seq in [("k1", 1), ("k2", 4), ("k3", 3), ("k2", 2)]:
        ingress.handle(fifo(key, seq, key.encode()))
    handled: list[str] = []
    gate = FifoGate(
        MemoryFifoStore(),
        consumer="c",
        handler=lambda m: handled.append(m.attributes["dedup_key"]),
        clock=clock,
    )
    for message in sink.on(FINAL):
        gate.deliver(
            Message(message.data, message.attributes), "G", int(message.attributes["fifo_seq"])
        )
    assert handled == ["k1", "k2", "k3"]


@pytest.mark.parametrize("distance", [63, 64, 71, 5000])
def test_a_renumbered_retry_far_from_its_first_copy_runs_once(
    ingress: Ingress, sink: RecordingSink, clock: ManualClock, distance: int
) -> None:
    """Issue 24, defect 1: order-A at #1, other messages, then A's retry (same key and data)
    numbered ``distance`` later - past the gate's window of recent keys - runs once, at #1;
    also when the retry comes after the group's end (it used to be dead-lettered
    fifo_after_end as well)."""
    from pubsub_toolkit.consumer.gate import FifoGate
    from pubsub_toolkit.stores.fifo_state.memory import MemoryFifoStore

    ingress.handle(fifo("order-A", 1, b"A"))
    for seq in range(2, distance + 1):
        end = {"fifo_end": "true"} if seq == distance else {}
        ingress.handle(fifo(f"k{seq}", seq, b"x", **end))
    retry = fifo("order-A", distance + 1, b"A")  # past the group's end, too
    assert ingress.handle(retry).outcome is IngressOutcome.DUPLICATE
    handled: list[str] = []
    dead: list[str] = []
    gate = FifoGate(
        MemoryFifoStore(),
        consumer="c",
        handler=lambda m: handled.append(m.attributes["dedup_key"]),
        clock=clock,
    )
    for message in sink.on(FINAL):
        result = gate.deliver(
            Message(message.data, message.attributes), "G", int(message.attributes["fifo_seq"])
        )
        if result.outcome.name == "DEAD_LETTERED":
            dead.append(message.attributes["dedup_key"])
    assert handled.count("order-A") == 1
    assert handled[0] == "order-A"
    assert dead == []
    assert len(handled) == distance


# --- a fingerprint mismatch at another FIFO number than its key's first copy: filled ----------
#
# A producer that reuses a dedup key across groups (key = an order id, group = a customer) sent
# ``order-7`` as A#1 and then, with other content, as B#1. Ingress dead-lettered B#1
# (``fingerprint_mismatch``) but forwarded nothing for the number, so group B waited for its #1
# for ever - B#2 never ran (gap policy ``wait``, the default), and the same for a reused key at a
# later number of its own group (seen on the local stack by a new user's hand-made producer).
# Only the first copy's own number is left to it: filling that could overtake the first copy.


def grouped(key: str, group: str, seq: int, data: bytes, message_id: str) -> Message:
    attributes = {"fifo_group": group, "fifo_seq": str(seq), "dedup_key": key}
    return Message(data, attributes, message_id=message_id)


def fillers(sink: RecordingSink) -> list[tuple[str, str, str]]:
    return [
        (m.attributes["fifo_group"], m.attributes["fifo_seq"], m.attributes[attr.FIFO_FILLER])
        for m in sink.on(FINAL)
        if attr.FIFO_FILLER in m.attributes
    ]


@pytest.mark.parametrize(
    ("group", "seq"), [("B", 1), ("A", 2)], ids=["another group", "another number"]
)
def test_a_mismatch_at_another_number_is_dead_lettered_and_its_number_filled(
    ingress: Ingress, sink: RecordingSink, clock: ManualClock, group: str, seq: int
) -> None:
    first = ingress.handle(grouped("order-7", "A", 1, b"A1", "m1"))
    assert first.outcome is IngressOutcome.PUBLISHED
    impostor = grouped("order-7", group, seq, b"other", "m2")
    for _ in range(2):  # redelivered: still one dead letter, one filler
        assert ingress.handle(impostor).outcome is IngressOutcome.DEAD_LETTERED
    [dead] = sink.on(DLQ)
    assert dead.attributes["error_reason"] == attr.REASON_FINGERPRINT_MISMATCH
    assert fillers(sink) == [(group, str(seq), "dead_lettered:fingerprint_mismatch")]
    # ... so the group runs on past the number.
    ingress.handle(grouped("order-8", group, seq + 1, b"next", "m3"))
    handled: list[tuple[str, str]] = []
    gate = FifoGate(
        MemoryFifoStore(),
        consumer="c",
        handler=lambda m: handled.append((m.attributes["fifo_group"], m.attributes["fifo_seq"])),
        clock=clock,
    )
    for m in reversed(sink.on(FINAL)):  # the worst order
        group_, seq_ = m.attributes["fifo_group"], int(m.attributes["fifo_seq"])
        gate.deliver(Message(m.data, m.attributes), group_, seq_)
    assert sorted(handled) == sorted([("A", "1"), (group, str(seq + 1))])


def test_a_mismatch_at_the_first_copys_own_number_leaves_it_to_the_first_copy(
    ingress: Ingress, sink: RecordingSink
) -> None:
    ingress.handle(grouped("order-7", "A", 1, b"A1", "m1"))
    assert ingress.handle(grouped("order-7", "A", 1, b"other", "m2")).outcome is (
        IngressOutcome.DEAD_LETTERED
    )
    assert fillers(sink) == []


def test_a_mismatch_of_a_plain_first_copy_fills_the_impostors_number(
    ingress: Ingress, sink: RecordingSink
) -> None:
    ingress.handle(Message(b"plain", {"dedup_key": "order-7"}, message_id="m1"))
    ingress.handle(grouped("order-7", "B", 1, b"other", "m2"))
    assert fillers(sink) == [("B", "1", "dead_lettered:fingerprint_mismatch")]


def test_ingress_warns_about_an_attribute_near_miss_and_still_delivers(
    ingress: Ingress, caplog: pytest.LogCaptureFixture
) -> None:
    # ``delay_second`` (for ``delay_seconds``) is not read: the message goes out at once, and
    # the WARNING says which name it probably meant (attributes.near_misses).
    with caplog.at_level(logging.WARNING, logger="pubsub_toolkit"):
        result = ingress.handle(Message(b"x", {"delay_second": "60"}, message_id="m1"))
    assert result.outcome is IngressOutcome.PUBLISHED
    warned = [r.getMessage() for r in caplog.records if "delay_second" in r.getMessage()]
    assert warned and "delay_seconds" in warned[0], warned
