"""bench/fifo: consumer throughput by number of groups, and FIFO vs unordered consumption.

Run with ``make bench`` (or ``python -m bench.fifo``); it starts its own emulators and Redis.
The sequencer half of the FIFO benchmark is ``bench/fifo_sequencer.py``.

* **groups**: the same number of messages spread over 1, 4, 16 and 64 groups, consumed by one
  :class:`Consumer` (concurrency 16) whose handler does 5 ms of I/O. One group is serial by
  definition; more groups run in parallel. Target: 16 groups >= 4x one group.
* **fifo vs unordered**: the same messages with and without ``fifo_group``/``fifo_seq``, both
  through the Consumer (gate vs dedup), 16 groups.

Both use the Redis backend for the gate and dedup state; messages are published beforehand, so
the figure is consumption alone. Ratios are within one run.
"""

from __future__ import annotations

import argparse
import threading
import time
import uuid

from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from bench.common import Servers, local_servers, write_result
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.subscriber import Consumer
from pubsub_toolkit.message import Message

HANDLER_IO_SECONDS = 0.005
CONCURRENCY = 16


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


def consume(servers: Servers, messages: int, groups: int, *, fifo: bool) -> float:
    """Messages per second for one Consumer draining a prepared subscription."""
    project, sub = _prepare(messages, groups, fifo=fifo)
    handled = 0
    lock = threading.Lock()
    done = threading.Event()

    def handler(message: Message) -> None:
        nonlocal handled
        time.sleep(HANDLER_IO_SECONDS)  # the handler's I/O (a database call, an HTTP request)
        with lock:
            handled += 1
            if handled >= messages:
                done.set()

    env = {
        "GOOGLE_CLOUD_PROJECT": project,
        "FINAL_TOPIC": "final",
        "DEAD_LETTER_TOPIC": "dead-letter",
        "STORE_BACKEND": "redis",
        "REDIS_URL": servers.redis_url,
        "CONSUMER_ID": f"bench-{uuid.uuid4().hex[:6]}",
    }
    processor = MessageProcessor.from_settings(
        Settings.from_env(env), ConsumerSettings.from_env(env), handler
    )
    consumer = Consumer(sub, processor, concurrency=CONCURRENCY)
    started = time.perf_counter()
    consumer.start()
    finished = done.wait(timeout=300)
    elapsed = time.perf_counter() - started
    consumer.stop()
    if not finished:
        raise RuntimeError(f"only {handled}/{messages} handled in 300 s")
    return messages / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=960)
    args = parser.parse_args()
    with local_servers() as servers:
        by_groups = {}
        for groups in (1, 4, 16, 64):
            by_groups[groups] = round(consume(servers, args.messages, groups, fifo=True), 1)
            print(f"{groups:>3} groups: {by_groups[groups]:>7.1f} msgs/s", flush=True)
        unordered = round(consume(servers, args.messages, 16, fifo=False), 1)
        print(f"unordered (16 'groups' of keys): {unordered:.1f} msgs/s")
    result = {
        "messages": args.messages,
        "concurrency": CONCURRENCY,
        "handler_io_ms": HANDLER_IO_SECONDS * 1000,
        "backend": "redis",
        "fifo_msgs_per_s_by_groups": by_groups,
        "speedup_16_vs_1_group": round(by_groups[16] / by_groups[1], 2),
        "unordered_msgs_per_s": unordered,
        "fifo_16_groups_vs_unordered": round(by_groups[16] / unordered, 3),
        "targets": {"speedup_16_vs_1_group": 4.0},
    }
    path = write_result("fifo", result)
    print(
        f"16 vs 1 group: {result['speedup_16_vs_1_group']}x; FIFO vs unordered: "
        f"{result['fifo_16_groups_vs_unordered']}x; wrote {path}"
    )


if __name__ == "__main__":
    main()
