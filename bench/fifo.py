"""bench/fifo: consumer throughput by number of groups, FIFO vs unordered, batched vs one by one,
and what the gate costs its store - state writes per message, reads per sweep.

Run with ``make bench`` (or ``python -m bench.fifo``); it starts its own emulators and Redis.
The sequencer half of the FIFO benchmark is ``bench/fifo_sequencer.py``.

* **groups**: the same number of messages spread over 1, 4, 16 and 64 groups, consumed by one
  :class:`Consumer` (concurrency 16) whose handler does 5 ms of I/O. One group is serial by
  definition; more groups run in parallel. Target: 16 groups >= 4x one group.
* **fifo vs unordered**: the same messages with and without ``fifo_group``/``fifo_seq``, both
  through the Consumer (gate vs dedup), 16 groups.
* **batched vs one by one**: one group (and 16), the handler taking lists of up to 50
  consecutive messages (``batch=50``) for the same 5 ms of I/O per call - one downstream write
  per batch, as a Sequential Convoy batches its downstream writes.
* **store writes per message**: every variant's FIFO store is wrapped by
  :class:`bench.counting.CountingFifoStore`; state writes (``save``) and all writes (with
  ``park``/``unpark``) per message are machine-independent counts. Target: <= 1.0 state write
  per in-order message, amortized (the held lease: n + 1 for n in a row), one by one and batched.
* **reads per sweep**: 10,000 idle groups and 10 with parked work, on Redis and on Firestore;
  one sweep round (``gate.groups()`` and ``gate.sweep`` of each) by a fresh gate (a restarted
  process) and by the gate that did the work, counted as billed reads (a listing costs what it
  returns). Target: O(groups needing attention), not O(groups).

The variants run in rounds, each round in a rotated order (the machines are shared and noisy;
only figures from one run are compared); the reported figure is each variant's median. Redis
holds the gate and dedup state for the throughput runs.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from bench.common import Servers, local_servers, write_result
from bench.counting import CountingFifoStore
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.gate import FifoGate
from pubsub_toolkit.consumer.processor import MessageProcessor, gate_policy
from pubsub_toolkit.consumer.subscriber import Consumer
from pubsub_toolkit.dead_letters.send import DeadLetterer
from pubsub_toolkit.dedup.idempotent import IdempotentProcessor
from pubsub_toolkit.message import Message
from pubsub_toolkit.observability import DecisionLog
from pubsub_toolkit.producer.sink import PubSubSink
from pubsub_toolkit.stores.factory import backend_from_settings

HANDLER_IO_SECONDS = 0.005
CONCURRENCY = 16
BATCH = 50
IDLE_GROUPS = 10_000
ACTIVE_GROUPS = 10
# The previous figures (bench/results/fifo.json before the held lease and batching, 2026-11-29).
PREVIOUS = {"speedup_16_vs_1_group": 4.95, "fifo_16_groups_vs_unordered": 0.559}


@dataclass(frozen=True)
class Variant:
    name: str
    groups: int
    fifo: bool = True
    batch: int = 1


VARIANTS = (
    Variant("fifo_1_group", 1),
    Variant("fifo_4_groups", 4),
    Variant("fifo_16_groups", 16),
    Variant("fifo_64_groups", 64),
    Variant("unordered_16", 16, fifo=False),
    Variant("batched_1_group", 1, batch=BATCH),
    Variant("batched_16_groups", 16, batch=BATCH),
)


def _prepare(messages: int, groups: int, *, fifo: bool) -> tuple[str, str]:
    project = f"bench-{uuid.uuid4().hex[:8]}"
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=f"projects/{project}/topics/final").name
    publisher.create_topic(name=f"projects/{project}/topics/dead-letter")
    sub = subscriber.create_subscription(
        name=f"projects/{project}/subscriptions/final-sub", topic=topic, ack_deadline_seconds=60
    ).name
    subscriber.close()
    futures = []
    for i in range(messages):
        group, seq = f"g{i % groups}", i // groups + 1
        attrs = {"dedup_key": f"{group}-{seq}"}
        if fifo:
            attrs |= {"fifo_group": group, "fifo_seq": str(seq)}
        futures.append(publisher.publish(topic, b"x" * 128, **attrs))
    for future in futures:
        future.result(timeout=60)
    return project, sub


def _processor(
    env: dict[str, str], handler: Callable[[Any], None], *, batch: int
) -> tuple[MessageProcessor, CountingFifoStore]:
    """What MessageProcessor.from_settings wires, with the FIFO store counted."""
    settings, consumer = Settings.from_env(env), ConsumerSettings.from_env(env)
    backend = backend_from_settings(settings)
    store = CountingFifoStore(backend.fifo_store())
    log = DecisionLog(consumer.consumer_id)
    dead_letters = DeadLetterer(PubSubSink(), settings.dead_letter_topic, log)
    gate = FifoGate(
        store,  # type: ignore[arg-type]  # a FifoStore by shape
        consumer=consumer.consumer_id,
        handler=handler,
        dead_letters=dead_letters,
        policy=gate_policy(consumer, completed_retention=settings.dedup_ttl),
        log=log,
        batch=batch,
    )
    dedup = IdempotentProcessor(
        backend.dedup_store(),
        namespace=consumer.consumer_id,
        lease=settings.dedup_lease,
        ttl=settings.dedup_ttl,
        log=log,
    )
    processor = MessageProcessor(handler=handler, dedup=dedup, gate=gate, dead_letters=dead_letters)
    return processor, store


def consume(servers: Servers, messages: int, variant: Variant) -> dict[str, float]:
    """Messages per second for one Consumer draining a prepared subscription, and the FIFO
    store's writes per message."""
    project, sub = _prepare(messages, variant.groups, fifo=variant.fifo)
    handled = 0
    lock = threading.Lock()
    done = threading.Event()

    def handler(received: Message | list[Message]) -> None:
        nonlocal handled
        time.sleep(HANDLER_IO_SECONDS)  # the handler's I/O (one database call per call)
        with lock:
            handled += len(received) if isinstance(received, list) else 1
            if handled >= messages:
                done.set()

    env = {
        "GOOGLE_CLOUD_PROJECT": project,
        "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
        "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
        "PUBSUB_TOOLKIT_STORE_BACKEND": "redis",
        "PUBSUB_TOOLKIT_REDIS_URL": servers.redis_url,
        "PUBSUB_TOOLKIT_CONSUMER_ID": f"bench-{uuid.uuid4().hex[:6]}",
    }
    processor, store = _processor(env, handler, batch=variant.batch)
    consumer = Consumer(sub, processor, concurrency=CONCURRENCY)
    started = time.perf_counter()
    consumer.start()
    finished = done.wait(timeout=300)
    elapsed = time.perf_counter() - started
    consumer.stop()
    if not finished:
        raise RuntimeError(f"{variant.name}: only {handled}/{messages} handled in 300 s")
    return {
        "msgs_per_s": messages / elapsed,
        "state_writes_per_message": store.calls["save"] / messages,
        "writes_per_message": store.writes / messages,
        "reads_per_message": store.reads / messages,
    }


