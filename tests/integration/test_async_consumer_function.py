"""The ``functions/consumer`` template with ``PUBSUB_TOOLKIT_HANDLER`` naming an ``async def``
(served by functions-framework's Flask test client, on the Pub/Sub emulator and a real
redis-server): the handler runs on the instance's own event loop over the async Redis stores; a
redelivery is acked without running it again; a FIFO group pushed out of order runs in order;
``/sweep``
answers for every group."""

from __future__ import annotations

import base64
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import functions_framework
import pytest

from pubsub_toolkit_local.topology import Topology, create_topology
from tests.conftest import repo_root

ASYNC_HANDLER = """
import asyncio
import threading
SEEN = []
THREADS = set()

async def handle(message):
    await asyncio.sleep(0.001)  # awaited I/O
    THREADS.add(threading.get_ident())
    SEEN.append((message.attributes.get("fifo_seq", "-"), message.data.decode()))
    return "recorded"
"""


def push(text: str, message_id: str, attributes: dict[str, str]) -> dict[str, Any]:
    data = base64.b64encode(text.encode()).decode()
    message = {"data": data, "attributes": attributes, "messageId": message_id}
    return {"message": message, "subscription": "projects/p/subscriptions/push"}


@pytest.fixture
def topology(pubsub_emulator: str, project_id: str) -> Topology:
    return create_topology(project_id)


@pytest.fixture
def template(
    topology: Topology,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    project_id: str,
) -> Iterator[tuple[Any, Any, Any]]:
    env = {
        "GOOGLE_CLOUD_PROJECT": topology.project,
        "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
        "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
        "PUBSUB_TOOLKIT_STORE_BACKEND": "redis",
        "PUBSUB_TOOLKIT_REDIS_URL": redis_url,
        "PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS": "0",
        "PUBSUB_TOOLKIT_CONSUMER_ID": f"async-push-{project_id}",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    handler_module = f"async_handler_{project_id.replace('-', '_')}"
    (tmp_path / f"{handler_module}.py").write_text(ASYNC_HANDLER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PUBSUB_TOOLKIT_HANDLER", f"{handler_module}:handle")
    monkeypatch.syspath_prepend(str(repo_root() / "functions/consumer"))
    app = functions_framework.create_app(
        target="consumer",
        source=str(repo_root() / "functions/consumer/main.py"),
        signature_type="http",
    )
    main = sys.modules["main"]  # functions-framework names the module by its file
    __import__(handler_module)
    yield app.test_client(), sys.modules[handler_module], main
    if main._processor is not None:
        main._processor.close()  # the instance's loop thread
    main._processor = None
    sys.modules.pop(handler_module, None)


def test_template_runs_an_async_handler_once_in_order(template: tuple[Any, Any, Any]) -> None:
    client, handler, main = template
    plain = push("hello", "100", {"dedup_key": "k-1"})
    assert client.post("/", json=plain).status_code == 200
    assert client.post("/", json=plain).status_code == 200  # a redelivery: acked, not run
    # A group pushed 2 then 1: 2 waits parked, then runs right after 1.
    for seq in (2, 1):
        body = push(f"step {seq}", f"20{seq}", {"fifo_group": "g", "fifo_seq": str(seq)})
        answer = client.post("/", json=body)
        assert answer.status_code == 200, answer.get_data(as_text=True)
    assert handler.SEEN == [("-", "hello"), ("1", "step 1"), ("2", "step 2")]
    assert len(handler.THREADS) == 1  # every call on the instance's one event loop
    assert type(main._processor).__name__ == "BlockingProcessor"  # the async stores' path
    # #4 before #3: parked, so the group needs attention and the sweep visits it (an idle
    # group is not visited at all).
    early = push("step 4", "204", {"fifo_group": "g", "fifo_seq": "4"})
    assert client.post("/", json=early).status_code == 200
    swept = client.post("/sweep").get_json()
    assert swept["swept"] >= 1 and set(swept["outcomes"]) >= {"g"}
