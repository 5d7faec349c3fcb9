"""16 copies of one message arrive at the same instant: one effect, at ingress and at consumers.

``tests/integration/test_dedup_concurrency.py`` proves it for the dedup store alone. This adds
the two places copies really meet, on the real stores (Redis, Firestore emulator):

* **ingress** - 16 threads handle the same origin message at once (as 16 function instances
  would after Pub/Sub redelivered it): exactly one copy reaches the final topic per key; every
  other delivery is acked as a duplicate (a live claim elsewhere is retried, as a redelivery);
* **consumer, dedup path** - 16 threads run the same final-topic message through
  :class:`MessageProcessor`: the handler runs once per key;
* **consumer, FIFO path** - 16 threads each deliver the whole group, shuffled, at the same
  time: every number is handled once and in order (what is parked is released by the holder
  or by the sweeper, as the Consumer's sweeper thread would).
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TypeVar

import pytest

from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.core.fifo_policy import GateOutcome
from pubsub_toolkit.core.ingress import IngressOutcome
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.errors import ClaimInProgressError
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.stores.fifo_state.base import FifoStore
from tests.support.sinks import RecordingSink
from tests.support.stores import store_factory
from tests.support.waiting import wait_until

COPIES = 16
KEYS = 20
SEQS = 10
FINAL, DLQ = "projects/p/topics/final", "projects/p/topics/dlq"
T = TypeVar("T")


def _retrying(attempt: Callable[[], T]) -> T:
    """A delivery that met a live claim elsewhere is nacked and redelivered: try again."""

    def once() -> T | None:
        try:
            return attempt()
        except ClaimInProgressError:
            return None

    return wait_until(once, timeout=60, interval=0.01, what="a claimed key to settle")


def _all_at_once(work: Callable[[int], None]) -> None:
    with ThreadPoolExecutor(COPIES) as pool:
        for future in [pool.submit(work, i) for i in range(COPIES)]:
            future.result()


def _fifo_store(request: pytest.FixtureRequest, backend: str) -> FifoStore:
    import uuid

    if backend == "redis":
        from pubsub_toolkit.stores.fifo_state.redis import RedisFifoStore

        url = request.getfixturevalue("redis_url")
        return RedisFifoStore.from_url(url, prefix=f"copies-{uuid.uuid4().hex[:8]}:")
    from google.cloud import firestore

    from pubsub_toolkit.stores.fifo_state.firestore import FirestoreFifoStore

    request.getfixturevalue("firestore_emulator")
    return FirestoreFifoStore(firestore.Client(project=f"copies-{uuid.uuid4().hex[:8]}"))


@pytest.mark.parametrize("backend", ["redis", "firestore"])
def test_sixteen_copies_at_ingress_publish_once(
    request: pytest.FixtureRequest, backend: str
) -> None:
    sink = RecordingSink()
    ingress = Ingress(
        store=store_factory(request, backend)(),
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(hours=1),
    )
    outcomes: Counter[IngressOutcome] = Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(COPIES)

    def instance(_index: int) -> None:
        for k in range(KEYS):
            message = Message(f"body {k}".encode(), {"dedup_key": f"key-{k}"}, message_id=str(k))
            barrier.wait(timeout=60)  # all 16 copies of key k at the same instant
            result = _retrying(lambda m=message: ingress.handle(m))  # type: ignore[misc]
            with lock:
                outcomes[result.outcome] += 1

    _all_at_once(instance)
    published = Counter(m.attributes["dedup_key"] for m in sink.on(FINAL))
    assert published == Counter({f"key-{k}": 1 for k in range(KEYS)})
    assert outcomes == {
        IngressOutcome.PUBLISHED: KEYS,
        IngressOutcome.DUPLICATE: KEYS * (COPIES - 1),
    }
    assert sink.on(DLQ) == []


@pytest.mark.parametrize("backend", ["redis", "firestore"])
def test_sixteen_copies_at_the_consumer_run_the_handler_once(
    request: pytest.FixtureRequest, backend: str
) -> None:
    effects: Counter[str] = Counter()
    order: list[int] = []
    lock = threading.Lock()

    def handler(message: Message) -> None:
        with lock:
            effects[message.attributes["dedup_key"]] += 1
            if "fifo_seq" in message.attributes:
                order.append(int(message.attributes["fifo_seq"]))

    sink = RecordingSink()
    log = DecisionLog("copies")
    gate = FifoGate(
        _fifo_store(request, backend),
        consumer="copies",
        handler=handler,
        dead_letters=DeadLetterer(sink, DLQ, log),
        log=log,
    )
    processor = MessageProcessor(
        handler=handler,
        dedup=IdempotentProcessor(
            store_factory(request, backend)(),
            namespace="copies",
            lease=timedelta(seconds=30),
            ttl=timedelta(hours=1),
        ),
        gate=gate,
        dead_letters=DeadLetterer(sink, DLQ, log),
    )
    barrier = threading.Barrier(COPIES)
    plain = [Message(b"p", {"dedup_key": f"plain-{k}"}) for k in range(KEYS)]
    grouped = [
        Message(b"g", {"dedup_key": f"g#{s}", "fifo_group": "g", "fifo_seq": str(s)})
        for s in range(1, SEQS + 1)
    ]

    def instance(index: int) -> None:
        for message in plain:
            barrier.wait(timeout=60)
            _retrying(lambda m=message: processor.process(m))  # type: ignore[misc]
        mine = grouped[:]
        random.Random(index).shuffle(mine)
        barrier.wait(timeout=60)
        for message in mine:
            _retrying(lambda m=message: processor.process(m))  # type: ignore[misc]

    _all_at_once(instance)
    # What is still parked is the sweeper's to run (the Consumer runs it every second).
    for _ in range(SEQS + 1):
        if gate.sweep("g").outcome is GateOutcome.IDLE:
            break
    assert effects == Counter({m.attributes["dedup_key"]: 1 for m in plain + grouped})
    assert order == list(range(1, SEQS + 1))
    assert sink.published == {}
