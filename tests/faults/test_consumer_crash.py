"""A consumer process is SIGKILLed between a message's effect and its ack.

The process (``tests/support/crashing_consumer.py``: the ``Consumer`` library with the FIFO gate
and dedup, on a real store) kills itself right after the processor returned "processed" for
its N-th message - the effect happened and its record (dedup ``done`` / FIFO advance) committed,
the ack never left. A restarted consumer process then receives that message again. Proven, per
backend:

* the killed message comes back and is recognised as a **duplicate**: its effect is not repeated;
* every message's effect happens **exactly once** across both processes;
* the FIFO group's effects happen **in sequence order** across the crash.

How it comes back: ``broker`` waits for Pub/Sub's own redelivery; ``copy`` also re-publishes a
copy of every message (same attributes - what a producer retry or a replay delivers).

Both processes pull with unary calls (:class:`~pubsub_toolkit_cli.unary_pull.
UnaryPullSubscriber`): the emulator never unregisters a SIGKILLed *streaming* client's stream
and keeps handing that subscription's messages - the killed one's included - to the dead
stream, so a restarted streaming consumer would wait for them forever (real Pub/Sub does not).
With unary pull what the killed process held comes back when its lease (the subscription's 10 s
ack deadline) runs out. Still marked slow: it kills and restarts processes on real stores.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from google.cloud import pubsub_v1

from tests.conftest import repo_root
from tests.support.waiting import wait_until

SEQS = 12
PLAIN = 8
CRASH_AFTER = 6


def _start(subscription: str, log: Path, env: dict[str, str], *extra: str) -> subprocess.Popen[str]:
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.support.crashing_consumer", subscription, str(log), *extra],
        cwd=repo_root(),
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: stopped by group below
    )
    assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
    return worker


@pytest.mark.parametrize(
    ("backend", "redelivery"),
    [("redis", "copy"), ("firestore", "copy"), ("redis", "broker")],
)
@pytest.mark.timeout(420)
@pytest.mark.slow  # two consumer processes and a 10 s lease expiry per case
def test_killed_between_effect_and_ack_the_redelivery_repeats_nothing_and_keeps_order(
    request: pytest.FixtureRequest,
    pubsub_emulator: str,
    project_id: str,
    tmp_path: Path,
    backend: str,
    redelivery: str,
) -> None:
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=f"projects/{project_id}/topics/final").name
    subscription = subscriber.create_subscription(
        name=f"projects/{project_id}/subscriptions/final-sub", topic=topic, ack_deadline_seconds=10
    ).name
    publisher.create_topic(name=f"projects/{project_id}/topics/dead-letter")
    subscriber.close()
    if backend == "redis":
        redis_url = request.getfixturevalue("redis_url")
    else:
        request.getfixturevalue("firestore_emulator")  # sets FIRESTORE_EMULATOR_HOST
    env = {
        **os.environ,
        "GOOGLE_CLOUD_PROJECT": project_id,
        "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
        "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
        "PUBSUB_TOOLKIT_STORE_BACKEND": backend,
        "PUBSUB_TOOLKIT_CONSUMER_ID": f"crash-{project_id}",
        "PUBSUB_TOOLKIT_FIFO_GAP_TIMEOUT_SECONDS": "600",
    }
    if backend == "redis":
        env["PUBSUB_TOOLKIT_REDIS_URL"] = redis_url
    log = tmp_path / "consumer.log"

    def lines() -> list[list[str]]:
        return [line.split() for line in log.read_text().splitlines()] if log.exists() else []

    items = [(f"g#{s}", {"fifo_group": "g", "fifo_seq": str(s)}) for s in range(1, SEQS + 1)]
    items += [(f"p-{i}", {}) for i in range(PLAIN)]
    random.Random(7).shuffle(items)  # out of order: the gate must restore it

    def publish_all() -> None:
        for key, extra in items:
            publisher.publish(topic, key.encode(), dedup_key=key, **extra).result(timeout=10)

    first = _start(subscription, log, env, "--crash-after", str(CRASH_AFTER))
    second: subprocess.Popen[str] | None = None
    try:
        publish_all()
        assert first.wait(timeout=60) == -signal.SIGKILL, "the consumer did not crash"
        processed = [key for outcome, key, _ in lines() if outcome == "processed"]
        assert len(processed) == CRASH_AFTER
        killed_key = processed[-1]  # its effect and record committed; its ack never happened

        second = _start(subscription, log, env)
        if redelivery == "copy":
            publish_all()

        def all_handled() -> bool:
            return {key for kind, key, _ in lines() if kind == "handled"} == {k for k, _ in items}

        wait_until(all_handled, timeout=200, interval=0.2, what="every message to be handled")
        wait_until(
            lambda: ["duplicate", killed_key, str(second.pid)] in lines(),
            timeout=60,
            interval=0.2,
            what=f"the redelivery of {killed_key} to the restarted consumer",
        )
    finally:
        for worker in (first, second):
            if worker is not None and worker.poll() is None:
                os.killpg(worker.pid, signal.SIGTERM)
                worker.wait(timeout=60)
    assert second.returncode == 0, "the restarted consumer did not stop gracefully"

    handled = [(key, pid) for kind, key, pid in lines() if kind == "handled"]
    counts = Counter(key for key, _ in handled)
    assert set(counts.values()) == {1}, {k: n for k, n in counts.items() if n > 1}
    order = [int(key[2:]) for key, _ in handled if key.startswith("g#")]
    assert order == list(range(1, SEQS + 1)), "the group's effects ran out of order"
    assert {pid for _, pid in handled} == {str(first.pid), str(second.pid)}
    publisher.stop()
