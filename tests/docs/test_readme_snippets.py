"""The README's "add dedup in two lines" snippets, run as a user would paste them.

Each snippet is taken from README.md by its ``<!-- snippet: NAME -->`` marker, must add at most
three lines to the user's existing code, and is executed against the real parts: the
subscriber-callback one on a streaming pull from the Pub/Sub emulator, the Cloud Function one
under functions-framework, both with their store on a real redis-server (from the environment,
as the README says).
"""

from __future__ import annotations

import base64
import re
import sys
import time
from pathlib import Path
from typing import Any

import functions_framework
import pytest
from google.cloud import pubsub_v1

from pubsub_toolkit_local.topology import Topology, create_topology
from tests.conftest import repo_root


def snippet(name: str) -> str:
    readme = (repo_root() / "README.md").read_text()
    found = re.search(rf"<!-- snippet: {name} -->\n```python\n(.*?)```", readme, re.DOTALL)
    assert found, f"README.md has no snippet {name!r}"
    return found.group(1)


def added_lines(code: str, existing: set[str]) -> list[str]:
    lines = [line.strip() for line in code.splitlines()]
    return [line for line in lines if line and not line.startswith("#") and line not in existing]


@pytest.fixture
def topology(pubsub_emulator: str, project_id: str) -> Topology:
    return create_topology(project_id)


@pytest.fixture(autouse=True)
def environment(topology: Topology, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "GOOGLE_CLOUD_PROJECT": topology.project,
        "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
        "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
        "PUBSUB_TOOLKIT_STORE_BACKEND": "redis",
        "PUBSUB_TOOLKIT_REDIS_URL": redis_url,
    }.items():
        monkeypatch.setenv(name, value)


class Subscriber(pubsub_v1.SubscriberClient):  # type: ignore[misc]
    """The real client, keeping the streaming pull futures so the test can stop them."""

    def __init__(self) -> None:
        super().__init__()
        self.futures: list[Any] = []

    def subscribe(self, *args: Any, **kwargs: Any) -> Any:
        future = super().subscribe(*args, **kwargs)
        self.futures.append(future)
        return future


def test_subscriber_callback_snippet(topology: Topology, project_id: str) -> None:
    code = snippet("dedup-subscriber-callback")
    assert len(added_lines(code, set())) <= 3, code
    subscription = f"projects/{project_id}/subscriptions/billing-sub"
    subscriber = Subscriber()
    subscriber.create_subscription(name=subscription, topic=topology.final)
    charged: list[str] = []

    def callback(message: Any) -> None:  # the user's existing callback
        charged.append(message.data.decode())
        message.ack()

    publisher = pubsub_v1.PublisherClient()
    # Keys unique to this test: the snippet's consumer name is fixed, Redis is shared.
    for _ in range(2):  # a producer's retry: the same key twice
        publisher.publish(topology.final, b"order-1", dedup_key=f"{project_id}-1").result(10)
    publisher.publish(topology.final, b"order-2", dedup_key=f"{project_id}-2").result(10)
    namespace = {"subscriber": subscriber, "subscription": subscription, "callback": callback}
    exec(compile(code, "README.md", "exec"), namespace)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(charged) < 2:
            time.sleep(0.05)
        quiet_until = time.monotonic() + 2  # room for the duplicate to (wrongly) arrive
        while time.monotonic() < quiet_until and len(charged) < 3:
            time.sleep(0.05)
    finally:
        for future in subscriber.futures:
            future.cancel()
            future.result(timeout=30)
        subscriber.close()
    assert sorted(charged) == ["order-1", "order-2"]


def test_cloud_function_snippet(tmp_path: Path, project_id: str) -> None:
    code = snippet("dedup-cloud-function")
    existing = {"@functions_framework.cloud_event", "def charge(cloud_event): ..."}
    assert len(added_lines(code, existing)) <= 3, code
    body = code.replace(
        "def charge(cloud_event): ...",
        "def charge(cloud_event):\n    CHARGED.append(cloud_event.data['message']['messageId'])\n",
    )
    module_name = f"readme_function_{project_id.replace('-', '_')}"
    source = tmp_path / f"{module_name}.py"
    source.write_text("import functions_framework\nCHARGED = []\n" + body)
    app = functions_framework.create_app(
        target="charge", source=str(source), signature_type="cloudevent"
    )
    client = app.test_client()
    try:

        def deliver(message_id: str, key: str) -> int:
            push = {
                "message": {
                    "data": base64.b64encode(b"charge").decode(),
                    "attributes": {"dedup_key": key},
                    "messageId": message_id,
                },
                "subscription": "projects/p/subscriptions/charges",
            }
            headers = {
                "ce-specversion": "1.0",
                "ce-type": "google.cloud.pubsub.topic.v1.messagePublished",
                "ce-source": "//pubsub.googleapis.com/projects/p/topics/orders",
                "ce-id": message_id,
            }
            return int(client.post("/", json=push, headers=headers).status_code)

        one, two = f"{project_id}-1", f"{project_id}-2"  # the consumer name is the README's
        statuses = [deliver("1", one), deliver("2", one), deliver("3", two)]
        assert statuses == [200, 200, 200]
        assert sys.modules[module_name].CHARGED == ["1", "3"]  # the re-publish did not run
    finally:
        sys.modules.pop(module_name, None)
