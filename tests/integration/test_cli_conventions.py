"""The command line's conventions against the Pub/Sub emulator: a refused Google API call exits
1 in one line, ``--project`` picks the project, and ``--json`` prints what scripts read."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from google.cloud import pubsub_v1

from pubsub_toolkit import attributes as attr
from tests.conftest import repo_root


@pytest.fixture
def env(pubsub_emulator: str, redis_url: str, project_id: str) -> dict[str, str]:
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    for name in ("final", "dead-letter"):
        publisher.create_topic(name=f"projects/{project_id}/topics/{name}")
    subscriber.create_subscription(
        name=f"projects/{project_id}/subscriptions/dead-letter-sub",
        topic=f"projects/{project_id}/topics/dead-letter",
    )
    subscriber.close()
    return {
        **{k: v for k, v in os.environ.items() if k != "GOOGLE_CLOUD_PROJECT"},
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
        cwd=repo_root(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_failed_call_exits_1_in_one_line(env: dict[str, str], project_id: str) -> None:
    missing = cli(env, "--project", project_id, "publish", "--topic", "no-such-topic", "x")
    assert missing.returncode == 1, missing.stderr
    [line] = missing.stderr.strip().splitlines()
    assert line.startswith("pubsub-toolkit: error: publish to "), line
    assert line.endswith("no-such-topic failed: 404 Topic not found"), line
    # A Google API error raised as it is (NotFound) is said the same way.
    unknown = cli(env, "--project", project_id, "dlq", "list", "--subscription", "no-such-sub")
    assert unknown.returncode == 1, unknown.stderr
    [line] = unknown.stderr.strip().splitlines()
    assert line.startswith("pubsub-toolkit: error: dlq: 404"), line


def test_project_picks_the_project_and_json_output_is_what_scripts_read(
    env: dict[str, str], project_id: str
) -> None:
    without = cli(env, "publish", "--topic", "final", "x")
    assert without.returncode == 2
    assert "GOOGLE_CLOUD_PROJECT is required" in without.stderr
    group = f"order-{project_id}"  # the session's Redis is shared: a group of its own
    published = cli(
        env, "publish", "--project", project_id, "--topic", "final", "--json",
        "--fifo-group", group, "step 1",
    )  # fmt: skip
    assert published.returncode == 0, published.stderr
    sent = json.loads(published.stdout)
    assert sent["topic"] == f"projects/{project_id}/topics/final"
    assert sent["message_id"]

    status = cli(env, "--project", project_id, "status", "--group", group, "--json")
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert shown["consumer"] == f"cli-{project_id}"
    [row] = [g for g in shown["fifo_groups"] if g["group"] == group]
    assert (row["last_issued"], row["last_processed"]) == (1, 0)
    assert shown["dead_letters"]["exists"] is True

    publisher = pubsub_v1.PublisherClient()
    publisher.publish(
        f"projects/{project_id}/topics/dead-letter",
        b"poison",
        **{attr.ERROR_REASON: "handler_failed", attr.ERROR_DETAIL: "boom", attr.DEDUP_KEY: "k1"},
    ).result(timeout=30)
    listed = cli(env, "dlq", "list", "--project", project_id, "--json")
    assert listed.returncode == 0, listed.stderr
    [letter] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (letter["reason"], letter["detail"], letter["dedup_key"]) == (
        "handler_failed",
        "boom",
        "k1",
    )
