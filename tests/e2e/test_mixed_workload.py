"""A mixed workload through the whole local stack, checked end to end.

2,000 publishes to origin with the official client: 20% are re-published duplicates, 20% are
delayed 1-5 s, 30% belong to 10 FIFO groups (numbered by the Publisher, then sent in a shuffled
order). A Consumer on the final topic (dedup + FIFO gate) records what it sees. Every distinct
message must arrive exactly once, no delayed one early, every group in order. The run's wall
time and rate go to bench/results/e2e_mixed.json.
"""

from __future__ import annotations

import random
import threading
import time
from collections import defaultdict

from google.cloud import firestore, pubsub_v1

from bench.common import write_result
from pubsub_toolkit import attributes as attr
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer import Consumer
from pubsub_toolkit.fifo.firestore_counter import FirestoreSequenceCounter
from pubsub_toolkit.local.stack import LocalStack
from pubsub_toolkit.message import Message
from pubsub_toolkit.processing import MessageProcessor
from tests.support.waiting import wait_until

TOTAL, GROUPS = 2000, 10
DUPLICATES, DELAYED, FIFO = TOTAL // 5, TOTAL // 5, TOTAL * 3 // 10
PLAIN = TOTAL - DUPLICATES - DELAYED - FIFO


def build_workload(rng: random.Random, counter: FirestoreSequenceCounter) -> list[dict[str, str]]:
    """The attribute sets to publish (data is the dedup key), duplicates included, shuffled."""
    unique: list[dict[str, str]] = []
    for i in range(PLAIN):
        unique.append({"dedup_key": f"plain-{i}"})
    for i in range(DELAYED):
        unique.append({"dedup_key": f"delayed-{i}", "delay_seconds": f"{rng.uniform(1, 5):.3f}"})
    for i in range(FIFO):
        group = f"group-{i % GROUPS}"
        seq = counter.reserve(group).first  # the sequencer numbers it, in publish order
        unique.append(
            {"dedup_key": f"fifo-{group}-{seq}", "fifo_group": group, "fifo_seq": str(seq)}
        )
    workload = unique + [dict(rng.choice(unique)) for _ in range(DUPLICATES)]
    rng.shuffle(workload)  # FIFO messages go out of order; duplicates anywhere
    return workload


def test_mixed_workload_exactly_once_on_time_in_order(stack: LocalStack) -> None:
    assert stack.topology is not None
    topology, env = stack.topology, {**stack.env, "CONSUMER_ID": "e2e-consumer"}
    counter = FirestoreSequenceCounter(firestore.Client(project=env["GOOGLE_CLOUD_PROJECT"]))
    workload = build_workload(random.Random(2030), counter)
    unique_keys = {a["dedup_key"] for a in workload}
    assert len(unique_keys) == TOTAL - DUPLICATES

    arrivals: dict[str, list[tuple[float, Message]]] = defaultdict(list)
    order: dict[str, list[int]] = defaultdict(list)
    lock = threading.Lock()

    def handler(message: Message) -> None:
        with lock:
            arrivals[message.attributes["dedup_key"]].append((time.time(), message))
            if attr.FIFO_GROUP in message.attributes:
                group = message.attributes[attr.FIFO_GROUP]
                order[group].append(int(message.attributes[attr.FIFO_SEQ]))

    processor = MessageProcessor.from_settings(
        Settings.from_env(env), ConsumerSettings.from_env(env), handler
    )
    started = time.monotonic()
    with Consumer(topology.final_sub, processor, concurrency=16):
        publisher = pubsub_v1.PublisherClient()
        futures = [
            publisher.publish(topology.origin, a["dedup_key"].encode(), **a) for a in workload
        ]
        for future in futures:
            future.result(timeout=120)
        wait_until(
            lambda: len(arrivals) >= len(unique_keys),
            timeout=300,
            interval=0.5,
            what="every distinct message on the final topic",
        )
        wall = time.monotonic() - started

        def quiet() -> bool:  # 2 s without any arrival: a late duplicate would have shown
            with lock:
                latest = max(t for copies in arrivals.values() for t, _ in copies)
            return time.time() - latest >= 2

        wait_until(quiet, timeout=60, what="the final topic to fall quiet")
    assert set(arrivals) == unique_keys
    doubled = {k: len(v) for k, v in arrivals.items() if len(v) > 1}
    assert doubled == {}, f"handled more than once: {doubled}"
    early = []
    for key, [(arrived, message)] in arrivals.items():
        if key.startswith("delayed-"):
            due = attr.parse_time(message.attributes["deliver_at"])
            if arrived < due.timestamp() or (message.publish_time and message.publish_time < due):
                early.append(key)
    assert early == []
    expected = {f"group-{g}": list(range(1, FIFO // GROUPS + 1)) for g in range(GROUPS)}
    assert dict(order) == expected
    write_result(
        "e2e_mixed",
        {
            "published": TOTAL,
            "duplicates": DUPLICATES,
            "delayed_1_5s": DELAYED,
            "fifo_groups": GROUPS,
            "fifo_messages": FIFO,
            "delivered_exactly_once": len(arrivals),
            "wall_s": round(wall, 2),
            "published_msgs_per_s": round(TOTAL / wall, 1),
        },
    )
