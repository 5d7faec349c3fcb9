"""Dead-letter operations through the real local stack: `dlq list`, `dlq replay` (order, keys,
no doubles) and the three ways out of a BLOCKED FIFO group (`fifo skip`, `fifo replay`,
`dlq replay`), each run as a user runs the CLI."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from google.cloud import firestore, pubsub_v1

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.config import Settings
from pubsub_toolkit.core.fifo_policy import REASON_POISON
from pubsub_toolkit.core.ingress import IngressOutcome
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.producer.sink import PubSubSink
from pubsub_toolkit.stores.counters.firestore import FirestoreSequenceCounter
from pubsub_toolkit.stores.factory import dedup_store_from_settings
from pubsub_toolkit.stores.fifo_state.base import GroupState
from pubsub_toolkit.stores.fifo_state.firestore import FirestoreFifoStore
from pubsub_toolkit_cli.dead_letters.listing import list_dead_letters
from pubsub_toolkit_cli.dead_letters.replay import replay
from pubsub_toolkit_local.stack import LocalStack
from pubsub_toolkit_local.topology import drain
from tests.ops.conftest import StackFactory, cli, recording_consumer
from tests.support.waiting import wait_until


def publish_raw(topic: str, data: bytes, **attributes: str) -> None:
    publisher = pubsub_v1.PublisherClient()
    publisher.publish(topic, data, **attributes).result(timeout=30)


def dead_letters(stack: LocalStack) -> list:  # type: ignore[type-arg]
    assert stack.topology is not None
    subscriber = pubsub_v1.SubscriberClient()
    try:
        return list_dead_letters(subscriber, stack.topology.dead_letter_sub)
    finally:
        subscriber.close()


def publish_with_poison_second(stack: LocalStack, client: firestore.Client, group: str) -> None:
    """Publish #1 "one", #2 "bad" (the handler's poison), #3 "three" in ``group``."""
    assert stack.topology is not None
    sink = PubSubSink()
    publisher = Publisher(sink, stack.topology.origin, FirestoreSequenceCounter(client))
    for data in (b"one", b"bad", b"three"):
        publisher.publish(data, {}, fifo_group=group).result(timeout=30)
    sink.close()


def wait_for_poison_dead_letter(stack: LocalStack, group: str) -> None:
    """Wait until #2 of ``group`` is on the dead-letter topic as fifo_poison (and only it)."""
    poison = wait_until(
        lambda: [d for d in dead_letters(stack) if d.reason == REASON_POISON],
        timeout=30,
        what="the poison message on the dead-letter topic",
    )
    assert [(d.group, d.seq) for d in poison] == [(group, 2)]


def test_dlq_list_shows_reason_group_seq_and_age_without_consuming(
    make_stack: StackFactory,
) -> None:
    stack = make_stack()
    assert stack.topology is not None
    origin = stack.topology.origin
    publish_raw(origin, b"x", delay_seconds="-1", fifo_group="g1", fifo_seq="3", dedup_key="bad-1")
    publish_raw(origin, b"y", fifo_seq="1", dedup_key="bad-2")
    wait_until(lambda: len(dead_letters(stack)) == 2, timeout=60, what="two dead letters")

    listed = cli(stack.env, "dlq", "list")
    assert listed.returncode == 0, listed.stderr
    rows = {}
    for line in listed.stdout.splitlines()[1:]:  # after the header
        _id, reason, key, group, seq, age, *_ = line.split(maxsplit=6)
        rows[key] = (reason, group, seq, age)
    assert rows.keys() == {"bad-1", "bad-2"}
    assert rows["bad-1"][:3] == ("invalid_delay_seconds", "g1", "3")
    assert rows["bad-2"][:3] == ("fifo_seq_without_group", "-", "1")
    for _, _, _, age in rows.values():
        match = re.fullmatch(r"(\d+)s", age)
        assert match and 0 <= int(match.group(1)) < 120, age
    assert "2 dead letter(s)" in listed.stderr
    again = cli(stack.env, "dlq", "list")  # listing consumed nothing
    assert again.returncode == 0 and "2 dead letter(s)" in again.stderr


