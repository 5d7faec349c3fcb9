"""A worker process dies at the worst moments; the effect still happens exactly once.

* ack lost: the effect and the dedup marker committed, the process died before acking. Pub/Sub
  redelivers (after the ack deadline) and the next worker sees a duplicate: no second effect.
* transactional inbox: the process dies after the handler's Firestore writes, before the
  commit. Neither the effect nor the marker exists; the redelivery applies both, once.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from google.cloud import firestore, pubsub_v1

from pubsub_toolkit.stores.dedup.firestore import DEFAULT_COLLECTION, document_id
from tests.conftest import repo_root
from tests.support.worker import CRASH_EXIT


def _run_worker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.support.worker", *args],
        cwd=repo_root(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("backend", ["redis", "firestore"])
def test_ack_lost_after_commit_causes_no_second_effect(
    request: pytest.FixtureRequest,
    pubsub_emulator: str,
    project_id: str,
    unique: str,
    tmp_path: Path,
    backend: str,
) -> None:
    if backend == "redis":
        target = f"{request.getfixturevalue('redis_url')}|crash-{unique}:"
    else:
        request.getfixturevalue("firestore_emulator")
        target = project_id
    publisher = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=f"projects/{project_id}/topics/orders").name
    sub = subscriber.create_subscription(
        name=f"projects/{project_id}/subscriptions/orders-sub", topic=topic, ack_deadline_seconds=10
    ).name
    publisher.publish(topic, b"payload", dedup_key="order-1").result(timeout=10)
    effects = tmp_path / "effects.txt"

    crashed = _run_worker("pull-once", sub, backend, target, str(effects), "--crash-after-commit")
    assert crashed.returncode == CRASH_EXIT, crashed.stderr
    assert crashed.stdout.strip() == "processed"
    assert effects.read_text().splitlines() == ["order-1"]

    # The message was never acked: Pub/Sub delivers it again once the ack deadline passes.
    again = _run_worker("pull-once", sub, backend, target, str(effects))
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "duplicate"
    assert effects.read_text().splitlines() == ["order-1"], "the effect ran twice"


def test_inbox_crash_before_commit_leaves_neither_effect_nor_marker(
    firestore_emulator: str, project_id: str
) -> None:
    client = firestore.Client(project=project_id)
    effects = client.collection("effects")
    marker = client.collection(DEFAULT_COLLECTION).document(document_id("inbox-consumer", "k1"))

    crashed = _run_worker("inbox", project_id, "k1", "--crash-before-commit")
    assert crashed.returncode == CRASH_EXIT, crashed.stderr
    assert list(effects.stream()) == []
    assert not marker.get().exists

    first = _run_worker("inbox", project_id, "k1")
    assert (first.returncode, first.stdout.strip()) == (0, "processed"), first.stderr
    assert len(list(effects.stream())) == 1
    assert marker.get().to_dict()["state"] == "done"

    second = _run_worker("inbox", project_id, "k1")
    assert (second.returncode, second.stdout.strip()) == (0, "duplicate"), second.stderr
    assert len(list(effects.stream())) == 1, "the effect committed twice"
