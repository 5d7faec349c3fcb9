"""A client no one here wrote: the official Node.js library publishes to origin, with the
contract's attributes, and gets the same behaviour as Python producers.

Runs wherever Node.js is installed (`make install` installs the Node client then).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections import defaultdict

import pytest

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer.processor import MessageProcessor
from pubsub_toolkit.consumer.subscriber import Consumer
from pubsub_toolkit.message import Message
from pubsub_toolkit_local.stack import LocalStack
from pubsub_toolkit_local.topology import drain
from tests.conftest import repo_root
from tests.support.waiting import wait_until

NODE_DIR = repo_root() / "tests/e2e/node"


def node_publish(stack: LocalStack, messages: list[dict[str, object]]) -> list[str]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed on this machine")
    if not (NODE_DIR / "node_modules/@google-cloud/pubsub").exists():
        pytest.fail("the Node client is missing: run `make install` (npm ci in tests/e2e/node)")
    done = subprocess.run(
        [node, "publish.mjs", "origin"],
        cwd=NODE_DIR,
        input=json.dumps(messages),
        env={**os.environ, **stack.env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_node_publisher_gets_dedup_delay_fifo_and_dead_letters(stack: LocalStack) -> None:
    assert stack.topology is not None
    env = {**stack.env, "PUBSUB_TOOLKIT_CONSUMER_ID": "node-check"}
    seen: dict[str, list[tuple[float, Message]]] = defaultdict(list)
    lock = threading.Lock()

    def handler(message: Message) -> None:
        with lock:
            seen[message.attributes["dedup_key"]].append((time.time(), message))

    processor = MessageProcessor.from_settings(
        Settings.from_env(env), ConsumerSettings.from_env(env), handler
    )
    fifo = [("3", "third"), ("1", "first"), ("2", "second")]  # out of order on purpose
    messages: list[dict[str, object]] = [
        {"data": "order", "attributes": {"dedup_key": "node-order", "source": "node"}},
        {"data": "order", "attributes": {"dedup_key": "node-order", "source": "node"}},
        {"data": "later", "attributes": {"dedup_key": "node-later", "delay_seconds": "2"}},
        *[
            {
                "data": text,
                "attributes": {"dedup_key": f"node-{seq}", "fifo_group": "node-g", "fifo_seq": seq},
            }
            for seq, text in fifo
        ],
        {"data": "bad", "attributes": {"dedup_key": "node-bad", "fifo_seq": "1"}},
    ]
    with Consumer(stack.topology.final_sub, processor):
        ids = node_publish(stack, messages)
        assert len(ids) == len(messages)
        wait_until(lambda: len(seen) >= 5, timeout=60, what="the Node messages on final")

    assert sorted(seen) == ["node-1", "node-2", "node-3", "node-later", "node-order"]
    assert all(len(copies) == 1 for copies in seen.values()), "a duplicate got through"
    [(arrived, later)] = seen["node-later"]
    assert arrived >= attr.parse_time(later.attributes["deliver_at"]).timestamp()
    handled_fifo = sorted(
        (t, m.data.decode())
        for key, [(t, m)] in seen.items()
        if key.startswith("node-") and key[-1].isdigit()
    )
    assert [text for _, text in handled_fifo] == ["first", "second", "third"]
    assert seen["node-order"][0][1].attributes["source"] == "node"
    [dead] = drain(stack.topology.dead_letter_sub, expected=1, timeout=30, quiet=1)
    assert dead.attributes["error_reason"] == attr.REASON_SEQ_WITHOUT_GROUP
    assert dead.attributes["dedup_key"] == "node-bad"
