"""Hostile producers (defect 10 of issue 11) through the real ingress and the real relay.

Ingress is the Cloud Function itself (``functions/ingress/main.py`` under functions-framework's
test client, fed Pub/Sub push bodies); the relay is the App Engine Flask app
(``appengine/relay/main.py``'s ``create_app``, test client, App Engine queue-header auth). Both
run on the Pub/Sub and Firestore emulators, so what reaches the final and dead-letter topics is
read back from real subscriptions.

A producer may try to:

* set ``replay_id`` to push a delivered key through ingress dedup again -> ``forged_replay_id``
  (a genuine ``dlq replay``, which mints its ids, still goes through - once);
* set ``origin_message_id``, ``origin_publish_time``, ``error_reason``, ``error_detail`` or
  ``fifo_filler`` -> ingress's own values, or nothing, on the final topic;
* hand the relay a task body Pub/Sub or the contract would refuse (200 attributes, a ``goog``
  name, a non-canonical number) -> ``malformed_task``, nothing on the final topic;
* spell numbers oddly (``" 5"``, ``1_0``, Arabic-Indic digits, ``01``, ``+1``, 2**63, 40 digits)
  -> dead-lettered with the contract's reason.
"""

from __future__ import annotations

import base64
import importlib.util
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import functions_framework
import pytest
from flask.testing import FlaskClient
from google.cloud import firestore, pubsub_v1

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.dead_letters.replay import REASON_FORGED_REPLAY, mint
from pubsub_toolkit.delay.auth import AppEngineQueueAuthenticator
from pubsub_toolkit.delay.payload import REASON_MALFORMED_TASK, DelayedMessage
from pubsub_toolkit.delay.relay import Relay
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.producer.sink import PubSubSink
from pubsub_toolkit.stores.dedup.firestore import FirestoreDedupStore
from pubsub_toolkit_cli.dead_letters.replay import replay
from pubsub_toolkit_local.topology import Topology, create_topology, drain
from tests.conftest import repo_root

INGRESS_SOURCE = repo_root() / "functions/ingress/main.py"
PUBLISH_TIME = "2030-01-01T00:00:00Z"  # what the push bodies below say Pub/Sub stamped
QUEUE = "delay-queue"
ARABIC_INDIC_ONE, ARABIC_INDIC_FIVE = "\u0661", "\u0665"


@dataclass
class Pipeline:
    """The real ingress and relay on one project's topology, sharing one dedup collection."""

    topology: Topology
    ingress: FlaskClient
    relay: FlaskClient
    store: FirestoreDedupStore  # the store both read: where `dlq replay` mints

    def push(
        self,
        data: bytes,
        attributes: dict[str, str],
        message_id: str,
        publish_time: str = PUBLISH_TIME,
    ) -> None:
        """Deliver one message to ingress as the push subscription does; expect an ack."""
        body = {
            "message": {
                "data": base64.b64encode(data).decode(),
                "attributes": attributes,
                "messageId": message_id,
                "publishTime": publish_time,
            },
            "subscription": f"projects/{self.topology.project}/subscriptions/origin-push",
        }
        response = self.ingress.post("/", json=body)
        assert response.status_code == 200, response.get_data(as_text=True)

    def release(self, body: bytes) -> dict[str, Any]:
        """Run one task against the relay as Cloud Tasks does; expect a 2xx and its answer."""
        response = self.relay.post("/release", data=body, headers={"X-AppEngine-QueueName": QUEUE})
        assert response.status_code == 200, response.get_data(as_text=True)
        assert response.json is not None
        return dict(response.json)


