"""Issue 24, defect 9: a relay-side store outage longer than Cloud Tasks' retry budget.

The real parts: the project's Cloud Tasks emulator (a queue of 3 attempts, quick backoff, HTTP
target with OIDC tokens, the ``X-CloudTasks-TaskRetryCount`` header), the relay under gunicorn
configured from its environment (``PUBSUB_TOOLKIT_TASKS_MAX_ATTEMPTS=3``, Redis as its store), a
redis-server of the test's own that is stopped before the task is due, and the Pub/Sub emulator.

Before the fix the relay answered 503 to every attempt, the queue then deleted the task, and the
message reached neither the final nor the dead-letter topic. Then the last attempt dead-lettered
it (``relay_store_unavailable``) - also when it had been released already and the relay just
could not read the record. Now the last attempt hands the message to a task of its own (the next
hop, a fresh retry budget), which releases it once the store is back: nothing dead-lettered.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from google.cloud import tasks_v2

from pubsub_toolkit.delay.scheduler import CloudTasksScheduler, HttpTarget, tasks_client
from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit_local import servers
from pubsub_toolkit_local.oidc import LocalOidcIssuer
from pubsub_toolkit_local.processes import free_port, start_service
from pubsub_toolkit_local.tasks_emulator import CloudTasksEmulator
from pubsub_toolkit_local.topology import Topology, create_topology, drain
from tests.conftest import repo_root
from tests.support.restartable import Restartable
from tests.support.waiting import wait_until

INVOKER = "tasks-invoker@p.iam.gserviceaccount.com"
MAX_ATTEMPTS = 3


@pytest.fixture
def issuer() -> Iterator[LocalOidcIssuer]:
    with LocalOidcIssuer() as running:
        yield running


@pytest.fixture
def emulator(issuer: LocalOidcIssuer) -> Iterator[CloudTasksEmulator]:
    with CloudTasksEmulator(oidc_issuer=issuer) as running:
        yield running


def test_the_last_attempt_hands_over_what_a_store_outage_kept_from_release(
    pubsub_emulator: str,
    project_id: str,
    own_redis: Restartable,
    issuer: LocalOidcIssuer,
    emulator: CloudTasksEmulator,
    tmp_path: Path,
) -> None:
    topology: Topology = create_topology(project_id)
    queue = f"projects/{project_id}/locations/l/queues/delays"
    client = tasks_client(emulator.address)
    client.create_queue(
        parent=queue.rsplit("/queues/", 1)[0],
        queue=tasks_v2.Queue(
            name=queue,
            retry_config=tasks_v2.RetryConfig(
                max_attempts=MAX_ATTEMPTS,
                min_backoff={"nanos": 100_000_000},
                max_backoff={"nanos": 500_000_000},
            ),
        ),
        timeout=10,
    )
    port = free_port()
    relay_url = f"http://127.0.0.1:{port}"
    env = {
        "GOOGLE_CLOUD_PROJECT": project_id,
        "PUBSUB_EMULATOR_HOST": pubsub_emulator,
        "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
        "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
        "PUBSUB_TOOLKIT_STORE_BACKEND": "redis",
        "PUBSUB_TOOLKIT_REDIS_URL": f"redis://{own_redis.host}/0",
        "PUBSUB_TOOLKIT_TASKS_QUEUE": queue,
        "PUBSUB_TOOLKIT_TASKS_TARGET": "http",
        "PUBSUB_TOOLKIT_RELAY_URL": relay_url,
        "PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT": INVOKER,
        "PUBSUB_TOOLKIT_OIDC_CERTS_URL": issuer.certs_url,
        "CLOUD_TASKS_EMULATOR_HOST": emulator.address,
        "PUBSUB_TOOLKIT_TASKS_MAX_ATTEMPTS": str(MAX_ATTEMPTS),  # the queue's max_attempts
        "PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS": "0",
    }
    spec = servers.relay(port, app_dir=repo_root() / "appengine/relay", env=env)
    relay = start_service(spec, tmp_path / "relay")
    try:
        own_redis.stop()  # the relay's store is down for the whole retry budget
        scheduler = CloudTasksScheduler(
            client, queue=queue, target=HttpTarget(f"{relay_url}/release", INVOKER, relay_url)
        )
        message = OutboundMessage(b"due now", {"dedup_key": "outage-1", "k": "v"})
        scheduler.schedule(message, datetime.now(UTC), "outage-1")

        first = scheduler.task_name("outage-1")

        def names() -> set[str]:
            return {task.name for task in client.list_tasks(parent=queue)}

        # The first task's budget spent, the message waits in a later hop's task (each hands
        # it on while the store stays down).
        wait_until(
            lambda: (left := names()) and first not in left,
            timeout=60,
            what="the last attempt to hand the message to the next hop's task",
        )
        assert names() & {scheduler.task_name("outage-1", hop) for hop in range(1, 100)}
        assert drain(topology.dead_letter_sub, expected=0, quiet=1) == []
        own_redis.start()  # the store is back (empty: no record, no tombstone)
        wait_until(lambda: not names(), timeout=60, what="the queue to finish with the message")
        [released] = drain(topology.final_sub, expected=1, timeout=30, quiet=1)
        assert (released.data, released.attributes["dedup_key"], released.attributes["k"]) == (
            b"due now",
            "outage-1",
            "v",
        )
        assert drain(topology.dead_letter_sub, expected=0, quiet=1) == []
    finally:
        relay.stop()
