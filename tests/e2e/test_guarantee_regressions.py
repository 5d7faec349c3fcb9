"""Issue 11's "Must show" on the local stack, driven only through public surfaces.

Producers publish to the origin topic (raw attributes with google-cloud-pubsub's
PublisherClient, as gcloud would, or the toolkit's Publisher numbering through the Redis
counter); ingress runs under functions-framework behind the emulator's push subscription; a
``pubsub_toolkit.Consumer`` built with ``MessageProcessor.from_settings`` handles the final
topic; dead letters are read with ``pubsub-toolkit dlq list`` or a pull on the dead-letter
subscription; alerts are the consumer's decision log lines (logger
``pubsub_toolkit.decisions``) whose message starts with ``ALERT``.

* **Defect 1** - a producer's retry renumbered by the counter (k2 published at 2 and again at
  3) no longer stalls its group: ingress forwards a filler for the retry's number, and k1, k2,
  k4 are each handled once, in order, with no operator action.
* **Redis restarted without persistence mid-group** (dedup records, FIFO state and the
  sequence counter in one Redis, like one Memorystore instance): the counter numbers from 1
  again while the consumer still holds the group's messages in flight; the consumer notices
  the rollback (ALERT ``store_rollback``), and every reissued number that meets one it knows
  is dead-lettered ``fifo_sequence_reused`` with an ALERT - every published key is handled or
  dead-lettered with a reason.
* **Parked messages lost with Redis** (found by this file, then fixed): the same restart while
  the consumer has *parked* messages of the group (acked to Pub/Sub, kept only in Redis). The
  gate now re-parks them from its own copies when it repairs the group, so they run in order
  instead of waiting forever. See the test's docstring for the exact sequence.

The one long-lived Consumer per test is never restarted (the emulator's stopped-stream defect,
ENVIRONMENT.md); every stack is a fresh project, and every process started here is stopped by
process group.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest
from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.subscriber import Consumer
from pubsub_toolkit.core.fifo_policy import REASON_SEQUENCE_RESTARTED
from pubsub_toolkit.errors import StoreUnavailableError
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.producer.sink import PubSubSink
from pubsub_toolkit.stores.counters.redis import RedisSequenceCounter
from pubsub_toolkit_local import emulators
from pubsub_toolkit_local.processes import free_port
from pubsub_toolkit_local.stack import LocalStack, RunningEmulators, StackOptions
from tests.conftest import repo_root
from tests.support.restartable import Restartable
from tests.support.waiting import wait_until

DECISIONS_LOGGER = "pubsub_toolkit.decisions"
Handler = Callable[[Message], None]


# --- the stack, the consumer and what they did ------------------------------------------------


@contextmanager
def local_stack(work: Path, *, redis_url: str | None = None) -> Iterator[LocalStack]:
    """ingress, the Cloud Tasks emulator and the relay for a fresh project on the session's
    emulators - on the Redis backend at ``redis_url`` when given (dedup records, FIFO state and
    the counter in that one Redis); stopped by process group on exit."""
    options = StackOptions(
        project=f"guarantee-{uuid.uuid4().hex[:10]}",
        store_backend="redis" if redis_url else "firestore",
        emulators=RunningEmulators(
            os.environ["PUBSUB_EMULATOR_HOST"], os.environ["FIRESTORE_EMULATOR_HOST"], redis_url
        ),
        extra_env={
            "PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS": "0"
        },  # no dashboard counters: less noise in Redis
    )
    with LocalStack(options, work, repo_root()) as stack:
        yield stack


@pytest.fixture
def firestore_stack(
    pubsub_emulator: str, firestore_emulator: str, tmp_path: Path
) -> Iterator[LocalStack]:
    with local_stack(tmp_path / "stack") as stack:
        yield stack


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[Restartable]:
    """A redis-server of this test's own, without persistence: a restart loses every key."""
    server = Restartable(lambda port, _work: emulators.redis_server(port), free_port(), tmp_path)
    try:
        yield server.start()
    finally:
        server.close()


@pytest.fixture
def redis_stack(
    pubsub_emulator: str, firestore_emulator: str, own_redis: Restartable, tmp_path: Path
) -> Iterator[LocalStack]:
    with local_stack(tmp_path / "stack", redis_url=redis_url_of(own_redis)) as stack:
        yield stack


def redis_url_of(server: Restartable) -> str:
    return f"redis://{server.host}/0"