def sweep_reads(servers: Servers, backend_name: str) -> dict[str, int]:
    """Billed reads of one sweep round over IDLE_GROUPS idle groups and ACTIVE_GROUPS with a
    parked message (their head missing), by a fresh gate and by the gate that wrote them."""
    consumer_id = f"sweep-{uuid.uuid4().hex[:6]}"
    env = {
        "GOOGLE_CLOUD_PROJECT": f"bench-{uuid.uuid4().hex[:8]}",
        "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
        "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
        "PUBSUB_TOOLKIT_STORE_BACKEND": backend_name,
        "PUBSUB_TOOLKIT_REDIS_URL": servers.redis_url,
        "PUBSUB_TOOLKIT_CONSUMER_ID": consumer_id,
    }
    settings, consumer = Settings.from_env(env), ConsumerSettings.from_env(env)
    policy = gate_policy(consumer, completed_retention=settings.dedup_ttl)

    def gate() -> tuple[FifoGate, CountingFifoStore]:
        store = CountingFifoStore(backend_from_settings(settings).fifo_store())
        made = FifoGate(store, consumer=consumer_id, handler=lambda _m: None, policy=policy)  # type: ignore[arg-type]
        return made, store

    def message(group: str, seq: int) -> Message:
        attributes = {"fifo_group": group, "fifo_seq": str(seq), "dedup_key": f"{group}-{seq}"}
        return Message(b"x", attributes, message_id=f"{group}-{seq}")

    writer, writer_store = gate()
    for n in range(IDLE_GROUPS):
        writer.deliver(message(f"idle-{n}", 1), f"idle-{n}", 1)
    for n in range(ACTIVE_GROUPS):
        writer.deliver(message(f"active-{n}", 2), f"active-{n}", 2)  # #1 missing: parked
    writer.release_held()
    figures: dict[str, int] = {}
    for label, (sweeper, store) in (
        ("writing_gate", (writer, writer_store)),
        ("fresh_gate", gate()),
    ):
        store.reset()
        groups = sweeper.groups()
        for group in groups:
            sweeper.sweep(group)
        figures[f"{label}_groups_visited"] = len(groups)
        figures[f"{label}_reads_per_sweep"] = store.reads
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=960)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {v.name: [] for v in VARIANTS}
    with local_servers() as servers:
        for round_ in range(args.rounds):
            shift = round_ % len(VARIANTS)
            for variant in VARIANTS[shift:] + VARIANTS[:shift]:  # a rotated order per round
                figures = consume(servers, args.messages, variant)
                runs[variant.name].append(figures)
                print(
                    f"round {round_ + 1} {variant.name:>18}: {figures['msgs_per_s']:>7.1f} msgs/s,"
                    f" {figures['state_writes_per_message']:.3f} state writes/msg",
                    flush=True,
                )
        sweeps = {name: sweep_reads(servers, name) for name in ("redis", "firestore")}
        print(f"sweep reads: {sweeps}", flush=True)

    def med(name: str, key: str = "msgs_per_s") -> float:
        return statistics.median(run[key] for run in runs[name])

    by_groups = {v.groups: round(med(v.name), 1) for v in VARIANTS[:4]}
    result = {
        "messages": args.messages,
        "rounds": args.rounds,
        "concurrency": CONCURRENCY,
        "handler_io_ms": HANDLER_IO_SECONDS * 1000,
        "batch": BATCH,
        "backend": "redis",
        "fifo_msgs_per_s_by_groups": by_groups,
        "speedup_16_vs_1_group": round(by_groups[16] / by_groups[1], 2),
        "unordered_msgs_per_s": round(med("unordered_16"), 1),
        "fifo_16_groups_vs_unordered": round(by_groups[16] / med("unordered_16"), 3),
        "batched_msgs_per_s": {
            "1": round(med("batched_1_group"), 1),
            "16": round(med("batched_16_groups"), 1),
        },
        "batched_vs_one_by_one_1_group": round(med("batched_1_group") / by_groups[1], 2),
        "batched_vs_one_by_one_16_groups": round(med("batched_16_groups") / by_groups[16], 2),
        "state_writes_per_fifo_message": {
            name: round(med(name, "state_writes_per_message"), 3)
            for name in runs
            if name != "unordered_16"
        },
        "store_writes_per_fifo_message": {
            name: round(med(name, "writes_per_message"), 3)
            for name in runs
            if name != "unordered_16"
        },
        "sweep_with_10000_idle_and_10_active_groups": sweeps,
        "previous": PREVIOUS,
        "targets": {"speedup_16_vs_1_group": 4.0, "state_writes_per_fifo_message": 1.0},
        "per_round": runs,
    }
    path = write_result("fifo", result)
    print(
        f"16 vs 1 group: {result['speedup_16_vs_1_group']}x (was 4.95x); FIFO vs unordered: "
        f"{result['fifo_16_groups_vs_unordered']}x (was 0.559x); batched vs one by one (1 group): "
        f"{result['batched_vs_one_by_one_1_group']}x; wrote {path}"
    )


if __name__ == "__main__":
    main()
