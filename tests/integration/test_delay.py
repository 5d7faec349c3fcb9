"""Delayed delivery through the real chain, and the scheduler against the Cloud Tasks emulator.

ingress (functions-framework) -> Cloud Tasks emulator -> relay (gunicorn) -> Pub/Sub emulator.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from google.api_core import exceptions as gexc
from google.cloud import firestore, pubsub_v1, tasks_v2

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.delay.cancel import cancel
from pubsub_toolkit.delay.scheduler import (
    HORIZON,
    REASON_DELAY_TOO_LONG,
    REASON_TASK_TOO_LARGE,
    CloudTasksScheduler,
    HttpTarget,
)
from pubsub_toolkit.errors import PermanentError
from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit.stores.dedup.firestore import FirestoreDedupStore
from pubsub_toolkit_local.tasks_emulator import CloudTasksEmulator
from pubsub_toolkit_local.topology import drain
from tests.support.pipeline import DelayChain, delay_chain
from tests.support.waiting import wait_until

pytestmark = pytest.mark.usefixtures("pubsub_emulator", "firestore_emulator")


@pytest.fixture
def chain(project_id: str, tmp_path: Path) -> Iterator[DelayChain]:
    with delay_chain(project_id, tmp_path, fail_first_per_task=2) as running:
        yield running


def test_delayed_messages_arrive_on_time_exactly_once_with_attributes(chain: DelayChain) -> None:
    publisher = pubsub_v1.PublisherClient()
    now = datetime.now(UTC)
    due: dict[str, datetime] = {}
    for i in range(12):
        key = f"delayed-{i}"
        extra: dict[str, str]
        if i % 2:
            due[key] = now + timedelta(seconds=2 + i % 4)
            extra = {"deliver_at": attr.format_time(due[key])}
        else:
            extra = {"delay_seconds": str(2 + i % 4)}
        for _copy in range(3):  # ingress receives each message three times
            publisher.publish(
                chain.topology.origin, f"body {i}".encode(), dedup_key=key, color="blue", **extra
            ).result(timeout=10)

    delivered = drain(chain.topology.final_sub, expected=12, timeout=60, quiet=3)
    received_by = datetime.now(UTC)

    keys = Counter(m.attributes["dedup_key"] for m in delivered)
    assert len(delivered) == 12 and set(keys.values()) == {1}
    for m in delivered:
        deliver_at = attr.parse_time(m.attributes["deliver_at"])
        expected = due.get(m.attributes["dedup_key"])
        if expected is not None:
            assert deliver_at == expected
        else:  # from delay_seconds, converted when ingress received it: after we published
            delay = 2 + int(m.attributes["dedup_key"].split("-")[1]) % 4
            assert now + timedelta(seconds=delay) <= deliver_at <= received_by
        assert m.publish_time is not None and m.publish_time >= deliver_at, "published early"
        assert m.attributes["color"] == "blue"
        assert m.data == f"body {m.attributes['dedup_key'].split('-')[1]}".encode()
        assert "delay_seconds" not in m.attributes
    # Every task was refused twice by the relay's proxy before it got through.
    assert len(chain.proxy.attempts) == 12
    assert all(n >= 3 for n in chain.proxy.attempts.values())
    assert drain(chain.topology.dead_letter_sub, expected=0, quiet=0.5) == []


def test_cancel_before_due_time_delivers_nothing(chain: DelayChain, project_id: str) -> None:
    publisher = pubsub_v1.PublisherClient()
    publisher.publish(
        chain.topology.origin, b"never", dedup_key="cancel-me", delay_seconds="3"
    ).result(timeout=10)
    publisher.publish(
        chain.topology.origin, b"kept", dedup_key="keep-me", delay_seconds="3"
    ).result(timeout=10)
    client = chain.client()
    scheduler = CloudTasksScheduler(
        client, queue=chain.queue, target=HttpTarget("http://unused", "x", "x")
    )

    def task_exists() -> bool:
        try:
            client.get_task(name=scheduler.task_name("cancel-me"))
        except gexc.NotFound:
            return False
        return True

    wait_until(task_exists, timeout=20, what="ingress to schedule the task")
    store = FirestoreDedupStore(firestore.Client(project=project_id))
    result = cancel("cancel-me", store=store, scheduler=scheduler)
    assert result.task_deleted and not result.already_delivered

    delivered = drain(chain.topology.final_sub, expected=1, timeout=30, quiet=4)
    assert [m.attributes["dedup_key"] for m in delivered] == ["keep-me"]


# --- the scheduler against the in-process emulator ------------------------------------------


@pytest.fixture
def scheduler() -> Iterator[CloudTasksScheduler]:
    with CloudTasksEmulator() as emulator:
        from pubsub_toolkit.delay.scheduler import tasks_client

        client = tasks_client(emulator.address)
        client.create_queue(
            parent="projects/p/locations/l",
            queue=tasks_v2.Queue(name="projects/p/locations/l/queues/q"),
        )
        # Pause the queue: these tests inspect tasks, nothing should be dispatched.
        client.pause_queue(name="projects/p/locations/l/queues/q")
        yield CloudTasksScheduler(
            client,
            queue="projects/p/locations/l/queues/q",
            target=HttpTarget("http://127.0.0.1:9/release", "inv@p.iam", "http://127.0.0.1:9"),
        )


def _message() -> OutboundMessage:
    return OutboundMessage(b"x", {"dedup_key": "k"}, ordering_key="g")


def test_same_key_schedules_once(scheduler: CloudTasksScheduler) -> None:
    due = datetime.now(UTC) + timedelta(hours=1)
    first = scheduler.schedule(_message(), due, "k")
    second = scheduler.schedule(_message(), due, "k")  # a redelivery: AlreadyExists
    assert first == second == scheduler.task_name("k")
    client = scheduler._client
    tasks = list(client.list_tasks(parent=scheduler.queue))
    assert [t.name for t in tasks] == [first]
    task = client.get_task(request={"name": first, "response_view": tasks_v2.Task.View.FULL})
    assert task.http_request.oidc_token.service_account_email == "inv@p.iam"
    assert task.http_request.oidc_token.audience == "http://127.0.0.1:9"
    assert abs((task.schedule_time - due).total_seconds()) < 0.001


def test_delete_and_name_reservation(scheduler: CloudTasksScheduler) -> None:
    due = datetime.now(UTC) + timedelta(hours=1)
    scheduler.schedule(_message(), due, "k")
    assert scheduler.delete("k") is True
    assert scheduler.delete("k") is False
    # The name stays reserved after deletion (as in Cloud Tasks): scheduling again is a no-op.
    scheduler.schedule(_message(), due, "k")
    assert list(scheduler._client.list_tasks(parent=scheduler.queue)) == []


def test_long_delays_park_at_the_horizon_and_hop(scheduler: CloudTasksScheduler) -> None:
    due = datetime.now(UTC) + timedelta(days=45)
    name = scheduler.schedule(_message(), due, "far")
    task = scheduler._client.get_task(name=name)
    parked = task.schedule_time - datetime.now(UTC)
    assert HORIZON - timedelta(minutes=1) < parked <= HORIZON
    assert scheduler.task_name("far", hop=1) != name  # the next hop gets its own name


def test_limits_are_permanent_errors(scheduler: CloudTasksScheduler) -> None:
    with pytest.raises(PermanentError) as too_far:
        scheduler.schedule(_message(), datetime.now(UTC) + timedelta(days=400), "k1")
    assert too_far.value.reason == REASON_DELAY_TOO_LONG
    big = OutboundMessage(b"x" * 800_000, {})
    with pytest.raises(PermanentError) as too_big:  # 800 kB becomes ~1.07 MB in base64
        scheduler.schedule(big, datetime.now(UTC) + timedelta(hours=1), "k2")
    assert too_big.value.reason == REASON_TASK_TOO_LARGE


def test_forged_requests_to_the_served_relay_publish_nothing(chain: DelayChain) -> None:
    import requests

    from pubsub_toolkit.delay.payload import DelayedMessage
    from pubsub_toolkit_local.oidc import LocalOidcIssuer

    body = DelayedMessage(
        OutboundMessage(b"forged", {"dedup_key": "forged"}), "forged", datetime.now(UTC)
    ).to_json()
    url = chain.env["PUBSUB_TOOLKIT_RELAY_URL"] + "/release"
    with LocalOidcIssuer() as stranger:
        forged_token = stranger.sign(
            chain.env["PUBSUB_TOOLKIT_RELAY_URL"], chain.env["PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT"]
        )
    answers = [
        requests.post(url, data=body, timeout=10).status_code,
        requests.post(
            url, data=body, headers={"Authorization": f"Bearer {forged_token}"}, timeout=10
        ).status_code,
    ]
    assert answers == [401, 403]
    assert drain(chain.topology.final_sub, expected=0, quiet=1) == []