@dataclass
class Record:
    """What the consumer did: handler runs as (dedup_key, fifo_seq), and every outcome."""

    handled: list[tuple[str, int]] = field(default_factory=list)
    outcomes: list[tuple[str, int, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def handled_keys(self) -> list[str]:
        with self.lock:
            return [key for key, _ in self.handled]

    def outcomes_of(self, outcome: str) -> list[tuple[str, int]]:
        with self.lock:
            return [(key, seq) for key, seq, o in self.outcomes if o == outcome]


def address(message: Message) -> tuple[str, int]:
    attributes = message.attributes
    return attributes.get(attr.DEDUP_KEY, message.message_id), int(attributes[attr.FIFO_SEQ])


@contextmanager
def running_consumer(
    stack: LocalStack,
    consumer_id: str,
    *,
    before_effect: Handler | None = None,
    retry_backoff: timedelta = timedelta(seconds=0.2),
) -> Iterator[Record]:
    """One long-lived Consumer on the stack's final subscription, wired from the stack's
    settings (default FIFO policies: gap ``wait``, poison ``skip``). ``before_effect`` runs
    first in the handler (it may block or raise); the run is recorded once it returns."""
    assert stack.topology is not None
    record = Record()

    def handler(message: Message) -> None:
        if before_effect is not None:
            before_effect(message)
        with record.lock:
            record.handled.append(address(message))

    def on_outcome(message: Message, outcome: str) -> None:
        with record.lock:
            record.outcomes.append((*address(message), outcome))

    processor = MessageProcessor.from_settings(
        Settings.from_env(stack.env),
        ConsumerSettings(consumer_id=consumer_id, retry_backoff=retry_backoff),
        handler,
    )
    consumer = Consumer(stack.topology.final_sub, processor, on_outcome=on_outcome)
    consumer.start()
    try:
        yield record
    finally:
        consumer.stop()


class Alerts(logging.Handler):
    """Decision log lines on ``pubsub_toolkit.decisions``; ``alerts`` are those saying ALERT."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @property
    def alerts(self) -> list[str]:
        return [r.getMessage() for r in self.records if r.getMessage().startswith("ALERT")]


@contextmanager
def decision_log() -> Iterator[Alerts]:
    logger = logging.getLogger(DECISIONS_LOGGER)
    handler, level = Alerts(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def cli(stack: LocalStack, *args: str) -> subprocess.CompletedProcess[str]:
    """``pubsub-toolkit ARGS`` as a user runs it, in the stack's environment."""
    return subprocess.run(
        [sys.executable, "-m", "pubsub_toolkit_cli.cli", *args],
        env={**os.environ, **stack.env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


class DeadLetters:
    """Pulls (and acks) the dead-letter subscription: dedup_key -> error_reason of each copy."""

    def __init__(self, stack: LocalStack) -> None:
        assert stack.topology is not None
        self._subscription = stack.topology.dead_letter_sub
        self._subscriber = pubsub_v1.SubscriberClient()
        self.letters: list[tuple[str, str]] = []

    def pull(self) -> list[tuple[str, str]]:
        response = self._subscriber.pull(
            subscription=self._subscription,
            max_messages=1000,
            return_immediately=True,
            timeout=10,
        )
        for item in response.received_messages:
            attributes = dict(item.message.attributes)
            self.letters.append(
                (attributes.get(attr.DEDUP_KEY, "?"), attributes.get(attr.ERROR_REASON, ""))
            )
        if response.received_messages:
            self._subscriber.acknowledge(
                subscription=self._subscription,
                ack_ids=[item.ack_id for item in response.received_messages],
                timeout=10,
            )
        return self.letters

    def pulled(self) -> DeadLetters:
        """Pull what has arrived since the last call; return self (for conditions)."""
        self.pull()
        return self

    def lettered_keys(self) -> set[str]:
        """Keys on the dead-letter topic with an error_reason."""
        return {key for key, reason in self.letters if reason}

    def close(self) -> None:
        self._subscriber.close()


# --- defect 1 -------------------------------------------------------------------------------


def test_a_renumbered_producer_retry_does_not_stall_its_fifo_group(
    firestore_stack: LocalStack,
) -> None:
    """fifo_seq 1 k1, 2 k2, 3 k2 again (a retry renumbered by the counter), 4 k4 -> k1, k2, k4
    handled once each, in order, with no operator action; nothing dead-lettered.

    With the fix reverted (ingress does not forward the filler) k1 and k2 are handled and the
    group waits for number 3 forever: k4 stays parked (gap policy ``wait``, 5 min timeout)."""
    stack = firestore_stack
    assert stack.topology is not None
    group = f"order-{uuid.uuid4().hex[:8]}"
    steps = ((1, "k1", b"created"), (2, "k2", b"paid"), (3, "k2", b"paid"), (4, "k4", b"shipped"))
    publisher = pubsub_v1.PublisherClient()
    with running_consumer(stack, "defect-1") as record:
        started = time.monotonic()
        for seq, key, data in steps:  # one at a time, as `gcloud pubsub topics publish` does
            publisher.publish(
                stack.topology.origin, data, fifo_group=group, fifo_seq=str(seq), dedup_key=key
            ).result(timeout=30)
        try:
            wait_until(lambda: "k4" in record.handled_keys(), timeout=30, what="k4 handled")
        except AssertionError as exc:
            raise AssertionError(
                f"{exc} - defect 1: the group stalls at the retry's number; "
                f"handled {record.handled}, outcomes {record.outcomes}"
            ) from None
        # Every number decided: three handler runs and one filler (for whichever copy of k2
        # reached ingress second - the retry at 3, or at 2 if the retry overtook the original).
        wait_until(lambda: record.outcomes_of("filled"), timeout=10, what="the filler's outcome")
        elapsed = time.monotonic() - started
        listed = cli(stack, "dlq", "list")
        handled_later = record.handled_keys()
    assert record.handled_keys() == ["k1", "k2", "k4"], record.handled
    assert handled_later == ["k1", "k2", "k4"], "a message ran again later"
    assert [seq for _, seq in record.handled] == sorted(seq for _, seq in record.handled)
    assert record.outcomes_of("filled") in ([("k2", 3)], [("k2", 2)])
    assert not record.outcomes_of("dead_lettered") and not record.outcomes_of("blocked")
    assert listed.returncode == 0, listed.stderr
    assert "0 dead letter(s)" in listed.stderr, listed.stdout
    print(f"defect 1: k1, k2, k4 handled in {elapsed:.2f}s after the first publish")


# --- Redis restarted with data loss mid-group ---------------------------------------------------


@dataclass
class Published:
    """The producer's side of the ledger: every key Pub/Sub accepted, with its number."""

    numbers: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def in_order(self) -> list[str]:
        with self.lock:
            return list(self.numbers)


class LedgerSink:
    """The Publisher's sink: PubSubSink, noting each accepted message's key and number."""

    def __init__(self, published: Published) -> None:
        self._sink = PubSubSink()
        self._published = published

    def publish(self, topic: str, message: OutboundMessage) -> str:
        message_id = self._sink.publish(topic, message)
        with self._published.lock:
            key = message.attributes[attr.DEDUP_KEY]
            self._published.numbers[key] = int(message.attributes[attr.FIFO_SEQ])
        return message_id

    def close(self) -> None:
        self._sink.close()


class GroupProducer:
    """An application publishing FIFO group ``group`` through the Redis sequence counter; a
    publish refused because Redis is unavailable (the counter fails closed) is retried."""

    def __init__(self, stack: LocalStack, redis_url: str, group: str) -> None:
        assert stack.topology is not None
        self.group = group
        self.published = Published()
        self._sink = LedgerSink(self.published)
        self._publisher = Publisher(
            self._sink, stack.topology.origin, RedisSequenceCounter.from_url(redis_url)
        )
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def publish(self, key: str) -> None:
        for _ in range(100):  # bounded: ~10 s of Redis unavailable at most
            try:
                self._publisher.publish(key.encode(), fifo_group=self.group, dedup_key=key).result()
                return
            except StoreUnavailableError:
                time.sleep(0.1)  # the application's retry backoff, not a synchronisation
        raise AssertionError(f"{key}: Redis stayed unavailable to the counter")

    def publish_steadily(self, keys: list[str], *, interval: float) -> None:
        """Publish ``keys`` one every ``interval`` seconds on a thread of its own."""

        def run() -> None:
            try:
                for key in keys:
                    self.publish(key)
                    time.sleep(interval)  # the producer's pace
            except BaseException as exc:
                self.error = exc

        self._thread = threading.Thread(target=run, name="group-producer", daemon=True)
        self._thread.start()

    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._sink.close()


def unaccounted(published: Published, record: Record, dead: DeadLetters) -> list[str]:
    """Published keys neither handled nor on the dead-letter topic with a reason."""
    handled, lettered = set(record.handled_keys()), dead.lettered_keys()
    return [k for k in published.in_order() if k not in handled and k not in lettered]


def test_redis_restart_starts_a_new_sequence_and_accounts_for_the_old_one(
    redis_stack: LocalStack, own_redis: Restartable
) -> None:
    """One Redis for ingress dedup, the FIFO state and the counter, restarted empty mid-group.

    e-0..e-4 (numbers 1-5) are published one after another and handled; e-5 (6) is published
    and its handler is held running, then e-6..e-9 (7-10) are published - they queue behind
    e-5 in the consumer (a group runs serially), unacked. So nothing is parked in Redis at the
    restart (what is parked is lost with it: the FINDING test below). Redis is stopped (its
    process group) and started empty on the same port; e-5's handler returns; the producer
    keeps publishing e-10..e-29, which the counter, created again in a new epoch, numbers 1-20.
    The consumer's gate sees the group's state go back (its own witness: ALERT
    ``store_rollback``) and restores it; e-5, in flight, runs once (issue 24, defect 3); the
    new epoch starts the group's sequence again, so e-10..e-29 all run (defect 2: they used to
    be acked as duplicates or dead-lettered as reused numbers); e-6..e-9 of the old sequence
    run or, once the new sequence began, are dead-lettered ``fifo_sequence_restarted`` with an
    ALERT. Every published key ends handled or dead-lettered with a reason.
    """
    stack = redis_stack
    url = redis_url_of(own_redis)
    group = f"ledger-{uuid.uuid4().hex[:8]}"
    keys = [f"e-{i}" for i in range(30)]
    holding, release = threading.Event(), threading.Event()

    def hold_the_sixth(message: Message) -> None:
        if message.attributes.get(attr.DEDUP_KEY) == "e-5" and not release.is_set():
            holding.set()
            release.wait(timeout=30)

    producer = GroupProducer(stack, url, group)
    dead = DeadLetters(stack)
    try:
        with (
            decision_log() as log,
            running_consumer(stack, "redis-restart", before_effect=hold_the_sixth) as record,
        ):
            started = time.monotonic()
            for i, key in enumerate(keys[:5]):
                producer.publish(key)
                wait_until(lambda n=i + 1: len(record.handled_keys()) >= n, timeout=20, what=key)
            producer.publish("e-5")
            wait_until(holding.is_set, timeout=20, what="e-5 running in its handler")
            for key in keys[6:10]:
                producer.publish(key)
            assert record.outcomes_of("parked") == [], "parked before the restart"
            own_redis.restart()  # stop the process group, start again: every key is gone
            restarted = time.monotonic()
            release.set()
            producer.publish_steadily(keys[10:], interval=0.05)
            wait_until(producer.done, timeout=30, what="the producer's last publish")
            assert producer.error is None, producer.error
            wait_until(
                lambda: not unaccounted(producer.published, record, dead.pulled()),
                # The new sequence waits out the lease the restart fenced (60 s) once.
                timeout=150,
                what="every published key handled or dead-lettered",
            )
            settled = time.monotonic()
    finally:
        producer.close()
        dead.close()

    numbers = producer.published.numbers
    assert list(numbers) == keys
    assert [numbers[k] for k in keys[:10]] == list(range(1, 11))
    assert [numbers[k] for k in keys[10:]] == list(range(1, 21)), "the counter did not restart"
    assert unaccounted(producer.published, record, dead) == []
    assert all(reason for _, reason in dead.letters), dead.letters
    handled = record.handled_keys()
    assert set(keys[10:]) <= set(handled), "the new sequence's messages must all run"
    assert handled.count("e-5") == 1, "the message in flight at the restart runs once"
    old = {key for key, reason in dead.letters if reason == REASON_SEQUENCE_RESTARTED}
    assert {key for key, _ in dead.letters} <= old <= set(keys[6:10]), dead.letters
    assert set(keys[5:10]) <= set(handled) | old
    # Named one by one, or together where the new sequence began on copies parked in the old.
    restarted_alerts = [
        m
        for m in log.alerts
        if "belongs to an earlier sequence" in m or "parked in the old one dead-lettered" in m
    ]
    assert restarted_alerts or not old, log.alerts
    assert any(m.startswith("ALERT: the store lost writes") for m in log.alerts), log.alerts
    reused = restarted_alerts
    print(
        f"redis restart: {len(dead.letters)} dead letters {sorted(dead.letters)}, "
        f"{len(reused)} ALERT(s); settled {settled - restarted:.2f}s after the restart, "
        f"{settled - started:.2f}s in all; handled {record.handled}"
    )


class SilentLossError(AssertionError):
    """Published keys that were neither handled nor dead-lettered (the FINDING below)."""


def test_redis_restart_while_messages_are_parked_never_loses_them_silently(
    redis_stack: LocalStack, own_redis: Restartable
) -> None:
    """Found here, then fixed - the exact sequence (Redis backend, one Redis for everything,
    one Consumer that never restarts, default policies: gap ``wait``):

    1. e-0..e-4 published (numbers 1-5) and handled.
    2. e-5 (6) published; its handler fails once (a dependency blip): the gate parks a copy of
       e-5 to retry after the backoff (8 s here) and nacks; the redelivered copy is acked as
       ``retrying`` (the parked copy stands for it).
    3. e-6..e-9 (7-10) published: each is early (the group waits for 6), so the gate parks it
       in Redis and the consumer acks it - Pub/Sub no longer has it for this subscription.
    4. Redis is restarted empty (no persistence): the parked e-5..e-9 go with the group's
       state and the counter.
    5. The producer keeps publishing: e-10..e-19 get numbers 1-10 again. The gate's witness
       sees the state go back and logs ``ALERT: the store lost writes ... parked
       again from this process's copies: [6, 7, 8, 9, 10]``, restores last processed 5, and
       dead-letters all ten reissued keys ``fifo_sequence_reused`` (each with an ALERT).
    6. e-20..e-22 (11-13) are published.

    Before the fix e-5..e-9 were neither handled nor dead-lettered: named by number only in
    the ALERT, and the group waited at 6 for good. Now the gate parks them again from the
    copies it kept (``FifoGate._parked_copies``), the ALERT says so, and e-5..e-9 then
    e-20..e-22 run in order.
    """
    stack = redis_stack
    url = redis_url_of(own_redis)
    group = f"parked-{uuid.uuid4().hex[:8]}"
    keys = [f"e-{i}" for i in range(23)]
    blip = threading.Event()

    def fail_the_sixth_once(message: Message) -> None:
        if message.attributes.get(attr.DEDUP_KEY) == "e-5" and not blip.is_set():
            blip.set()
            raise RuntimeError("the handler's dependency blipped")

    def parked_keys() -> set[str]:
        return {k for k, _ in record.outcomes_of("parked")}

    def decided(wanted: list[str]) -> bool:
        return set(wanted) <= set(record.handled_keys()) | dead.pulled().lettered_keys()

    producer = GroupProducer(stack, url, group)
    dead = DeadLetters(stack)
    try:
        with (
            decision_log() as log,
            running_consumer(
                stack,
                "redis-restart-parked",
                before_effect=fail_the_sixth_once,
                retry_backoff=timedelta(seconds=8),
            ) as record,
        ):
            for i, key in enumerate(keys[:5]):
                producer.publish(key)
                wait_until(lambda n=i + 1: len(record.handled_keys()) >= n, timeout=20, what=key)
            producer.publish("e-5")
            wait_until(lambda: record.outcomes_of("retry"), timeout=20, what="e-5 failing once")
            for key in keys[6:10]:
                producer.publish(key)
            wait_until(
                lambda: parked_keys() >= set(keys[6:10]),
                timeout=20,
                what="e-6..e-9 parked (acked, kept in Redis)",
            )
            assert "e-5" not in record.handled_keys(), "e-5 retried before the restart (slow?)"
            own_redis.restart()  # stop the process group, start again: every key is gone
            producer.publish_steadily(keys[10:20], interval=0.05)
            wait_until(producer.done, timeout=30, what="the producer's last publish")
            assert producer.error is None, producer.error
            wait_until(
                lambda: decided(keys[10:20]),
                timeout=30,
                what="e-10..e-19 (numbers 1-10 again) handled or dead-lettered",
            )
            for key in keys[20:]:
                producer.publish(key)
            wait_until(lambda: decided(keys), timeout=40, what="every key handled or dead-lettered")
            status = cli(stack, "status", "--consumer-id", "redis-restart-parked")
            dead.pull()
    finally:
        producer.close()
        dead.close()

    assert [producer.published.numbers[k] for k in keys[10:]] == list(range(1, 14))
    rollback = [m for m in log.alerts if m.startswith("ALERT: the store lost writes")]
    assert rollback, log.alerts  # detected: the gate names the lost numbers
    lost = unaccounted(producer.published, record, dead)
    if lost:
        stuck = [k for k in lost if k in keys[20:]]  # parked after the restart (waited for)
        raise SilentLossError(
            f"neither handled nor dead-lettered: {[k for k in lost if k not in stuck]} "
            f"(gone with Redis), {stuck} (parked behind them); handled {record.handled}; "
            f"dead letters {dead.letters}; first ALERT {rollback[0]!r}; "
            f"status:\n{status.stdout}"
        )
