"""The deployed functions read a Pub/Sub push request as Pub/Sub sent it (issue 13).

Both functions are HTTP functions behind a push subscription the deployment owns. Served by
functions-framework (its test client) against the Pub/Sub emulator and a real redis-server:

* the consumer's handler sees the message id, publish time, attributes and ordering key of a
  raw push body - functions-framework's own raw-push-to-CloudEvent conversion drops the
  ordering key, which is why the adapters decode the body themselves;
* a message without ``data`` (attributes only), a structured or binary CloudEvent (what an
  Eventarc trigger sends) and a body that is not JSON each get the answer the contract gives:
  published, or dead-lettered with a reason and acked - never a 400 that Pub/Sub redelivers;
* ``/sweep`` on the consumer runs the gate's periodic work (Cloud Scheduler's call).
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import functions_framework
import pytest
from flask.testing import FlaskClient

from pubsub_toolkit import attributes as attr
from pubsub_toolkit_local.topology import Topology, create_topology, drain
from tests.conftest import repo_root

RECORDING_HANDLER = """
import json
SEEN = []

def handle(message):
    SEEN.append({
        "data": message.data.decode(),
        "message_id": message.message_id,
        "publish_time": message.publish_time.isoformat() if message.publish_time else None,
        "ordering_key": message.ordering_key,
        "attributes": dict(message.attributes),
    })
    return "recorded"
