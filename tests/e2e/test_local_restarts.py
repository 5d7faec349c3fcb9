"""The local stack as a user meets it across consumer restarts, part restarts and `down`/`up`.

Everything goes through the `pubsub-toolkit` command (``local up`` starts real emulators, the
Cloud Tasks emulator, ingress under functions-framework and the relay under gunicorn), plus one
plain google-cloud-pubsub streaming subscriber standing in for a user's own consumer.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.cloud import pubsub_v1

from pubsub_toolkit_cli.emulator import subscriber_client
from pubsub_toolkit_local.control import DEFAULT_PORTS, StackState
from pubsub_toolkit_local.emulators import PUBSUB_EMULATOR
from pubsub_toolkit_local.processes import free_port, process_group_alive
from pubsub_toolkit_local.stack import StackOptions

DEFECTIVE_EMULATOR = any(PUBSUB_EMULATOR.parent.parent.glob("lib/*0.8.20*.jar"))


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pubsub_toolkit_cli.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert done.returncode == 0, done.stderr
    return done


def port_flags(backend: str = "firestore") -> list[str]:
    """Free ports for every part of a stack on ``backend`` (Redis's only with redis: `local up`
    refuses --redis-port on another backend)."""
    names = [n for n in DEFAULT_PORTS if n != "redis_port" or backend == "redis"]
    return [f for name in names for f in ("--" + name.replace("_", "-"), str(free_port()))]


@pytest.fixture
def local_stack(tmp_path: Path) -> Iterator[tuple[dict[str, str], str]]:
    """`local up` on free ports with its own state file; the user's env and up's output.
    `local down` runs in the test where it is checked; here only if the test did not."""
    base = {**os.environ, "PUBSUB_TOOLKIT_STATE_DIR": str(tmp_path / "state")}
    for name in ("PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST"):
        base.pop(name, None)  # the stack's own, not the session's emulators
    up = ok(cli(base, "local", "up", *port_flags()))
    state = StackState.load(tmp_path / "state" / "state.json")
    assert state is not None
    try:
        yield {**base, **state.env, "PUBSUB_TOOLKIT_CONSUMER_ID": "e2e"}, up.stdout
    finally:
        if (tmp_path / "state" / "state.json").exists():
            cli(base, "local", "down")
        assert not any(process_group_alive(s.pid) for s in state.services)


@contextlib.contextmanager
def stack_emulator(env: dict[str, str]) -> Iterator[None]:
    """Clients made inside talk to the stack's Pub/Sub emulator, not the session's."""
    previous = os.environ.get("PUBSUB_EMULATOR_HOST")
    os.environ["PUBSUB_EMULATOR_HOST"] = env["PUBSUB_EMULATOR_HOST"]
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        else:
            os.environ["PUBSUB_EMULATOR_HOST"] = previous


def streaming_subscriber_receives_one_and_stops(env: dict[str, str], subscription: str) -> None:
    """What a user's own consumer does: a plain streaming pull that stops after a message."""
    with stack_emulator(env):
        subscriber = pubsub_v1.SubscriberClient()
    received = threading.Event()

    def handle(message: Any) -> None:
        message.ack()
        received.set()

    stream = subscriber.subscribe(subscription, handle)
    assert received.wait(30), "the streaming subscriber received nothing"
    stream.cancel()
    with contextlib.suppress(Exception):  # a cancelled stream ends with an error by design
        stream.result(timeout=30)
    subscriber.close()


def pull(env: dict[str, str], subscription: str) -> list[Any]:
    """The messages waiting on ``subscription`` of the stack (acked)."""
    with stack_emulator(env):
        client = subscriber_client()
    name = f"projects/{env['GOOGLE_CLOUD_PROJECT']}/subscriptions/{subscription}"
    try:
        response = client.pull(
            subscription=name, max_messages=100, return_immediately=True, timeout=30
        )
        if response.received_messages:
            client.acknowledge(
                subscription=name, ack_ids=[m.ack_id for m in response.received_messages]
            )
        return [m.message for m in response.received_messages]
    finally:
        client.close()


def push_dead_letter_policy(env: dict[str, str]) -> tuple[str, int]:
    """The stack's ingress push subscription's dead-letter topic and max delivery attempts."""
    with stack_emulator(env):
        client = pubsub_v1.SubscriberClient()
    project = env["GOOGLE_CLOUD_PROJECT"]
    try:
        config = client.get_subscription(
            subscription=f"projects/{project}/subscriptions/origin-to-ingress", timeout=30
        )
    finally:
        client.close()
    return (
        config.dead_letter_policy.dead_letter_topic,
        config.dead_letter_policy.max_delivery_attempts,
    )


def handled(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line.split("  [", 1)[0] for line in ok(done).stdout.splitlines()]