def _relay_module() -> Any:
    spec = importlib.util.spec_from_file_location(
        "relay_main", repo_root() / "appengine/relay/main.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def pipeline(
    pubsub_emulator: str,
    firestore_emulator: str,
    project_id: str,
    unique: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Pipeline]:
    topology = create_topology(project_id)
    collection = f"dedup-{unique}"
    env = {
        "GOOGLE_CLOUD_PROJECT": project_id,
        "PUBSUB_TOOLKIT_FINAL_TOPIC": topology.final,
        "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": topology.dead_letter,
        "PUBSUB_TOOLKIT_STORE_BACKEND": "firestore",
        "PUBSUB_TOOLKIT_DEDUP_COLLECTION": collection,
        "PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS": "0",  # no background flusher thread in a test process
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    ingress = functions_framework.create_app(
        target="ingress", source=str(INGRESS_SOURCE), signature_type="http"
    )
    store = FirestoreDedupStore(firestore.Client(project=project_id), collection=collection)
    sink = PubSubSink()
    relay = Relay(
        store=store,
        sink=sink,
        final_topic=topology.final,
        dead_letter_topic=topology.dead_letter,
        lease=timedelta(seconds=60),
        ttl=timedelta(hours=1),
    )
    relay_app = _relay_module().create_app(
        relay=relay, authenticator=AppEngineQueueAuthenticator(QUEUE)
    )
    try:
        yield Pipeline(topology, ingress.test_client(), relay_app.test_client(), store)
    finally:
        sink.close()


def reasons_by_case(dead: list[Message]) -> dict[str, str]:
    """``case`` attribute -> ``error_reason`` of each dead letter (unwrapping JSON-wrapped ones)."""
    found = {}
    for m in dead:
        attributes = m.attributes
        if attributes.get("dlq_wrapped") == "json":
            attributes = {**json.loads(m.data)["attributes"], **attributes}
        found[attributes["case"]] = attributes[attr.ERROR_REASON]
    return found


# --- replay ids ------------------------------------------------------------------------


def test_a_forged_replay_id_is_dead_lettered_and_the_key_is_not_delivered_twice(
    pipeline: Pipeline,
) -> None:
    attributes = {attr.DEDUP_KEY: "order-1", "item": "book"}
    pipeline.push(b"order 1", attributes, "m1")
    [delivered] = drain(pipeline.topology.final_sub, expected=1, quiet=0.5)
    assert delivered.attributes[attr.DEDUP_KEY] == "order-1"

    # Any id a producer makes up; and a real mint, but for another key.
    mint(pipeline.store, "dl-for-another-key", "order-2")
    for n, replay_id in enumerate(["guessed", "dl-for-another-key"]):
        forged = {**attributes, attr.REPLAY_ID: replay_id, "case": replay_id}
        pipeline.push(b"order 1", forged, f"forged-{n}")
        pipeline.push(b"order 1", forged, f"forged-{n}")  # redelivered: still one dead letter

    dead = drain(pipeline.topology.dead_letter_sub, expected=2, timeout=30, quiet=1)
    assert reasons_by_case(dead) == {
        "guessed": REASON_FORGED_REPLAY,
        "dl-for-another-key": REASON_FORGED_REPLAY,
    }
    assert len(dead) == 2
    assert drain(pipeline.topology.final_sub, expected=0, quiet=1.5) == []


def test_a_genuine_dlq_replay_still_passes_ingress_once(pipeline: Pipeline) -> None:
    topo = pipeline.topology
    attributes = {attr.DEDUP_KEY: "order-2", "item": "pen"}
    pipeline.push(b"order 2", attributes, "m2")
    [first] = drain(topo.final_sub, expected=1, quiet=0.5)
    # The consumer dead-lettered it (as the FIFO gate does a poison message): the final-topic
    # copy with its provenance, plus why.
    publisher = pubsub_v1.PublisherClient()
    publisher.publish(
        topo.dead_letter,
        first.data,
        **first.attributes,
        **{attr.ERROR_REASON: "fifo_poison", attr.ERROR_DETAIL: "handler failed"},
    ).result(timeout=10)
    tap = f"projects/{topo.project}/subscriptions/origin-tap"
    subscriber = pubsub_v1.SubscriberClient()
    sink = PubSubSink()
    try:
        subscriber.create_subscription(name=tap, topic=topo.origin, timeout=10)
        replayed = replay(
            subscriber,
            topo.dead_letter_sub,
            sink,
            topo.origin,
            store=pipeline.store,
            select=lambda letter: letter.dedup_key == "order-2",
        )
    finally:
        sink.close()
        subscriber.close()
    assert [d.dedup_key for d in replayed] == ["order-2"]

    [copy] = drain(tap, expected=1, timeout=30, quiet=0.5)  # what the push subscription delivers
    assert copy.attributes[attr.REPLAY_ID] == replayed[0].dead_letter_id
    assert copy.publish_time is not None
    for _ in range(2):  # delivered twice: one replay through, not two
        pipeline.push(
            copy.data, dict(copy.attributes), copy.message_id, copy.publish_time.isoformat()
        )

    [again] = drain(topo.final_sub, expected=1, timeout=30, quiet=1.5)
    assert again.data == b"order 2"
    assert again.attributes[attr.DEDUP_KEY] == "order-2"
    assert again.attributes[attr.REPLAY_ID] == replayed[0].dead_letter_id
    # A genuine replay keeps the original's provenance, and none of the dead letter's reason.
    assert again.attributes[attr.ORIGIN_MESSAGE_ID] == "m2"
    assert again.attributes[attr.ORIGIN_PUBLISH_TIME] == first.attributes[attr.ORIGIN_PUBLISH_TIME]
    assert attr.ERROR_REASON not in again.attributes
    assert attr.ERROR_DETAIL not in again.attributes
    assert drain(topo.dead_letter_sub, expected=0, quiet=0.5) == []


# --- attributes ingress owns -----------------------------------------------------------

FORGED = {
    attr.ORIGIN_MESSAGE_ID: "forged-id",
    attr.ORIGIN_PUBLISH_TIME: "1999-01-01T00:00:00Z",
    attr.ERROR_REASON: "forged_reason",
    attr.ERROR_DETAIL: "forged detail",
    attr.FIFO_FILLER: "forged: skip me",
}


def test_producer_set_toolkit_attributes_never_reach_final_unchanged(pipeline: Pipeline) -> None:
    pipeline.push(b"plain", {**FORGED, "case": "plain"}, "real-1")
    fifo = {attr.FIFO_GROUP: "g-owned", attr.FIFO_SEQ: "1"}
    pipeline.push(b"fifo", {**FORGED, **fifo, "case": "fifo"}, "real-2")

    delivered = drain(pipeline.topology.final_sub, expected=2, timeout=30, quiet=1)
    by_case = {m.attributes["case"]: m for m in delivered}
    assert by_case.keys() == {"plain", "fifo"}
    for case, message_id in (("plain", "real-1"), ("fifo", "real-2")):
        out = by_case[case].attributes
        assert out[attr.ORIGIN_MESSAGE_ID] == message_id
        assert out[attr.ORIGIN_PUBLISH_TIME] == attr.format_time(attr.parse_time(PUBLISH_TIME))
        for name in (attr.ERROR_REASON, attr.ERROR_DETAIL, attr.FIFO_FILLER):
            assert name not in out, (case, name)
    # The FIFO message is a real message at its number, not a filler the consumer would skip.
    assert by_case["fifo"].data == b"fifo"
    assert by_case["fifo"].attributes[attr.FIFO_SEQ] == "1"
    assert drain(pipeline.topology.dead_letter_sub, expected=0, quiet=0.5) == []


# --- odd number forms ------------------------------------------------------------------

ODD_NUMBERS: list[tuple[str, dict[str, str]]] = [
    (attr.REASON_INVALID_DELAY, {attr.DELAY_SECONDS: " 5"}),
    (attr.REASON_INVALID_DELAY, {attr.DELAY_SECONDS: "1_0"}),
    (attr.REASON_INVALID_DELAY, {attr.DELAY_SECONDS: ARABIC_INDIC_FIVE}),
    (attr.REASON_INVALID_DELAY, {attr.DELAY_SECONDS: "+1"}),
    (attr.REASON_INVALID_DELAY, {attr.DELAY_SECONDS: "1e3"}),
    (attr.REASON_INVALID_FIFO_SEQ, {attr.FIFO_SEQ: "01"}),
    (attr.REASON_INVALID_FIFO_SEQ, {attr.FIFO_SEQ: "+1"}),
    (attr.REASON_INVALID_FIFO_SEQ, {attr.FIFO_SEQ: ARABIC_INDIC_ONE}),
    (attr.REASON_INVALID_FIFO_SEQ, {attr.FIFO_SEQ: str(2**63)}),
    (attr.REASON_INVALID_FIFO_SEQ, {attr.FIFO_SEQ: "1" * 40}),
    (attr.REASON_INVALID_FIFO_SEQ, {attr.FIFO_SEQ: " 1"}),
    (attr.REASON_INVALID_DELIVER_AT, {attr.DELIVER_AT: " 2030-01-01T00:00:00Z"}),
    (attr.REASON_INVALID_DELIVER_AT, {attr.DELIVER_AT: "\u0662\u0660\u0663\u0660-01-01T00:00:00Z"}),
]


def test_odd_number_forms_are_dead_lettered_with_their_reason(pipeline: Pipeline) -> None:
    for i, (_, odd) in enumerate(ODD_NUMBERS):
        attributes = {**odd, "case": str(i), attr.DEDUP_KEY: f"odd-{i}"}
        if attr.FIFO_SEQ in odd:
            attributes[attr.FIFO_GROUP] = f"g-odd-{i}"  # so the number is the only fault
        pipeline.push(b"odd", attributes, f"odd-{i}")
    pipeline.push(b"fine", {attr.DEDUP_KEY: "fine", attr.DELAY_SECONDS: "0"}, "fine")

    dead = drain(pipeline.topology.dead_letter_sub, expected=len(ODD_NUMBERS), timeout=60, quiet=1)
    assert reasons_by_case(dead) == {str(i): reason for i, (reason, _) in enumerate(ODD_NUMBERS)}
    assert all(m.attributes[attr.ERROR_DETAIL] for m in dead)
    # Only the canonical message reached final: no odd number was passed on, nor a filler for
    # one (a number that is not canonical is no FIFO number at all).
    delivered = drain(pipeline.topology.final_sub, expected=1, timeout=30, quiet=1)
    assert [m.attributes[attr.DEDUP_KEY] for m in delivered] == ["fine"]


# --- the relay re-checks the contract --------------------------------------------------

PAST = datetime(2020, 1, 1, tzinfo=UTC)  # due long ago: the relay publishes at once


def task_body(key: str, attributes: dict[str, str]) -> bytes:
    """A task body as a hostile (or buggy) task creator might write it: never validated."""
    message = OutboundMessage(b"task " + key.encode(), {attr.DEDUP_KEY: key, **attributes})
    return DelayedMessage(message, key, PAST).to_json()


HOSTILE_TASKS: list[tuple[str, str, dict[str, str]]] = [
    ("many", attr.REASON_TOO_MANY_ATTRIBUTES, {f"a{i}": "v" for i in range(200)}),
    ("goog", attr.REASON_RESERVED_ATTRIBUTE, {"goog_injected": "x"}),
    ("seq", attr.REASON_INVALID_FIFO_SEQ, {attr.FIFO_GROUP: "g", attr.FIFO_SEQ: "01"}),
    ("huge-seq", attr.REASON_INVALID_FIFO_SEQ, {attr.FIFO_GROUP: "g", attr.FIFO_SEQ: str(2**63)}),
    ("at", attr.REASON_INVALID_DELIVER_AT, {attr.DELIVER_AT: "2030-01-01T00:00:00Z "}),
]


def test_the_relay_dead_letters_task_bodies_that_break_the_contract(pipeline: Pipeline) -> None:
    for key, _, attributes in HOSTILE_TASKS:
        body = task_body(key, attributes)
        for _ in range(2):  # Cloud Tasks may run a task twice: one dead letter still
            answer = pipeline.release(body)
            assert answer["outcome"] == "dead_lettered", (key, answer)
    control = pipeline.release(task_body("fine", {"color": "blue"}))
    assert control["outcome"] == "published"

    dead = drain(
        pipeline.topology.dead_letter_sub, expected=len(HOSTILE_TASKS), timeout=30, quiet=1
    )
    assert len(dead) == len(HOSTILE_TASKS)
    found = {}
    for m in dead:
        assert m.attributes[attr.ERROR_REASON] == REASON_MALFORMED_TASK
        found[json.loads(m.data)["dedup_key"]] = m.attributes[attr.ERROR_DETAIL]
    assert found.keys() == {key for key, _, _ in HOSTILE_TASKS}
    for key, reason, _ in HOSTILE_TASKS:
        assert reason in found[key], (key, found[key])  # the detail names the contract's reason
    delivered = drain(pipeline.topology.final_sub, expected=1, timeout=30, quiet=1)
    assert [m.attributes[attr.DEDUP_KEY] for m in delivered] == ["fine"]
    assert not any(k.lower().startswith("goog") for m in delivered for k in m.attributes)
