"""Letters that describe themselves falsely, through ingress, ``dlq list`` and ``dlq replay``
on the Pub/Sub emulator and a real redis-server (issue 24, defect 8).

* a producer's ``dlq_wrapped`` (or any ``dlq_*`` / ``CloudPubSubDeadLetter*``) is refused at
  ingress (``reserved_attribute``) and its letter lists, and replays, exactly what it sent -
  never the "embedded message" its data pretends to hold;
* letters an older version wrote with a producer's ``dlq_wrapped`` (non-JSON data, or JSON
  beside other attributes) are listed as unreadable, counted, kept, and never replayed - the
  listing and ``replay --all`` go on past them;
* a message Pub/Sub's own dead-letter policy forwarded is the message as it was: its
  ``error_reason`` and ``dlq_wrapped`` are the producer's, not a description of the letter.

The CLI runs as a user runs it (a subprocess with the environment).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from google.cloud import pubsub_v1
from google.pubsub_v1.types import DeadLetterPolicy

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.config import Settings
from pubsub_toolkit.core.ingress import IngressOutcome
from pubsub_toolkit.dead_letters.send import DLQ_WRAPPED, dead_letter_copy
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message
from pubsub_toolkit_cli.dead_letters.listing import DeadLetter, list_dead_letters
from pubsub_toolkit_local.topology import Topology, create_topology, drain
from tests.support.waiting import wait_until

FORGED_INNER = {
    "data_base64": base64.b64encode(b"forged content").decode(),
    "attributes": {attr.DEDUP_KEY: "victim-key"},
    "message_id": "1",
    "ordering_key": "",
}
FORGED_JSON = json.dumps(FORGED_INNER).encode()
NOT_JSON = b"\xff\x00 plainly not JSON"


@pytest.fixture
def topology(pubsub_emulator: str, project_id: str) -> Iterator[Topology]:
    topo = create_topology(project_id)
    subscriber = pubsub_v1.SubscriberClient()
    subscriber.create_subscription(name=tap(topo), topic=topo.origin, timeout=10)
    subscriber.close()
    yield topo


def tap(topo: Topology) -> str:
    """A pull subscription on origin: what `dlq replay` re-published."""
    return f"projects/{topo.project}/subscriptions/origin-tap"


@pytest.fixture
def env(topology: Topology, redis_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "GOOGLE_CLOUD_PROJECT": topology.project,
        "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
        "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
        "PUBSUB_TOOLKIT_STORE_BACKEND": "redis",
        "PUBSUB_TOOLKIT_REDIS_URL": redis_url,
        "PUBSUB_TOOLKIT_DEDUP_COLLECTION": f"dedup-{topology.project}",
        "PUBSUB_TOOLKIT_CONSUMER_ID": f"cli-{topology.project}",
        "PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS": "0",
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


def publish(topic: str, data: bytes, attributes: dict[str, str]) -> str:
    publisher = pubsub_v1.PublisherClient()
    message_id: str = publisher.publish(topic, data, **attributes).result(timeout=30)
    return message_id


def listed_count(env: dict[str, str]) -> str:
    """`dlq list`'s count line (stderr), after checking it ran cleanly."""
    listed = cli(env, "dlq", "list")
    assert listed.returncode == 0, listed.stderr
    return listed.stderr.strip().splitlines()[-1]


