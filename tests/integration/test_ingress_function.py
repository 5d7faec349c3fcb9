"""The ingress Cloud Function, through functions-framework, against the real emulators.

* in-process: functions-framework's own test client posts Pub/Sub push bodies;
* as deployed: a functions-framework server process behind a real push subscription from the
  Pub/Sub emulator, with a proxy that turns some answers into 500s (forced redeliveries).
"""

from __future__ import annotations

import base64
import json
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import functions_framework
import pytest
from google.cloud import pubsub_v1

from pubsub_toolkit import attributes as attr
from pubsub_toolkit_local.processes import free_port, start_service
from pubsub_toolkit_local.servers import cloud_function
from pubsub_toolkit_local.topology import Topology, create_topology, drain
from tests.conftest import repo_root
from tests.support.flaky_proxy import FlakyProxy

INGRESS_SOURCE = repo_root() / "functions/ingress/main.py"


@pytest.fixture
def topology(pubsub_emulator: str, firestore_emulator: str, project_id: str) -> Topology:
    return create_topology(project_id)


def ingress_env(topology: Topology, backend: str, redis_url: str | None = None) -> dict[str, str]:
    env = {
        "GOOGLE_CLOUD_PROJECT": topology.project,
        "PUBSUB_TOOLKIT_FINAL_TOPIC": topology.final,
        "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",  # short: resolved in the project
        "PUBSUB_TOOLKIT_STORE_BACKEND": backend,
    }
    if redis_url:
        env["PUBSUB_TOOLKIT_REDIS_URL"] = redis_url
    return env


def push_body(data: bytes, attributes: dict[str, str], message_id: str) -> dict[str, object]:
    return {
        "message": {
            "data": base64.b64encode(data).decode(),
            "attributes": attributes,
            "messageId": message_id,
            "publishTime": "2030-01-01T00:00:00Z",
        },
        "subscription": "projects/p/subscriptions/origin-push",
    }


@pytest.mark.parametrize("backend", ["firestore", "redis"])
def test_function_via_test_client(
    request: pytest.FixtureRequest,
    topology: Topology,
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
) -> None:
    redis_url = request.getfixturevalue("redis_url") if backend == "redis" else None
    for name, value in ingress_env(topology, backend, redis_url).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PUBSUB_TOOLKIT_DEDUP_COLLECTION", f"dedup-{backend}")
    app = functions_framework.create_app(
        target="ingress", source=str(INGRESS_SOURCE), signature_type="http"
    )
    client = app.test_client()
    key = f"order-{backend}"

    ok = client.post("/", json=push_body(b"hello", {"dedup_key": key, "k": "v"}, "1"))
    again = client.post("/", json=push_body(b"hello", {"dedup_key": key, "k": "v"}, "2"))
    bad = client.post("/", json=push_body(b"x", {"fifo_seq": "3"}, "3"))
    assert (ok.status_code, again.status_code, bad.status_code) == (200, 200, 200)

    [delivered] = drain(topology.final_sub, expected=1, quiet=1)
    assert delivered.data == b"hello"
    assert delivered.attributes["dedup_key"] == key
    assert delivered.attributes["k"] == "v"
    assert delivered.attributes["origin_message_id"] == "1"
    [dead] = drain(topology.dead_letter_sub, expected=1, quiet=0.5)
    assert dead.attributes["error_reason"] == attr.REASON_SEQ_WITHOUT_GROUP


@pytest.fixture
def push_pipeline(
    pubsub_emulator: str, firestore_emulator: str, project_id: str, tmp_path: Path
) -> Iterator[tuple[Topology, FlakyProxy]]:
    """ingress served by functions-framework behind a flaky proxy and a push subscription."""
    port = free_port()
    env = ingress_env(Topology.for_project(project_id), "firestore")
    service = start_service(
        cloud_function("ingress", source=INGRESS_SOURCE, target="ingress", port=port, env=env),
        tmp_path,
    )
    try:
        with FlakyProxy(port, fail_every=7) as proxy:
            topology = create_topology(project_id, ingress_url=f"http://127.0.0.1:{proxy.port}")
            yield topology, proxy
    finally:
        service.stop()


