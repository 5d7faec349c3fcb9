"""The Pub/Sub emulator restarts in the middle of a stream: nothing is lost, nothing doubled.

A Pub/Sub emulator of the test's own sits behind a TCP proxy (the clients' only address). Mid
stream the proxy cuts every connection and the emulator is stopped and started again on the
same port - it comes back empty, with message ids starting at "1" again. The test recreates the
topic and subscription, then reopens the proxy. Meanwhile:

* the producer keeps publishing through :class:`PubSubSink`; every failure is a TransientError
  it retries (an ambiguous timeout may publish a copy twice - the consumer drops the copy);
* the streaming-pull :class:`Consumer` (dedup + FIFO gate on Redis, which outlives the broker,
  as Firestore/Memorystore would) is *not* restarted: its stream must recover by itself;
* every message is handled exactly once and the FIFO group stays in order across the restart,
  although the second half's message ids repeat the first half's: the toolkit keys on
  ``dedup_key`` / ``(fifo_group, fifo_seq)`` - had it keyed on message_id, the second half
  would have been dropped as duplicates.

Messages the old emulator had accepted but not delivered would die with it (a real Pub/Sub does
not lose them), so the first half is fully handled before the restart: the test asserts what
the toolkit controls.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import timedelta

import pytest
from google.cloud import pubsub_v1

from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.subscriber import Consumer
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.errors import TransientError
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.producer.sink import PubSubSink
from pubsub_toolkit.stores.dedup.redis import RedisDedupStore
from pubsub_toolkit.stores.fifo_state.redis import RedisFifoStore
from tests.support.restartable import Restartable
from tests.support.sinks import RecordingSink
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import wait_until

PROJECT = "fault-restart"
TOPIC = f"projects/{PROJECT}/topics/final"
SUB = f"projects/{PROJECT}/subscriptions/final-sub"
PER_PHASE = 30  # 20 plain messages and 10 of one FIFO group per phase


def _create_topology(
    admin_pub: pubsub_v1.PublisherClient, admin_sub: pubsub_v1.SubscriberClient
) -> None:
    admin_pub.create_topic(name=TOPIC, timeout=10)
    admin_sub.create_subscription(name=SUB, topic=TOPIC, ack_deadline_seconds=10, timeout=10)


def _phase(label: str, first_seq: int) -> list[OutboundMessage]:
    plain = [
        OutboundMessage(f"{label}{i}".encode(), {"dedup_key": f"{label}-{i}"}) for i in range(20)
    ]
    grouped = [
        OutboundMessage(
            f"g{seq}".encode(),
            {"dedup_key": f"g#{seq}", "fifo_group": "g", "fifo_seq": str(seq)},
        )
        for seq in range(first_seq, first_seq + 10)
    ]
    return [m for pair in zip(plain[:10], grouped, strict=True) for m in pair] + plain[10:]


def _publish_until_accepted(
    sink: PubSubSink, messages: list[OutboundMessage], log: list[str]
) -> None:
    """What a producer does: retry a transient failure (same message, same dedup_key)."""
    deadline = time.monotonic() + 90
    for message in messages:
        while True:
            try:
                sink.publish(TOPIC, message)
                break
            except TransientError as exc:
                log.append(type(exc.__cause__).__name__)
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)  # a producer's backoff before retrying


@pytest.mark.usefixtures("redis_url")
def test_consumer_and_producer_ride_out_an_emulator_restart(
    own_pubsub: Restartable,
    redis_url: str,
    unique: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Admin clients talk to the emulator itself; everything under test goes through the proxy.
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", own_pubsub.host)
    admin_pub, admin_sub = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    _create_topology(admin_pub, admin_sub)

    handled: list[tuple[str, str]] = []  # (dedup_key, message_id) per handler run
    lock = threading.Lock()

    def handler(message: Message) -> None:
        with lock:
            handled.append((message.attributes["dedup_key"], message.message_id))

    def keys() -> Counter[str]:
        with lock:
            return Counter(k for k, _ in handled)

    dead_sink = RecordingSink()
    log = DecisionLog("restart-consumer")
    processor = MessageProcessor(
        handler=handler,
        dedup=IdempotentProcessor(
            RedisDedupStore.from_url(redis_url, prefix=f"restart-{unique}:"),
            namespace="restart-consumer",
            lease=timedelta(seconds=30),
            ttl=timedelta(hours=1),
        ),
        gate=FifoGate(
            RedisFifoStore.from_url(redis_url, prefix=f"restart-fifo-{unique}:"),
            consumer="restart-consumer",
            handler=handler,
            dead_letters=DeadLetterer(dead_sink, "projects/p/topics/dlq", log),
            log=log,
        ),
    )
    first, second = _phase("a", 1), _phase("b", 11)
    failures: list[str] = []

    with TcpProxy(own_pubsub.port) as proxy:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", proxy.address)
        sink = PubSubSink(pubsub_v1.PublisherClient(), timeout=timedelta(seconds=5))
        consumer = pubsub_v1.SubscriberClient()
        with Consumer(SUB, processor, concurrency=4, subscriber=consumer) as running:
            _publish_until_accepted(sink, first, failures)
            wait_until(lambda: len(keys()) == PER_PHASE, timeout=60, what="the first half")
            with lock:
                first_ids = {mid for _, mid in handled}

            proxy.close_gate()  # every client connection is cut; reconnects are refused
            own_pubsub.restart()  # same port, empty: no topics, ids restart at "1"
            producer = threading.Thread(
                target=_publish_until_accepted, args=(sink, second, failures)
            )
            producer.start()  # publishes fail (and are retried) while the broker is away
            wait_until(lambda: failures, timeout=30, what="the producer to meet the outage")
            _create_topology(admin_pub, admin_sub)
            proxy.open_gate()

            producer.join(timeout=120)
            assert not producer.is_alive(), "the producer never got its messages accepted"
            wait_until(lambda: len(keys()) == 2 * PER_PHASE, timeout=90, what="the second half")
            assert running.stream_error() is None, "the consumer's stream did not recover"
        sink.close()

    counts = keys()
    assert set(counts) == {m.attributes["dedup_key"] for m in first + second}
    assert set(counts.values()) == {1}, {k: n for k, n in counts.items() if n > 1}
    with lock:
        order = [int(k.split("#")[1]) for k, _ in handled if k.startswith("g#")]
        second_keys = {m.attributes["dedup_key"] for m in second}
        second_ids = {mid for k, mid in handled if k in second_keys}
    assert order == list(range(1, 21)), "the FIFO group broke order across the restart"
    # The proof that message ids were reused: had dedup keyed on them, these were "duplicates".
    assert first_ids & second_ids, "the restarted emulator did not reuse message ids"
    assert dead_sink.published == {}
    admin_pub.stop()
    admin_sub.close()