def test_dlq_replay_goes_back_in_fifo_order_once_with_the_original_keys(
    make_stack: StackFactory,
) -> None:
    # An ingress instance deployed without a Cloud Tasks queue (same library, same store and
    # topics as the stack's) dead-letters anything due later: delayed_delivery_unavailable.
    # Once the due time has passed, a replay through the stack's ingress publishes it.
    stack = make_stack()
    assert stack.topology is not None
    topo = stack.topology
    misconfigured = Ingress.from_settings(
        Settings.from_env({**stack.env, "PUBSUB_TOOLKIT_TASKS_QUEUE": ""})
    )
    due = attr.format_time(datetime.now(UTC) + timedelta(seconds=2))
    for seq in (3, 1, 2):  # dead-lettered out of order
        fifo = {"fifo_group": "g-replay", "fifo_seq": str(seq)}
        message = Message(
            f"step {seq}".encode(),
            {**fifo, "dedup_key": f"r-{seq}", "deliver_at": due},
            message_id=f"m{seq}",
        )
        assert misconfigured.handle(message).outcome is IngressOutcome.DEAD_LETTERED
    plain = Message(b"plain", {"dedup_key": "plain-r", "deliver_at": due}, message_id="m4")
    assert misconfigured.handle(plain).outcome is IngressOutcome.DEAD_LETTERED
    wait_until(lambda: len(dead_letters(stack)) == 4, timeout=60, what="four dead letters")
    assert {d.reason for d in dead_letters(stack)} == {"delayed_delivery_unavailable"}

    # A tap on origin with message ordering shows the order the replay published in.
    tap = f"projects/{topo.project}/subscriptions/origin-tap"
    subscriber = pubsub_v1.SubscriberClient()
    subscriber.create_subscription(
        request={"name": tap, "topic": topo.origin, "enable_message_ordering": True}, timeout=10
    )
    wait_until(lambda: datetime.now(UTC) > attr.parse_time(due), timeout=10, what="due time")

    replayed = cli(stack.env, "dlq", "replay", "--group", "g-replay")
    assert replayed.returncode == 0, replayed.stderr
    assert "replayed 3 message(s)" in replayed.stdout

    tapped = drain(tap, expected=3, timeout=30)
    assert [m.attributes["fifo_seq"] for m in tapped] == ["1", "2", "3"]
    assert all(m.attributes.get(attr.REPLAY_ID) for m in tapped)
    # Ingress forwarded a filler (no data, fifo_filler=dead_lettered:...) for each FIFO number
    # it dead-lettered, so the consumer never waits for them; the replays come on top.
    arrived = drain(topo.final_sub, expected=6, timeout=60, quiet=3)
    fillers = [m for m in arrived if attr.FIFO_FILLER in m.attributes]
    final = [m for m in arrived if attr.FIFO_FILLER not in m.attributes]
    assert sorted(m.attributes[attr.FIFO_SEQ] for m in fillers) == ["1", "2", "3"]
    assert sorted(m.attributes[attr.DEDUP_KEY] for m in final) == ["r-1", "r-2", "r-3"]
    assert all(m.data for m in final)
    assert sorted(m.attributes[attr.FIFO_SEQ] for m in final) == ["1", "2", "3"]
    assert all(m.attributes[attr.FIFO_GROUP] == "g-replay" for m in final)
    assert all(attr.ERROR_REASON not in m.attributes for m in final)

    # The same selection again finds nothing: what was replayed left the dead-letter topic.
    again = cli(stack.env, "dlq", "replay", "--group", "g-replay")
    assert again.returncode == 0 and "replayed 0 message(s)" in again.stdout

    # A replay that crashes after publishing but before its ack runs again with the same
    # replay id: ingress lets one copy through, not two.
    class CrashBeforeAck:
        def __getattr__(self, name: str) -> object:
            return getattr(subscriber, name)

        def acknowledge(self, *, subscription: str, ack_ids: list[str]) -> None:
            # The crash: the ack never happens and the lease runs out at once.
            subscriber.modify_ack_deadline(
                subscription=subscription, ack_ids=ack_ids, ack_deadline_seconds=0
            )

    sink = PubSubSink()
    store = dedup_store_from_settings(
        Settings.from_env(stack.env)
    )  # ingress's: replay ids minted there
    try:
        first = replay(
            CrashBeforeAck(),
            topo.dead_letter_sub,
            sink,
            topo.origin,
            store=store,
            select=lambda d: True,
        )
        second = replay(
            subscriber, topo.dead_letter_sub, sink, topo.origin, store=store, select=lambda d: True
        )
    finally:
        sink.close()
        subscriber.close()
    assert [d.dedup_key for d in first] == [d.dedup_key for d in second] == ["plain-r"]
    assert first[0].dead_letter_id == second[0].dead_letter_id
    final = drain(topo.final_sub, expected=1, timeout=60, quiet=3)
    assert [m.attributes[attr.DEDUP_KEY] for m in final] == ["plain-r"]
    assert dead_letters(stack) == []


