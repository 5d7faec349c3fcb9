"""The local stack's push subscription carries the dead-letter policy Terraform deploys.

A message just under Pub/Sub's 10 MB limit is accepted by the origin topic, refused by ingress
(``message_too_large``: ingress keeps room for its own attributes), and its dead-letter copy (the
original plus the reason) no longer fits either: ingress logs ``dead_letter_failed`` and answers
500 on purpose, so that Pub/Sub redelivers until the origin subscription's own dead-letter policy
takes the original. Without that policy the local stack redelivered it for ever.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.cloud import pubsub_v1

from pubsub_toolkit import attributes as attr
from pubsub_toolkit_cli.emulator import subscriber_client
from pubsub_toolkit_local.pubsub_health import heal
from pubsub_toolkit_local.stack import LocalStack, RunningEmulators, StackOptions
from tests.conftest import repo_root
from tests.terraform.structure import _blocks, _text

ATTEMPTS = 5  # the emulator's (and Pub/Sub's) smallest max_delivery_attempts: the quickest run
# Data just under the publish limit: the origin topic takes it, ingress (which keeps 4 KB for
# its own attributes) refuses it, and the dead-letter copy with its reason does not fit.
NEAR_LIMIT = attr.MAX_REQUEST_BYTES - 100  # 9,999,900 bytes
# The emulator pushes a refused message again about every second: ATTEMPTS pushes of 10 MB take
# ~10 s on an idle machine; the deadline only bounds a failure (the loop this test rules out).
LANDING_DEADLINE_SECONDS = 120.0


@pytest.fixture(scope="module")
def stack(
    pubsub_emulator: str, firestore_emulator: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalStack]:
    """The e2e stack (conftest.py) with the smallest dead-letter budget on its push
    subscription."""
    options = StackOptions(
        project=f"e2e-{uuid.uuid4().hex[:10]}",
        emulators=RunningEmulators(
            os.environ["PUBSUB_EMULATOR_HOST"], os.environ["FIRESTORE_EMULATOR_HOST"]
        ),
        push_max_delivery_attempts=ATTEMPTS,
    )
    with LocalStack(options, tmp_path_factory.mktemp("stack"), repo_root()) as running:
        yield running


def _push_policy(subscription: str) -> tuple[str, int]:
    client = pubsub_v1.SubscriberClient()
    try:
        config = client.get_subscription(subscription=subscription, timeout=10, retry=None)
    finally:
        client.close()
    policy = config.dead_letter_policy
    return policy.dead_letter_topic, policy.max_delivery_attempts


def _terraform_default_attempts() -> int:
    for _, name, body in _blocks(repo_root() / "terraform", "variable"):
        if name == "push_max_delivery_attempts":
            return int(_text(body["default"]))
    raise AssertionError("terraform/variables.tf has no push_max_delivery_attempts")


def test_the_local_default_gives_at_least_terraforms_pushes() -> None:
    # Pub/Sub's most: the emulator pushes again about once a second, without Terraform's
    # 10-600 s backoff, so the same count would end a message after seconds of an outage.
    assert StackOptions().push_max_delivery_attempts == 100 >= _terraform_default_attempts()


def test_the_ingress_push_subscription_dead_letters_like_terraform(stack: LocalStack) -> None:
    assert stack.topology is not None
    assert _push_policy(stack.topology.ingress_push_sub) == (stack.topology.dead_letter, ATTEMPTS)


def _first_letter(subscription: str, deadline: float) -> Any:
    """The first message on ``subscription`` (acked), pulled until ``deadline``."""
    client = subscriber_client()  # a 10 MB message
    try:
        while time.monotonic() < deadline:
            response = client.pull(
                subscription=subscription, max_messages=10, return_immediately=True, timeout=30
            )
            if response.received_messages:
                client.acknowledge(
                    subscription=subscription,
                    ack_ids=[m.ack_id for m in response.received_messages],
                    timeout=30,
                )
                return response.received_messages[0].message
            time.sleep(0.2)  # the emulator answers an empty pull at once: poll, don't spin
    finally:
        client.close()
    raise AssertionError(
        f"nothing reached {subscription} in {LANDING_DEADLINE_SECONDS:.0f} s: the refused "
        "message is redelivered for ever"
    )


def _json_lines(log: Path) -> list[dict[str, Any]]:
    """The JSON records of a part's log (it holds plain lines too)."""
    return [json.loads(text) for text in log.read_text().splitlines() if text.startswith("{")]


def test_a_message_whose_dead_letter_copy_cannot_fit_ends_as_pubsubs_dead_letter(
    stack: LocalStack, tmp_path: Path
) -> None:
    topo = stack.topology
    assert topo is not None
    data = os.urandom(NEAR_LIMIT)
    publisher = pubsub_v1.PublisherClient()
    try:
        publisher.publish(topo.origin, data, **{attr.DEDUP_KEY: "near-limit"}).result(timeout=60)
    finally:
        publisher.stop()

    letter = _first_letter(topo.dead_letter_sub, time.monotonic() + LANDING_DEADLINE_SECONDS)
    # Pub/Sub's own dead letter of the original (not a toolkit copy, which could not fit).
    assert letter.data == data
    assert letter.attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == str(ATTEMPTS)
    source = letter.attributes["CloudPubSubDeadLetterSourceSubscription"]
    assert source == topo.ingress_push_sub.rsplit("/", 1)[-1]
    assert attr.ERROR_REASON not in letter.attributes
    # ... after ingress refused it and could not dead-letter it itself (its ALERT, once a push).
    failed = [
        (line["reason"], line["dedup_key"])
        for line in _json_lines(stack.work_dir / "ingress.log")
        if line.get("outcome") == "dead_letter_failed"
    ]
    assert failed and set(failed) == {(attr.REASON_TOO_LARGE, "near-limit")}

    # `local heal` recreates a subscription from its own settings: the policy survives.
    heal(topo.ingress_push_sub, save_dir=tmp_path)
    assert _push_policy(topo.ingress_push_sub) == (topo.dead_letter, ATTEMPTS)
