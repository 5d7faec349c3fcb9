"""The CLI and the consumer function template, as a user runs them, against the emulators."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from pathlib import Path

import functions_framework
import pytest
from google.cloud import pubsub_v1

from tests.conftest import repo_root


@pytest.fixture
def env(pubsub_emulator: str, redis_url: str, project_id: str) -> dict[str, str]:
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    for name in ("origin", "final", "dead-letter"):
        publisher.create_topic(name=f"projects/{project_id}/topics/{name}")
    subscriber.create_subscription(
        name=f"projects/{project_id}/subscriptions/final-sub",
        topic=f"projects/{project_id}/topics/final",
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


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pubsub_toolkit_cli.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_publish_subscribe_and_status_round_trip(env: dict[str, str]) -> None:
    # Published straight to "final" (no ingress here): numbered by the CLI's sequencer.
    for text in ("first", "second", "third"):
        done = cli(env, "publish", "--topic", "final", "--fifo-group", "order-7", text)
        assert done.returncode == 0, done.stderr
    received = cli(env, "subscribe", "--max", "3", "--timeout", "60s", "--json")
    assert received.returncode == 0, received.stderr
    lines = received.stdout.splitlines()
    assert [line.split('"data": "')[1].split('"')[0] for line in lines] == [
        "first",
        "second",
        "third",
    ]
    status = cli(env, "status", "--group", "order-7")  # idle now: named to be shown
    assert status.returncode == 0, status.stderr
    row = next(line for line in status.stdout.splitlines() if line.startswith("order-7"))
    assert row.split()[:4] == ["order-7", "3", "3", "0"]  # issued, processed, parked
    assert "dead letters: (no subscription dead-letter-sub)" in status.stdout
    assert "scheduled deliveries: (PUBSUB_TOOLKIT_TASKS_QUEUE not set)" in status.stdout


def test_bad_arguments_get_one_line_and_non_zero_exit(env: dict[str, str]) -> None:
    bad_delay = cli(env, "publish", "--delay", "soon", "x")
    assert bad_delay.returncode == 2 and "not a duration" in bad_delay.stderr
    # A due time in the past is valid (due at once); one more than 365 days ahead is refused.
    both = cli(env, "publish", "--delay", "5s", "--deliver-at", "2000-01-01T00:00:00Z", "x")
    assert both.returncode == 2 and "not allowed with" in both.stderr
    # What the attribute contract refuses is refused before publishing, as a usage error.
    reserved = cli(env, "publish", "--attr", "dlq_reason=x", "x")
    assert reserved.returncode == 2, reserved.stderr
    assert reserved.stderr.strip().splitlines() == [
        "pubsub-toolkit: error: the message breaks the attribute contract (reserved_attribute: "
        "attribute name 'dlq_reason' is reserved for dead letters (dlq_* is the toolkit's, "
        "CloudPubSubDeadLetter* Pub/Sub's))"
    ]
    down = cli({**env, "PUBSUB_EMULATOR_HOST": "127.0.0.1:9"}, "publish", "x")
    assert down.returncode == 1  # the command was right; the stack did not answer
    assert down.stderr.strip().splitlines() == [
        "pubsub-toolkit: error: nothing answers at PUBSUB_EMULATOR_HOST=127.0.0.1:9: is the local "
        "stack running? Start it with `pubsub-toolkit local up`"
    ]
    missing = cli({k: v for k, v in env.items() if k != "GOOGLE_CLOUD_PROJECT"}, "status")
    assert missing.returncode == 2 and "GOOGLE_CLOUD_PROJECT" in missing.stderr
    skip = cli(env, "fifo", "skip", "nogroup", "5")
    assert skip.returncode == 1 and "waits for 1" in skip.stderr  # a refused operation


def test_consumer_function_template(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PUBSUB_TOOLKIT_HANDLER", "example_handler:handle")
    monkeypatch.syspath_prepend(str(repo_root() / "functions/consumer"))
    app = functions_framework.create_app(
        target="consumer",
        source=str(repo_root() / "functions/consumer/main.py"),
        signature_type="http",
    )
    client = app.test_client()

    def push(seq: int) -> int:
        body = {
            "message": {
                "data": base64.b64encode(f"step {seq}".encode()).decode(),
                "attributes": {"fifo_group": "g", "fifo_seq": str(seq), "dedup_key": f"k{seq}"},
                "messageId": str(seq),
            },
            "subscription": "projects/p/subscriptions/final-sub",
        }
        return client.post("/", json=body).status_code

    assert [push(s) for s in (2, 3, 1, 1)] == [200, 200, 200, 200]
    status = cli(env, "status", "--group", "g")  # idle now: named to be shown
    row = next(line for line in status.stdout.splitlines() if line.startswith("g "))
    assert row.split()[2:4] == ["3", "0"]  # all three processed, in order, nothing parked