def test_consumers_stop_and_start_freely_and_a_stuck_subscription_heals(
    local_stack: tuple[dict[str, str], str],
) -> None:
    env, up_output = local_stack
    [self_test] = [line for line in up_output.splitlines() if "pubsub emulator" in line]
    if DEFECTIVE_EMULATOR:
        assert self_test.startswith("pubsub emulator: STUCK STREAMS - after a streaming-pull")
        assert "pubsub-toolkit local heal SUBSCRIPTION" in self_test
    status = ok(cli(env, "local", "status"))
    assert status.stdout.count("pubsub emulator") == 1  # the self-test's one line, again

    # Through ingress: origin -> ingress -> final; `subscribe` stops and starts on unary pull.
    ok(cli(env, "publish", "--dedup-key", "m1", "first"))
    assert handled(cli(env, "subscribe", "--max", "1", "--timeout", "60s")) == ["first"]
    ok(cli(env, "publish", "--dedup-key", "m2", "second"))
    assert handled(cli(env, "subscribe", "--max", "1", "--timeout", "60s")) == ["second"]

    # A user's own streaming subscriber stops: on the 0.8.20 emulator its subscription is stuck.
    final_sub = f"projects/{env['GOOGLE_CLOUD_PROJECT']}/subscriptions/final-sub"
    ok(cli(env, "publish", "--topic", "final", "--dedup-key", "m3", "third"))
    streaming_subscriber_receives_one_and_stops(env, final_sub)
    ok(cli(env, "publish", "--topic", "final", "--dedup-key", "m4", "fourth"))
    if DEFECTIVE_EMULATOR:
        assert handled(cli(env, "subscribe", "--max", "1", "--timeout", "5s")) == []
    healed = ok(cli(env, "local", "heal", "final-sub")).stdout.strip()
    assert healed.startswith("healed final-sub: recreated with the same settings; ")
    if DEFECTIVE_EMULATOR:
        assert "1 waiting message(s) re-published" in healed
    assert handled(cli(env, "subscribe", "--max", "1", "--timeout", "60s")) == ["fourth"]
    ok(cli(env, "publish", "--topic", "final", "--dedup-key", "m5", "fifth"))
    assert handled(cli(env, "subscribe", "--max", "1", "--timeout", "60s")) == ["fifth"]


def test_restart_one_part_and_down_say_what_they_lose(
    local_stack: tuple[dict[str, str], str],
) -> None:
    env, _ = local_stack
    again = cli(env, "local", "up", *port_flags())
    assert again.returncode == 1 and "`pubsub-toolkit local restart PART`" in again.stderr

    ok(cli(env, "publish", "--topic", "final", "--dedup-key", "w1", "waiting"))
    ok(cli(env, "publish", "--delay", "1h", "--dedup-key", "later", "later"))
    scheduled = "scheduled deliveries: 1 waiting"
    status = ""
    for _ in range(50):  # ingress schedules it as the push arrives: bounded retries of `status`
        status = ok(cli(env, "status")).stdout
        if scheduled in status:
            break
    assert scheduled in status, status

    restarted = ok(cli(env, "local", "restart", "pubsub")).stdout.splitlines()
    assert restarted[0] == (
        "discarded: undelivered messages (1 on final-sub, 0 on dead-letter-sub); "
        "the Pub/Sub emulator keeps none"
    )
    assert "recreated the topics and subscriptions (empty)" in restarted
    # ... with the push subscription's dead-letter policy, as `local up` (and Terraform) made it.
    assert push_dead_letter_policy(env) == (
        f"projects/{env['GOOGLE_CLOUD_PROJECT']}/topics/dead-letter",
        StackOptions().push_max_delivery_attempts,
    )
    tasks = ok(cli(env, "local", "restart", "tasks")).stdout.splitlines()
    assert tasks[0] == "discarded: 1 scheduled deliveries (the Cloud Tasks emulator keeps none)"
    ok(cli(env, "local", "restart", "ingress"))
    assert ok(cli(env, "local", "status", "--no-self-test")).stdout.count("running") == 5
    # The restarted parts work together: a publish goes through the new emulator and ingress.
    ok(cli(env, "publish", "--dedup-key", "after", "after restarts"))
    assert handled(cli(env, "subscribe", "--max", "1", "--timeout", "60s")) == ["after restarts"]
    unknown = cli(env, "local", "restart", "redis")
    assert unknown.returncode == 1 and "redis is not part of this stack" in unknown.stderr

    down = ok(cli(env, "local", "down")).stdout.splitlines()
    assert down[0].startswith("discarded: undelivered messages (0 on final-sub")
    assert down[1] == "discarded: 0 scheduled deliveries (the Cloud Tasks emulator keeps none)"
    assert down[2].startswith("discarded: ") and "Firestore documents" in down[2]
    assert "`local up --persist DIR` keeps them" in down[2]
    assert down[-2].startswith("kept: this run's logs and traces in /")
    assert down[-1].startswith("stopped: ")


@pytest.mark.parametrize("backend", ["firestore", "redis"])
def test_persist_keeps_the_store_across_down_and_up(tmp_path: Path, backend: str) -> None:
    base = {**os.environ, "PUBSUB_TOOLKIT_STATE_DIR": str(tmp_path / "state")}
    for name in ("PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST"):
        base.pop(name, None)
    keep = tmp_path / "keep"
    flags = [*port_flags(backend), "--persist", str(keep), "--store-backend", backend]
    up = ok(cli(base, "local", "up", *flags))
    assert "persist: Firestore" in up.stdout and "message ids restart at 1" in up.stdout
    state = StackState.load(tmp_path / "state" / "state.json")
    assert state is not None
    env = {**base, **state.env, "PUBSUB_TOOLKIT_CONSUMER_ID": "e2e"}
    restarted: StackState | None = None
    try:
        # A FIFO group's numbers come from a counter in the store: they go on after down/up.
        ok(cli(env, "publish", "--topic", "final", "--fifo-group", "g", "a"))
        down = ok(cli(env, "local", "down")).stdout
        assert "kept: " in down and str(keep) in down
        ok(cli(base, "local", "up", *flags))
        restarted = StackState.load(tmp_path / "state" / "state.json")
        ok(cli(env, "publish", "--topic", "final", "--fifo-group", "g", "b"))
        [numbered] = pull(env, "final-sub")
        assert numbered.attributes["fifo_seq"] == "2"  # 1 was issued before the restart
    finally:
        cli(base, "local", "down")
    for s in (*state.services, *(restarted.services if restarted else ())):
        assert not process_group_alive(s.pid)