@pytest.mark.parametrize("way_out", ["fifo skip", "fifo replay", "dlq replay"])
def test_a_blocked_group_is_unblocked(make_stack: StackFactory, way_out: str) -> None:
    stack = make_stack()
    assert stack.topology is not None
    consumer_id, group = "ops-consumer", "g-block"
    client = firestore.Client(project=stack.env["GOOGLE_CLOUD_PROJECT"])
    store = FirestoreFifoStore(client)
    with recording_consumer(
        stack, consumer_id, poison_policy="block", max_attempts=2, poison_data=b"bad"
    ) as seen:
        publish_with_poison_second(stack, client, group)
        wait_until(
            lambda: store.load(consumer_id, group).blocked_at == 2, timeout=60, what="blocked"
        )
        wait_for_poison_dead_letter(stack, group)
        wait_until(lambda: 3 in store.load(consumer_id, group).parked, what="#3 parked")
        assert seen.handled_in(group) == [1]  # blocked: #3 waits behind the poison message

        if way_out == "fifo skip":
            done = cli(stack.env, "fifo", "skip", group, "2", "--consumer-id", consumer_id)
            expected = [1, 3]
        elif way_out == "fifo replay":
            seen.fixed.set()
            done = cli(stack.env, "fifo", "replay", group, "--consumer-id", consumer_id)
            expected = [1, 2, 3]
        else:
            seen.fixed.set()
            done = cli(stack.env, "dlq", "replay", "--group", group, "--consumer-id", consumer_id)
            assert "replayed 1 message(s)" in done.stdout
            assert f"unblocked {group} at #2 for consumer {consumer_id!r}" in done.stdout
            expected = [1, 2, 3]
        assert done.returncode == 0, done.stderr

        wait_until(lambda: seen.handled_in(group) == expected, timeout=60, what=str(expected))

        def settled() -> GroupState | None:
            # The handler records #3 before the gate commits its advance: wait for the commit.
            state = store.load(consumer_id, group)
            done = state.blocked_at is None and state.last_processed == 3 and not state.parked
            return state if done else None

        state = wait_until(settled, timeout=30, what="the group advanced past #3, unblocked")
        if way_out == "fifo skip":
            assert state.skipped == ((2, 2),)
        if way_out == "dlq replay":
            # The replayed copy reaches the consumer too, through ingress: parked behind the
            # block if it came first (one copy per number is kept), a duplicate if it came later.
            replay_outcomes = wait_until(
                lambda: [o for m, o in list(seen.outcomes) if m.attributes.get(attr.REPLAY_ID)],
                timeout=60,
                what="the replayed copy at the consumer",
            )
            assert set(replay_outcomes) <= {"parked", "blocked", "duplicate", "processed"}
            assert not [d for d in dead_letters(stack) if d.reason == REASON_POISON]
        assert seen.handled_in(group) == expected  # nothing ran twice


def test_a_poison_message_the_group_skipped_is_kept_not_replayed(make_stack: StackFactory) -> None:
    """With the skip policy the group goes on past a poison number; replaying it could not run
    in order (it would only come back as fifo_late_after_skip), so `dlq replay` keeps it on the
    dead-letter topic and says why."""
    stack = make_stack()
    assert stack.topology is not None
    consumer_id, group = "ops-skipper", "g-skip"
    client = firestore.Client(project=stack.env["GOOGLE_CLOUD_PROJECT"])
    store = FirestoreFifoStore(client)
    with recording_consumer(
        stack, consumer_id, poison_policy="skip", max_attempts=2, poison_data=b"bad"
    ) as seen:
        publish_with_poison_second(stack, client, group)
        wait_until(lambda: seen.handled_in(group) == [1, 3], timeout=60, what="1 and 3 handled")
        wait_for_poison_dead_letter(stack, group)

        seen.fixed.set()
        done = cli(stack.env, "dlq", "replay", "--group", group, "--consumer-id", consumer_id)
        assert done.returncode == 0, done.stderr
        assert "replayed 0 message(s)" in done.stdout
        assert f"kept {group} #2 on the dead-letter topic" in done.stdout
        still = [d for d in dead_letters(stack) if d.reason == REASON_POISON]
        assert [(d.group, d.seq) for d in still] == [(group, 2)]
        wait_until(lambda: store.load(consumer_id, group).last_processed == 3, what="past #3")
        assert seen.handled_in(group) == [1, 3]


def test_a_delayed_message_the_handler_refused_runs_when_replayed_after_the_fix(
    make_stack: StackFactory,
) -> None:
    """The operator's loop of operate.md on a plain delayed message: the handler refuses it
    (``PermanentError``, dead-lettered), the handler is fixed, `dlq replay` - and it runs, once,
    with its key. It used to be acked as a duplicate of the dead-lettering (the consumer's
    record said done), and a message sent with ``delay_seconds`` came back as
    ``fingerprint_mismatch`` instead (the letter carries ``deliver_at``)."""
    stack = make_stack()
    assert stack.topology is not None
    with recording_consumer(stack, "ops-refuser", poison_data=b"refused", refuse=True) as seen:
        sink = PubSubSink()
        publisher = Publisher(sink, stack.topology.origin)
        publisher.publish(b"refused", dedup_key="r-late", delay=timedelta(seconds=1)).result(30)
        sink.close()
        [letter] = wait_until(
            lambda: dead_letters(stack), timeout=60, what="the refused message's dead letter"
        )
        assert (letter.reason, letter.dedup_key) == ("handler_refused", "r-late")

        seen.fixed.set()
        done = cli(stack.env, "dlq", "replay", "--reason", "handler_refused")
        assert done.returncode == 0, done.stderr
        assert "replayed 1 message(s)" in done.stdout
        wait_until(lambda: "r-late" in seen.handled, timeout=60, what="the replay handled")
        replays = wait_until(
            lambda: [o for m, o in list(seen.outcomes) if m.attributes.get(attr.REPLAY_ID)],
            timeout=30,
            what="the replay's outcome",
        )
        assert replays == ["processed"]
        assert dead_letters(stack) == []  # no fingerprint_mismatch, nothing left
        assert seen.handled.count("r-late") == 1