def test_thousand_messages_with_copies_and_forced_redeliveries_yield_800_distinct(
    push_pipeline: tuple[Topology, FlakyProxy],
) -> None:
    topology, proxy = push_pipeline
    rng = random.Random(7)
    unique = [(f"key-{i}".encode(), {"dedup_key": f"key-{i}", "n": str(i)}) for i in range(800)]
    copies = [unique[rng.randrange(800)] for _ in range(200)]  # re-published: same key, content
    batch = unique + copies
    rng.shuffle(batch)
    publisher = pubsub_v1.PublisherClient()
    futures = [publisher.publish(topology.origin, data, **attrs) for data, attrs in batch]
    for future in futures:
        future.result(timeout=60)

    delivered = drain(topology.final_sub, expected=800, timeout=240, quiet=3)

    keys = Counter(m.attributes["dedup_key"] for m in delivered)
    assert len(keys) == 800
    assert keys.most_common(1)[0][1] == 1, "a key reached the final topic twice"
    assert all(m.data == m.attributes["dedup_key"].encode() for m in delivered)
    assert proxy.failed > 0, "no redelivery was forced"
    assert proxy.forwarded > 1000  # the forced failures were delivered again
    assert drain(topology.dead_letter_sub, expected=0, quiet=0.5) == []


BAD_INPUTS: list[tuple[str, bytes, dict[str, str]]] = [
    (attr.REASON_EMPTY_DATA, b"", {"note": "empty"}),
    (attr.REASON_INVALID_DELIVER_AT, b"x", {"deliver_at": "not-a-time"}),
    (attr.REASON_INVALID_DELIVER_AT, b"x", {"deliver_at": "2030-01-01T00:00:00"}),
    (attr.REASON_INVALID_DELAY, b"x", {"delay_seconds": "-5"}),
    (attr.REASON_INVALID_DELAY, b"x", {"delay_seconds": "abc"}),
    (
        attr.REASON_CONFLICTING_DELAY,
        b"x",
        {"delay_seconds": "1", "deliver_at": "2030-01-01T00:00:00Z"},
    ),
    (attr.REASON_SEQ_WITHOUT_GROUP, b"x", {"fifo_seq": "1"}),
    (attr.REASON_INVALID_FIFO_SEQ, b"x", {"fifo_group": "g", "fifo_seq": "-1"}),
    (attr.REASON_INVALID_FIFO_GROUP, b"x", {"fifo_group": " "}),
    (attr.REASON_INVALID_DEDUP_KEY, b"x", {"dedup_key": " "}),
    (attr.REASON_TOO_MANY_ATTRIBUTES, b"x", {f"a{i}": "v" for i in range(97)}),
    (attr.REASON_ATTRIBUTE_TOO_LARGE, b"x", {"big": "v" * 2000}),
    (attr.REASON_ATTRIBUTE_TOO_LARGE, b"x", {"k" * 300: "v"}),
    ("delayed_delivery_unavailable", b"x", {"delay_seconds": "3600"}),
]


def test_bad_input_is_dead_lettered_with_reasons_and_counts_add_up(
    push_pipeline: tuple[Topology, FlakyProxy],
) -> None:
    topology, _ = push_pipeline
    publisher = pubsub_v1.PublisherClient()
    good = 5
    for i, (_, data, attrs) in enumerate(BAD_INPUTS):
        publisher.publish(topology.origin, data, case=str(i), **attrs).result(timeout=10)
    for i in range(good):
        publisher.publish(topology.origin, b"fine", n=str(i)).result(timeout=10)

    dead = drain(topology.dead_letter_sub, expected=len(BAD_INPUTS), timeout=60, quiet=2)
    delivered = drain(topology.final_sub, expected=good, timeout=30, quiet=1)

    assert len(dead) + len(delivered) == len(BAD_INPUTS) + good  # nothing lost, nothing extra
    reasons = {
        m.attributes["case"]: m.attributes["error_reason"] for m in dead if "case" in m.attributes
    }
    wrapped = [m for m in dead if m.attributes.get("dlq_wrapped") == "json"]
    expected = {str(i): reason for i, (reason, _, _) in enumerate(BAD_INPUTS)}
    # Copies whose attributes could not be re-published as they are come wrapped as JSON.
    for m in wrapped:
        reasons[json.loads(m.data)["attributes"]["case"]] = m.attributes["error_reason"]
    assert reasons == expected
    assert all(m.attributes["error_detail"] for m in dead)
    assert sorted(m.attributes["n"] for m in delivered) == [str(i) for i in range(good)]