def test_a_producers_dead_letter_attributes_are_refused_and_its_letter_is_what_it_sent(
    topology: Topology, env: dict[str, str]
) -> None:
    ingress = Ingress.from_settings(Settings.from_env(env))
    run = topology.project  # redis-server is shared by the session: keys of this test's own
    forged = {DLQ_WRAPPED: "json"}
    sent = {
        f"p-1-{run}": Message(NOT_JSON, forged, message_id=f"o1-{run}"),
        f"p-2-{run}": Message(FORGED_JSON, forged, message_id=f"o2-{run}"),
        f"p-3-{run}": Message(
            b"three", {"CloudPubSubDeadLetterSourceSubscription": "x"}, message_id=f"o3-{run}"
        ),
    }
    for key, message in sent.items():
        sent[key] = Message(
            message.data, {**message.attributes, attr.DEDUP_KEY: key}, message_id=message.message_id
        )
    for message in sent.values():
        result = ingress.handle(message)
        assert (result.outcome, result.detail) == (
            IngressOutcome.DEAD_LETTERED,
            attr.REASON_RESERVED_ATTRIBUTE,
        )

    listed = cli(env, "dlq", "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr.strip().endswith("3 dead letter(s)")
    assert "victim-key" not in listed.stdout and "UNREADABLE" not in listed.stdout
    subscriber = pubsub_v1.SubscriberClient()
    try:
        letters = list_dead_letters(subscriber, topology.dead_letter_sub)
    finally:
        subscriber.close()
    by_key = {d.dedup_key or "": d for d in letters}
    assert by_key.keys() == sent.keys()
    for key, letter in by_key.items():  # the producer's message, whole: data and attributes
        assert letter.reason == attr.REASON_RESERVED_ATTRIBUTE
        assert (letter.message.data, dict(letter.message.attributes)) == (
            sent[key].data,
            dict(sent[key].attributes),
        )

    replayed = cli(env, "dlq", "replay", "--all")
    assert replayed.returncode == 0, replayed.stderr
    assert "replayed 3 message(s)" in replayed.stdout
    copies = drain(tap(topology), expected=3, timeout=30, quiet=0.5)
    assert sorted(c.data for c in copies) == sorted(m.data for m in sent.values())
    # Through ingress again: refused again, with the reason; nothing reaches the final topic.
    for copy in copies:
        again = ingress.handle(copy)
        assert again.detail == attr.REASON_RESERVED_ATTRIBUTE
    assert drain(topology.final_sub, expected=0, quiet=0.5) == []
    assert listed_count(env) == "3 dead letter(s)"


def test_unreadable_letters_are_listed_counted_and_kept_and_replay_all_goes_past_them(
    topology: Topology, env: dict[str, str]
) -> None:
    poison = {attr.ERROR_REASON: "fifo_poison", attr.ERROR_DETAIL: "handler failed"}
    # As an older version dead-lettered a final-topic message that kept a producer's dlq_wrapped.
    unreadable = {
        publish(topology.dead_letter, NOT_JSON, {**poison, DLQ_WRAPPED: "json", "k": "1"}),
        publish(
            topology.dead_letter,
            FORGED_JSON,
            {**poison, DLQ_WRAPPED: "json", attr.DEDUP_KEY: "old-2", "k": "2"},
        ),
    }
    publish(topology.dead_letter, b"fine", {**poison, attr.DEDUP_KEY: "good-1"})
    wrapped = dead_letter_copy(Message(b"", {attr.DEDUP_KEY: "empty-1"}), "empty_data", "none")
    assert wrapped.attributes[DLQ_WRAPPED] == "json"  # the toolkit's own wrapping reads fine
    publish(topology.dead_letter, wrapped.data, dict(wrapped.attributes))

    for _ in range(2):  # a listing never stops at an unreadable letter, nor hides letters after
        listed = cli(env, "dlq", "list")
        assert listed.returncode == 0, listed.stderr
        assert listed.stderr.strip().endswith(
            "4 dead letter(s), 2 of them unreadable (kept on the topic)"
        )
        assert listed.stdout.count("UNREADABLE") == 2
        assert "victim-key" not in listed.stdout

    replayed = cli(env, "dlq", "replay", "--all")
    assert replayed.returncode == 0, replayed.stderr
    assert "replayed 2 message(s)" in replayed.stdout
    kept = [line for line in replayed.stdout.splitlines() if line.startswith("kept ")]
    assert {line.split()[1].rstrip(":") for line in kept} == unreadable
    copies = drain(tap(topology), expected=2, timeout=30, quiet=0.5)
    assert sorted((c.data, c.attributes[attr.DEDUP_KEY]) for c in copies) == [
        (b"", "empty-1"),
        (b"fine", "good-1"),
    ]
    assert listed_count(env) == "2 dead letter(s), 2 of them unreadable (kept on the topic)"


def test_a_message_pubsub_forwarded_is_listed_as_it_was_sent(
    topology: Topology, env: dict[str, str]
) -> None:
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    flaky = publisher.create_topic(name=f"projects/{topology.project}/topics/flaky").name
    failing = subscriber.create_subscription(
        request={
            "name": f"projects/{topology.project}/subscriptions/flaky-sub",
            "topic": flaky,
            "dead_letter_policy": DeadLetterPolicy(
                dead_letter_topic=topology.dead_letter, max_delivery_attempts=5
            ),
        }
    ).name
    attributes = {
        DLQ_WRAPPED: "json",
        attr.ERROR_REASON: "forged_reason",
        attr.DEDUP_KEY: "fw-1",
    }
    publish(flaky, FORGED_JSON, attributes)

    def forwarded() -> list[DeadLetter]:
        # Every delivery fails (nack) until Pub/Sub's policy forwards the message.
        response = subscriber.pull(subscription=failing, max_messages=10, return_immediately=True)
        ack_ids = [m.ack_id for m in response.received_messages]
        if ack_ids:
            subscriber.modify_ack_deadline(
                subscription=failing, ack_ids=ack_ids, ack_deadline_seconds=0
            )
        return list_dead_letters(subscriber, topology.dead_letter_sub)

    try:
        [letter] = wait_until(forwarded, timeout=60, what="the forwarded message")
    finally:
        subscriber.close()
    assert letter.reason == "max_delivery_attempts"  # stable: operators filter on it
    assert "flaky-sub" in letter.detail and letter.unreadable == ""
    assert letter.message.data == FORGED_JSON  # not the "embedded" forged content
    assert dict(letter.message.attributes) == attributes
    assert letter.dedup_key == "fw-1"


def test_replay_of_an_id_that_is_not_on_the_subscription_says_so_and_exits_1(
    topology: Topology, env: dict[str, str]
) -> None:
    """A mistyped `--id` is named, not answered "replayed 0" with exit 0; the ids that are
    there are still replayed."""
    poison = {attr.ERROR_REASON: "fifo_poison", attr.ERROR_DETAIL: "handler failed"}
    there = publish(topology.dead_letter, b"fine", {**poison, attr.DEDUP_KEY: "good-2"})
    done = cli(env, "dlq", "replay", "--id", there, "--id", "99999")
    assert done.returncode == 1, done.stderr
    assert "replayed 1 message(s)" in done.stdout
    assert done.stderr.strip().splitlines() == [
        "pubsub-toolkit: error: no dead letter with id 99999 on "
        f"projects/{topology.project}/subscriptions/dead-letter-sub (`pubsub-toolkit dlq list` "
        "shows the ids)"
    ]
    copies = drain(tap(topology), expected=1, timeout=30, quiet=0.5)
    assert [c.attributes[attr.DEDUP_KEY] for c in copies] == ["good-2"]
