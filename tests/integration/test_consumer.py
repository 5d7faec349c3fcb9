"""The Consumer on the Pub/Sub emulator with real stores: order per group, once, in parallel.

Messages are published to a topic *already numbered* (as the sequencer would) but in a
shuffled order, with re-published copies and forced redeliveries, so the toolkit's counters -
not the broker - must restore the order.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path

import pytest
from google.cloud import pubsub_v1

from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.subscriber import Consumer
from pubsub_toolkit.message import Message
from tests.conftest import repo_root
from tests.support.waiting import wait_until

GROUPS, PER_GROUP = 20, 100


def _topic_and_subscription(project: str, *, ordering: bool) -> tuple[str, str]:
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=f"projects/{project}/topics/final").name
    subscriber.create_subscription(
        request={
            "name": f"projects/{project}/subscriptions/final-sub",
            "topic": topic,
            "ack_deadline_seconds": 30,
            "enable_message_ordering": ordering,
        }
    )
    publisher.create_topic(name=f"projects/{project}/topics/dead-letter")
    subscriber.close()
    return topic, f"projects/{project}/subscriptions/final-sub"


def _publish_shuffled(topic: str, *, copies: int, seed: int) -> int:
    rng = random.Random(seed)
    batch = [(f"g{g:02d}", s) for g in range(GROUPS) for s in range(1, PER_GROUP + 1)]
    batch += rng.sample(batch, copies)  # re-published duplicates
    rng.shuffle(batch)
    publisher = pubsub_v1.PublisherClient()
    futures = [
        publisher.publish(
            topic, f"{g}:{s}".encode(), fifo_group=g, fifo_seq=str(s), dedup_key=f"{g}#{s}"
        )
        for g, s in batch
    ]
    for future in futures:
        future.result(timeout=60)
    return len(batch)


def _env(
    project: str, backend: str, request: pytest.FixtureRequest, consumer: str
) -> dict[str, str]:
    env = {
        "GOOGLE_CLOUD_PROJECT": project,
        "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
        "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
        "PUBSUB_TOOLKIT_STORE_BACKEND": backend,
        "PUBSUB_TOOLKIT_CONSUMER_ID": consumer,
        "PUBSUB_TOOLKIT_FIFO_GAP_TIMEOUT_SECONDS": "600",
    }
    if backend == "redis":
        env["PUBSUB_TOOLKIT_REDIS_URL"] = request.getfixturevalue("redis_url")
    else:
        request.getfixturevalue("firestore_emulator")
    return env


@pytest.mark.parametrize(
    ("backend", "ordering"),
    [
        # About a minute each (the flaky heads wait out the gate's retry backoff): in `make
        # test-slow` only. `make test` covers the rest lower down: order and once under
        # shuffles, copies and handler failures in the simulation's invariants and
        # tests/unit/test_fifo_gate.py; the Consumer on the emulator with Redis in
        # test_two_consumer_processes_keep_order_and_handle_nothing_twice below; the stores in
        # their contract suites (docs/reference/testing.md, "The pyramid").
        pytest.param("firestore", False, marks=pytest.mark.slow),
        pytest.param("redis", True, marks=pytest.mark.slow),
    ],
)
def test_shuffled_groups_with_duplicates_and_redeliveries_are_handled_in_order_once(
    request: pytest.FixtureRequest,
    pubsub_emulator: str,
    project_id: str,
    backend: str,
    ordering: bool,
) -> None:
    topic, subscription = _topic_and_subscription(project_id, ordering=ordering)
    _publish_shuffled(topic, copies=300, seed=11)
    seen: dict[str, list[int]] = defaultdict(list)
    lock = threading.Lock()
    flaky = {(f"g{g:02d}", s) for g in range(GROUPS) for s in range(1, PER_GROUP + 1, 9)}

    def handler(message: Message) -> None:
        key = (message.attributes["fifo_group"], int(message.attributes["fifo_seq"]))
        with lock:
            if key in flaky:  # fail once: the message is nacked and delivered again
                flaky.discard(key)
                raise RuntimeError("transient failure, please redeliver")
            seen[key[0]].append(key[1])

    env = _env(project_id, backend, request, f"consumer-{project_id}")
    processor = MessageProcessor.from_settings(
        Settings.from_env(env), ConsumerSettings.from_env(env), handler
    )
    with Consumer(subscription, processor, concurrency=8):

        def done() -> bool:
            with lock:
                return sum(len(v) for v in seen.values()) >= GROUPS * PER_GROUP

        try:
            wait_until(done, timeout=120, interval=0.2, what="every message to be handled")
        except AssertionError:
            with lock:
                counts = {f"g{g:02d}": len(seen.get(f"g{g:02d}", [])) for g in range(GROUPS)}
            gate = processor.gate
            states = {
                g: gate._store.load(gate.consumer, g) for g, n in counts.items() if n < PER_GROUP
            }
            raise AssertionError(f"groups not finished: {counts} {states}") from None

    assert dict(seen) == {f"g{g:02d}": list(range(1, PER_GROUP + 1)) for g in range(GROUPS)}
    assert not flaky, "every flaky message failed once and was redelivered"


def test_two_consumer_processes_keep_order_and_handle_nothing_twice(
    request: pytest.FixtureRequest, pubsub_emulator: str, project_id: str, tmp_path: Path
) -> None:
    topic, subscription = _topic_and_subscription(project_id, ordering=False)
    env = {**os.environ, **_env(project_id, "redis", request, f"shared-{project_id}")}
    log = tmp_path / "handled.log"
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.consumer_worker", subscription, str(log)],
            cwd=repo_root(),
            env=env,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for _ in range(2)
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        _publish_shuffled(topic, copies=200, seed=5)

        def lines() -> list[str]:
            return log.read_text().splitlines() if log.exists() else []

        wait_until(
            lambda: len(lines()) >= GROUPS * PER_GROUP,
            timeout=180,
            interval=0.2,
            what="both workers to handle every message",
        )
    finally:
        for worker in workers:
            os.killpg(worker.pid, signal.SIGTERM)
        codes = [worker.wait(timeout=60) for worker in workers]
    assert codes == [0, 0], "a worker did not stop gracefully"

    handled = [line.split() for line in lines()]
    by_group: dict[str, list[int]] = defaultdict(list)
    pids: set[str] = set()
    for group, seq, pid in handled:
        by_group[group].append(int(seq))
        pids.add(pid)
    assert len(handled) == GROUPS * PER_GROUP, "a message was handled twice"
    assert by_group == {f"g{g:02d}": list(range(1, PER_GROUP + 1)) for g in range(GROUPS)}
    assert len(pids) == 2, "both processes took part"
