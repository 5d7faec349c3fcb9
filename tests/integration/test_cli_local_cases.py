"""The CLI against the emulators in the cases issue 12 found broken (item 8).

* bad input is refused with one line and exit 2 *before* anything is published;
* a 9 MB message (Pub/Sub allows 10 MB; gRPC's default receive limit is 4 MB) goes through
  ``publish``, ``subscribe``, ``dlq list`` and ``status``;
* ``subscribe --max 5`` with 50 waiting handles and acks 5 and releases the rest at once: the
  next consumer receives the other 45 long before their ack deadline could have returned them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from google.cloud import pubsub_v1

from pubsub_toolkit_cli.emulator import subscriber_client

NINE_MB = 9 * 1024 * 1024


@pytest.fixture
def env(pubsub_emulator: str, redis_url: str, project_id: str) -> dict[str, str]:
    """final and dead-letter topics with their subscriptions; leases far longer than a test,
    so a message that was not released cannot come back by expiry while it runs."""
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    for name in ("final", "dead-letter"):
        topic = publisher.create_topic(name=f"projects/{project_id}/topics/{name}").name
        subscriber.create_subscription(
            name=f"projects/{project_id}/subscriptions/{name}-sub",
            topic=topic,
            ack_deadline_seconds=600,
        )
    subscriber.close()
    return {
        **os.environ,
        "GOOGLE_CLOUD_PROJECT": project_id,
        "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
        "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
        "PUBSUB_TOOLKIT_STORE_BACKEND": "redis",
        "PUBSUB_TOOLKIT_REDIS_URL": redis_url,
        "PUBSUB_TOOLKIT_CONSUMER_ID": f"cli-{project_id}",
    }


def cli(
    env: dict[str, str], *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "pubsub_toolkit_cli.cli", *args],
        env=env,
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
    )


def waiting(project: str, subscription: str) -> int:
    """How many messages a pull finds on ``subscription`` (held, not acked: 600 s leases)."""
    client = subscriber_client()
    try:
        response = client.pull(
            subscription=f"projects/{project}/subscriptions/{subscription}",
            max_messages=1000,
            return_immediately=True,
            timeout=30,
        )
        return len(response.received_messages)
    finally:
        client.close()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--fifo-group", ""], "'' is empty: a FIFO group needs a name"),
        (["--delay", "-5s"], "'-5s' is a negative delay"),
        (["--delay=-5s"], "'-5s' is a negative delay"),
        (["--deliver-at", "9999-12-31T23:59:59Z"], "at most 365 days ahead"),
        (["--end-of-group"], "--end-of-group needs --fifo-group"),
        (["--attr", "fifo_seq=1"], "--attr fifo_seq: the FIFO attributes come from"),
        (["--attr", "dlq_reason=x"], "reserved_attribute: attribute name 'dlq_reason'"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_publishes_nothing(
    env: dict[str, str], args: list[str], says: str
) -> None:
    done = cli(env, "publish", "--topic", "final", *args, "payload")
    err = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2
    assert len(err) == 1 and says in err[0], err
    assert waiting(env["GOOGLE_CLOUD_PROJECT"], "final-sub") == 0


def test_a_9_mb_message_through_publish_subscribe_dlq_list_and_status(env: dict[str, str]) -> None:
    project = env["GOOGLE_CLOUD_PROJECT"]
    payload = b"p" * NINE_MB
    published = cli(env, "publish", "--topic", "final", "--dedup-key", "big-1", "-", stdin=payload)
    assert published.returncode == 0, published.stderr.decode()
    # A 9 MB message with a FIFO number that is no number: `subscribe`'s processor dead-letters
    # it with its data, so the dead-letter topic holds a 9 MB letter too.
    pubsub_v1.PublisherClient().publish(
        f"projects/{project}/topics/final",
        b"d" * NINE_MB,
        dedup_key="big-2",
        fifo_group="g",
        fifo_seq="01",
    ).result(timeout=60)

    received = cli(env, "subscribe", "--max", "1", "--timeout", "60s", "--json")
    assert received.returncode == 0, received.stderr.decode()
    [line] = received.stdout.decode().splitlines()
    record = json.loads(line)
    assert record["attributes"]["dedup_key"] == "big-1"
    assert len(record["data"]) == NINE_MB and set(record["data"]) == {"p"}

    def dead_letter_listed() -> subprocess.CompletedProcess[bytes] | None:
        listed = cli(env, "dlq", "list", "--subscription", "dead-letter-sub")
        return listed if b"invalid_fifo_seq" in listed.stdout else None

    deadline = time.monotonic() + 60
    listed = None
    while listed is None and time.monotonic() < deadline:
        # The first subscribe may have stopped before dead-lettering the second: run another.
        cli(env, "subscribe", "--timeout", "5s")
        listed = dead_letter_listed()
    assert listed is not None, "the 9 MB dead letter never showed in `dlq list`"
    assert listed.returncode == 0, listed.stderr.decode()
    assert b"big-2" in listed.stdout
    status = cli(env, "status", "--dead-letter-subscription", "dead-letter-sub")
    assert status.returncode == 0, status.stderr.decode()
    assert "dead letters: 1 (invalid_fifo_seq 1)" in status.stdout.decode()


def test_subscribe_max_5_acks_5_and_the_next_consumer_gets_the_other_45_at_once(
    env: dict[str, str],
) -> None:
    project = env["GOOGLE_CLOUD_PROJECT"]
    publisher = pubsub_v1.PublisherClient()
    futures = [
        publisher.publish(f"projects/{project}/topics/final", f"m{i}".encode(), dedup_key=f"k{i}")
        for i in range(50)
    ]
    for future in futures:
        future.result(timeout=30)

    first = cli(env, "subscribe", "--max", "5", "--timeout", "60s", "--json")
    assert first.returncode == 0, first.stderr.decode()
    first_keys = [json.loads(line)["attributes"]["dedup_key"] for line in first.stdout.splitlines()]
    assert len(first_keys) == 5

    started = time.monotonic()
    second = cli(env, "subscribe", "--max", "45", "--timeout", "60s", "--json")
    took = time.monotonic() - started
    assert second.returncode == 0, second.stderr.decode()
    second_keys = [
        json.loads(line)["attributes"]["dedup_key"] for line in second.stdout.splitlines()
    ]
    assert len(second_keys) == 45
    assert set(first_keys) | set(second_keys) == {f"k{i}" for i in range(50)}
    # Released, not left to expire: the leases are 600 s, the second run took seconds.
    assert took < 60
    # The 5 were acked, not released: nothing is left.
    assert waiting(project, "final-sub") == 0
    # Without --json, progress goes to stderr when it moves - never the same count twice.
    third = cli(env, "subscribe", "--max", "10", "--timeout", "3s")
    assert third.returncode == 0, third.stderr.decode()
    progress = [line for line in third.stderr.decode().splitlines() if line.startswith("...")]
    assert len(progress) == len(set(progress)), progress
    assert third.stderr.decode().splitlines()[-1] == "0 message(s) handled"