"""


def raw_push(message: dict[str, Any]) -> dict[str, Any]:
    return {"message": message, "subscription": "projects/p/subscriptions/push"}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


@pytest.fixture
def topology(pubsub_emulator: str, redis_url: str, project_id: str) -> Topology:
    return create_topology(project_id)


@pytest.fixture
def settings_env(
    topology: Topology, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    env = {
        "GOOGLE_CLOUD_PROJECT": topology.project,
        "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
        "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
        "PUBSUB_TOOLKIT_STORE_BACKEND": "redis",
        "PUBSUB_TOOLKIT_REDIS_URL": redis_url,
        "PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS": "0",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def consumer(
    settings_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    project_id: str,
) -> Iterator[tuple[FlaskClient, list[dict[str, Any]]]]:
    handler_module = f"recording_handler_{project_id.replace('-', '_')}"
    (tmp_path / f"{handler_module}.py").write_text(RECORDING_HANDLER)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PUBSUB_TOOLKIT_HANDLER", f"{handler_module}:handle")
    monkeypatch.setenv("PUBSUB_TOOLKIT_CONSUMER_ID", f"push-{project_id}")
    monkeypatch.syspath_prepend(str(repo_root() / "functions/consumer"))
    app = functions_framework.create_app(
        target="consumer",
        source=str(repo_root() / "functions/consumer/main.py"),
        signature_type="http",
    )
    __import__(handler_module)
    yield app.test_client(), sys.modules[handler_module].SEEN
    sys.modules.pop(handler_module, None)


@pytest.fixture
def ingress(settings_env: dict[str, str]) -> FlaskClient:
    app = functions_framework.create_app(
        target="ingress",
        source=str(repo_root() / "functions/ingress/main.py"),
        signature_type="http",
    )
    return app.test_client()


def test_consumer_handler_sees_the_push_as_pubsub_sent_it(
    consumer: tuple[FlaskClient, list[dict[str, Any]]],
) -> None:
    client, seen = consumer
    body = raw_push(
        {
            "data": b64("hello"),
            "attributes": {"dedup_key": "k-1", "fifo_group": "g", "fifo_seq": "1"},
            "messageId": "1234567890",
            "publishTime": "2030-01-02T03:04:05.678Z",
            "orderingKey": "g",
        }
    )
    answer = client.post("/", json=body)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    assert seen == [
        {
            "data": "hello",
            "message_id": "1234567890",
            "publish_time": "2030-01-02T03:04:05.678000+00:00",
            "ordering_key": "g",
            "attributes": {"dedup_key": "k-1", "fifo_group": "g", "fifo_seq": "1"},
        }
    ]
    # The redelivered copy is acked without running the handler again.
    assert client.post("/", json=body).status_code == 200
    assert len(seen) == 1


def test_consumer_reads_an_eventarc_cloudevent_too(
    consumer: tuple[FlaskClient, list[dict[str, Any]]],
) -> None:
    client, seen = consumer
    push = raw_push({"data": b64("binary"), "messageId": "b-1", "orderingKey": "ok"})
    binary = client.post(
        "/",
        data=json.dumps(push),
        headers={
            "Content-Type": "application/json",
            "ce-specversion": "1.0",
            "ce-type": "google.cloud.pubsub.topic.v1.messagePublished",
            "ce-source": "//pubsub.googleapis.com/projects/p/topics/final",
            "ce-id": "b-1",
        },
    )
    structured = client.post(
        "/",
        data=json.dumps(
            {
                "specversion": "1.0",
                "type": "google.cloud.pubsub.topic.v1.messagePublished",
                "source": "//pubsub.googleapis.com/projects/p/topics/final",
                "id": "s-1",
                "data": raw_push({"data": b64("structured"), "messageId": "s-1"}),
            }
        ),
        headers={"Content-Type": "application/cloudevents+json"},
    )
    assert (binary.status_code, structured.status_code) == (200, 200)
    assert [(s["data"], s["message_id"], s["ordering_key"]) for s in seen] == [
        ("binary", "b-1", "ok"),
        ("structured", "s-1", ""),
    ]


def test_consumer_sweep_route_runs_the_gate_for_every_group(
    consumer: tuple[FlaskClient, list[dict[str, Any]]],
) -> None:
    client, seen = consumer
    early = raw_push(
        {
            "data": b64("second"),
            "attributes": {"fifo_group": "g2", "fifo_seq": "2"},
            "messageId": "2",
        }
    )
    assert client.post("/", json=early).status_code == 200  # parked: 1 has not run
    swept = client.post("/sweep")
    assert swept.status_code == 200
    report = swept.get_json()
    assert report["swept"] == 1 and set(report["outcomes"]) == {"g2"}
    assert seen == []  # the sweep never runs a number ahead of its gap


def test_ingress_answers_every_framing_and_loses_nothing(
    ingress: FlaskClient, topology: Topology
) -> None:
    # No "data" at all: Pub/Sub's push JSON omits an empty field. functions-framework's
    # conversion answered 400 to this (redelivered until the dead-letter policy, no reason).
    no_data = ingress.post(
        "/", json=raw_push({"attributes": {"case": "no-data"}, "messageId": "n-1"})
    )
    not_json = ingress.post("/", data=b"\xff not json", content_type="application/json")
    ordered = ingress.post(
        "/",
        json=raw_push(
            {
                "data": b64("kept"),
                "attributes": {"dedup_key": "o-1"},
                "messageId": "o-1",
                "orderingKey": "anything",
            }
        ),
    )
    assert [a.status_code for a in (no_data, not_json, ordered)] == [200, 200, 200]

    [published] = drain(topology.final_sub, expected=1, quiet=1)
    assert published.data == b"kept" and published.attributes["origin_message_id"] == "o-1"
    dead = drain(topology.dead_letter_sub, expected=2, quiet=1)
    reasons = sorted(m.attributes["error_reason"] for m in dead)
    assert reasons == sorted([attr.REASON_EMPTY_DATA, attr.REASON_MALFORMED_EVENT])
    [raw] = [m for m in dead if m.attributes["error_reason"] == attr.REASON_MALFORMED_EVENT]
    assert raw.data == b"\xff not json"  # the body as it came, for the operator


def test_a_request_that_is_not_a_post_is_refused_and_dead_letters_nothing(
    ingress: FlaskClient,
    consumer: tuple[FlaskClient, list[dict[str, Any]]],
    topology: Topology,
) -> None:
    client, seen = consumer
    # A probe, a browser or a scanner is not a push: Pub/Sub only POSTs. Answered 405, it
    # leaves no malformed_event letter for the operator to read (it left one per request).
    answers = [
        ingress.get("/").status_code,
        client.get("/").status_code,
        ingress.put("/", data=b"{}").status_code,
        client.get("/sweep").status_code,  # Cloud Scheduler POSTs /sweep too
    ]
    assert answers == [405, 405, 405, 405]
    assert seen == []
    assert drain(topology.dead_letter_sub, expected=0, quiet=1) == []
