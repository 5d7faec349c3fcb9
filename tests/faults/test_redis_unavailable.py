"""Redis goes away: every Redis-backed store fails CLOSED, nothing is published or run, and once
Redis is back each message has its effect exactly once.

Proves, against a redis-server of the test's own that is stopped and started again on the same
port (and against a port where nothing listens):

* the dedup store, the FIFO gate state and the sequence counter raise StoreUnavailableError (a
  TransientError: "deliver again"), never "assume new" or a guessed number;
* ingress raises (the push answers 5xx / the event is nacked, so Pub/Sub redelivers) and
  publishes nothing - not to the final topic, not to the dead-letter topic;
* the consumer side (dedup and FIFO gate) raises without running the handler;
* after Redis returns, the redelivery is processed once and a further copy is a duplicate.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.core.ingress import IngressOutcome
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.errors import StoreUnavailableError, TransientError
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.stores.counters.redis import RedisSequenceCounter
from pubsub_toolkit.stores.dedup.redis import RedisDedupStore
from pubsub_toolkit.stores.fifo_state.redis import RedisFifoStore
from pubsub_toolkit_local.processes import free_port
from tests.support.restartable import Restartable
from tests.support.sinks import RecordingSink

FINAL, DLQ = "projects/p/topics/final", "projects/p/topics/dlq"


def _ingress(url: str, sink: RecordingSink) -> Ingress:
    return Ingress(
        store=RedisDedupStore.from_url(url, prefix="fault:"),
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(hours=1),
    )


def _processor(url: str, handled: Counter[str], sink: RecordingSink) -> MessageProcessor:
    def handler(message: Message) -> None:
        handled[message.attributes.get("fifo_seq") or message.attributes["dedup_key"]] += 1

    log = DecisionLog("fault-consumer")
    dead_letters = DeadLetterer(sink, DLQ, log)
    return MessageProcessor(
        handler=handler,
        dedup=IdempotentProcessor(
            RedisDedupStore.from_url(url, prefix="fault:"),
            namespace="fault-consumer",
            lease=timedelta(seconds=30),
            ttl=timedelta(hours=1),
        ),
        gate=FifoGate(
            RedisFifoStore.from_url(url, prefix="fault-fifo:"),
            consumer="fault-consumer",
            handler=handler,
            dead_letters=dead_letters,
            log=log,
        ),
        dead_letters=dead_letters,
    )


def test_redis_stopped_then_restarted_fails_closed_then_processes_once(
    own_redis: Restartable,
) -> None:
    url = f"redis://{own_redis.host}/0"
    sink = RecordingSink()
    ingress = _ingress(url, sink)
    handled: Counter[str] = Counter()
    processor = _processor(url, handled, sink)
    counter = RedisSequenceCounter.from_url(url, prefix="fault-seq:")
    publisher = Publisher(sink, FINAL, counter)
    origin = Message(b"order", {"dedup_key": "order-1"}, message_id="1")
    plain = Message(b"x", {"dedup_key": "plain-1"}, message_id="2")
    grouped = Message(b"y", {"dedup_key": "g#1", "fifo_group": "g", "fifo_seq": "1"})

    # Redis works, and the clients hold pooled connections to it.
    assert counter.reserve("warm-up").first == 1
    assert ingress.handle(Message(b"w", {"dedup_key": "warm"})).outcome is IngressOutcome.PUBLISHED
    sink.published.clear()

    own_redis.stop()

    with pytest.raises(TransientError, match="Redis is unavailable"):
        ingress.handle(origin)
    with pytest.raises(TransientError, match="Redis is unavailable"):
        processor.process(plain)
    with pytest.raises(TransientError, match="Redis is unavailable"):
        processor.process(grouped)
    with pytest.raises(StoreUnavailableError):
        publisher.publish(b"z", fifo_group="g").result()  # no guessed number
    assert sink.published == {}, "something was published while the store was down"
    assert handled == Counter(), "a handler ran without its dedup/FIFO record"

    own_redis.start()  # same port, empty (no persistence): the redeliveries are new

    assert ingress.handle(origin).outcome is IngressOutcome.PUBLISHED
    assert ingress.handle(origin).outcome is IngressOutcome.DUPLICATE
    assert processor.process(plain) == "processed"
    assert processor.process(plain) == "duplicate"
    assert processor.process(grouped) == "processed"
    assert processor.process(grouped) == "duplicate"
    assert [m.attributes["dedup_key"] for m in sink.on(FINAL)] == ["order-1"]
    assert sink.on(DLQ) == []
    assert handled == Counter({"plain-1": 1, "1": 1})
    publisher.publish(b"z", fifo_group="g")
    assert sink.on(FINAL)[-1].attributes["fifo_seq"] == "1"


def test_a_port_where_nothing_listens_fails_closed_with_a_clear_error() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    sink = RecordingSink()
    handled: Counter[str] = Counter()
    with pytest.raises(StoreUnavailableError, match="Redis is unavailable"):
        _ingress(url, sink).handle(Message(b"a", {"dedup_key": "k"}, message_id="1"))
    processor = _processor(url, handled, sink)
    with pytest.raises(StoreUnavailableError):
        processor.process(Message(b"a", {"dedup_key": "k"}))
    with pytest.raises(StoreUnavailableError):
        processor.process(Message(b"a", {"fifo_group": "g", "fifo_seq": "1"}))
    with pytest.raises(StoreUnavailableError):
        RedisSequenceCounter.from_url(url).reserve("g")
    assert sink.published == {} and handled == Counter()
