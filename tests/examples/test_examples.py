"""Each program in examples/ run as a subprocess, as its docstring tells a user to run it.

They run against the session's real Pub/Sub and Firestore emulators and redis-server (and the
delayed-delivery one against the local stack: ingress, the Cloud Tasks emulator, the relay);
the assertions read the exit code and what the program printed. Each example creates its own
topics and a fresh subscription per run (a stopped streaming-pull client leaves its
subscription stuck in the emulator), and its own project id keeps runs apart.

``test_every_example_has_a_test`` fails when a file is added to examples/ without a test here.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from pubsub_toolkit_local.stack import LocalStack
from tests.conftest import repo_root
from tests.examples.conftest import clean_env

EXAMPLES = repo_root() / "examples"
RUN_TIMEOUT = 180  # seconds; each example bounds itself well below this


def run_example(
    name: str, env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python examples/NAME ARGS`` with ``env``; the output is kept for the assertions."""
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def explain(done: subprocess.CompletedProcess[str]) -> str:
    """A failed assertion's message: the example's exit code and output."""
    return f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr[-4000:]}"


def emulator_env(project_id: str, store: str, redis_url: str) -> dict[str, str]:
    """What the dedup, FIFO and function examples need: both emulators, Redis, a project."""
    return clean_env(
        GOOGLE_CLOUD_PROJECT=project_id,
        PUBSUB_EMULATOR_HOST=os.environ["PUBSUB_EMULATOR_HOST"],
        FIRESTORE_EMULATOR_HOST=os.environ["FIRESTORE_EMULATOR_HOST"],
        PUBSUB_TOOLKIT_REDIS_URL=redis_url,
        PUBSUB_TOOLKIT_STORE_BACKEND=store,
    )


@pytest.fixture
def servers(pubsub_emulator: str, firestore_emulator: str, redis_url: str) -> str:
    """The session's emulators and Redis running; the Redis URL."""
    return redis_url


# --- dedup_subscriber.py ----------------------------------------------------------------


@pytest.mark.parametrize("store", ["redis", "firestore"])
def test_dedup_subscriber(servers: str, project_id: str, store: str) -> None:
    done = run_example("dedup_subscriber.py", emulator_env(project_id, store, servers))
    assert done.returncode == 0, explain(done)
    out = done.stdout
    assert f"dedup store: {store}" in out
    deliveries = re.findall(r"delivery of message +(\d+) (order-\d): (\w+) +(.*)", out)
    # Four messages published, one of them delivered twice (its first ack withheld).
    assert len(deliveries) == 5, explain(done)
    outcomes = sorted((key, outcome) for _id, key, outcome, _ack in deliveries)
    assert outcomes == [
        ("order-1", "processed"),
        ("order-2", "duplicate"),  # the redelivery after the lost ack: same message id
        ("order-2", "processed"),
        ("order-3", "duplicate"),  # the producer's retry: a new message id
        ("order-3", "processed"),
    ]
    order2_ids = {mid for mid, key, _o, _a in deliveries if key == "order-2"}
    order3_ids = {mid for mid, key, _o, _a in deliveries if key == "order-3"}
    assert len(order2_ids) == 1 and len(order3_ids) == 2
    assert "ledger: order-1 booked 1x, order-2 booked 1x, order-3 booked 1x" in out
    assert out.rstrip().splitlines()[-2].startswith("OK: ")


def test_dedup_subscriber_fails_when_the_store_is_down(servers: str, project_id: str) -> None:
    # Nothing listens on this port: every claim fails, nothing may be acked or booked, and
    # the example must say so with exit 1 rather than pretend.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead_port = sock.getsockname()[1]
    env = emulator_env(project_id, "redis", f"redis://127.0.0.1:{dead_port}/0")
    done = run_example("dedup_subscriber.py", env, "--timeout", "5")
    assert done.returncode == 1, explain(done)
    assert "FAILED: not every message was acked within 5s" in done.stdout
    assert "delivery of message" not in done.stdout
    assert "ledger: \n" in done.stdout  # no order booked


# --- fifo_publisher_consumer.py ---------------------------------------------------------


@pytest.mark.parametrize("store", ["redis", "firestore"])
def test_fifo_publisher_consumer(servers: str, project_id: str, store: str) -> None:
    done = run_example("fifo_publisher_consumer.py", emulator_env(project_id, store, servers))
    assert done.returncode == 0, explain(done)
    out = done.stdout
    assert f"store for counters and group state: {store}" in out
    assert "group A handled in order: created -> paid -> shipped -> delivered" in out
    assert "group B handled in order: created -> cancelled -> refunded" in out
    handler_calls = re.findall(r"^  handler: ([AB])#(\d+) (\w+)$", out, re.MULTILINE)
    # Each message handled once, at the number the Publisher gave it; the retried publish of
    # "cancelled" keeps its number (B#2), so "refunded" is B#3.
    assert sorted(handler_calls) == [
        ("A", "1", "created"),
        ("A", "2", "paid"),
        ("A", "3", "shipped"),
        ("A", "4", "delivered"),
        ("B", "1", "created"),
        ("B", "2", "cancelled"),
        ("B", "3", "refunded"),
    ]
    assert "handler: A#2 paid fails (service busy)" in out  # the failure really happened
    deliveries = re.findall(r"^delivery of ([AB]#\d+) +\w+ +-> (\w+)$", out, re.MULTILINE)
    assert {d for d, _ in deliveries} >= {"A#1", "A#2", "A#3", "A#4", "B#1", "B#2", "B#3"}
    assert ("A#2", "retry") in deliveries  # nacked once by the Consumer
    assert out.rstrip().splitlines()[-2].startswith("OK: ")


# --- delayed_and_cancel.py --------------------------------------------------------------


def test_delayed_and_cancel(stack: LocalStack) -> None:
    done = run_example("delayed_and_cancel.py", clean_env(**stack.env), "--delay", "2")
    assert done.returncode == 0, explain(done)
    out = done.stdout
    keep = re.search(r"published (reminder-\w+-keep) ", out)
    drop = re.search(r"published (reminder-\w+-cancel) ", out)
    assert keep and drop, explain(done)
    assert re.search(rf"ingress scheduled {drop[1]} as task [0-9a-f]{{12}}", out)
    assert f"cancel({drop[1]}): cancelled=True already_delivered=False task_deleted=True" in out
    arrivals = re.findall(r"arrived on the final topic: (\S+) \(\+(\d+) ms", out)
    assert [key for key, _ms in arrivals] == [keep[1]], explain(done)
    assert int(arrivals[0][1]) >= 0  # never early (a negative lateness prints as -N)
    assert f"cancel({keep[1]}) after it arrived: already_delivered=True" in out
    assert out.rstrip().splitlines()[-2].startswith("OK: ")


# --- consumer_function.py ---------------------------------------------------------------


def functions_framework_serving(source: Path) -> list[str]:
    """Command lines of running functions-framework processes serving ``source``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:  # the process ended while we looked
            continue
        if f"--source={source}".encode() in argv:
            found.append(b" ".join(argv).decode(errors="replace"))
    return found


@pytest.mark.parametrize("store", ["redis", "firestore"])
def test_consumer_function(servers: str, project_id: str, store: str) -> None:
    source = (EXAMPLES / "consumer_function.py").resolve()
    done = run_example("consumer_function.py", emulator_env(project_id, store, servers))
    assert done.returncode == 0, explain(done)
    out = done.stdout
    assert re.search(r"serving consume on :\d+ and sweep on :\d+", out)
    effects = re.findall(r"^handler: effect of (.+)$", out, re.MULTILINE)
    assert effects.count("welcome email") == 1  # the producer's retry had no second effect
    steps = [e.split(" (")[0] for e in effects if e != "welcome email"]
    assert steps == ["created", "paid", "shipped"], explain(done)
    assert "handler: paid failed (injected)" in out
    # The failed step ran again: by the sweep (what the example shows), or - on a slow machine,
    # before the sweep's next call - by Pub/Sub's push redelivery of the nacked message.
    deliveries = re.findall(r"^consume: delivery of message (\d+) -> (\w+)$", out, re.M)
    nacked = {m for m, outcome in deliveries if outcome == "in_progress"}
    redelivered = any(m in nacked and outcome == "processed" for m, outcome in deliveries)
    assert "sweep (Cloud Scheduler's call)" in out or redelivered, explain(done)
    assert len(re.findall(r"^consume: delivery of message \d+ -> duplicate$", out, re.M)) >= 1
    assert out.rstrip().splitlines()[-2].startswith("OK: ")
    # The example stopped both functions-framework servers it started (by process group).
    assert functions_framework_serving(source) == []


# --- every example ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "needs"),
    [
        ("dedup_subscriber.py", "PUBSUB_EMULATOR_HOST"),
        ("fifo_publisher_consumer.py", "PUBSUB_EMULATOR_HOST"),
        ("delayed_and_cancel.py", "PUBSUB_EMULATOR_HOST"),
        ("consumer_function.py", "PUBSUB_EMULATOR_HOST"),
    ],
)
def test_an_example_without_its_environment_says_what_to_set(name: str, needs: str) -> None:
    done = run_example(name, clean_env(PUBSUB_TOOLKIT_REDIS_URL="redis://127.0.0.1:9/0"))
    assert done.returncode == 2, explain(done)
    assert needs in done.stderr and "Traceback" not in done.stderr, explain(done)


# The test (or tests) that run each example. A new file in examples/ needs an entry here.
TESTS_OF: dict[str, tuple[Callable[..., None], ...]] = {
    "dedup_subscriber.py": (
        test_dedup_subscriber,
        test_dedup_subscriber_fails_when_the_store_is_down,
    ),
    "fifo_publisher_consumer.py": (test_fifo_publisher_consumer,),
    "delayed_and_cancel.py": (test_delayed_and_cancel,),
    "consumer_function.py": (test_consumer_function,),
}


def test_every_example_has_a_test() -> None:
    programs = sorted(p.name for p in EXAMPLES.glob("*.py"))
    assert programs, f"no examples found in {EXAMPLES}"
    untested = [name for name in programs if name not in TESTS_OF]
    assert not untested, f"examples without a test in {__file__}: {untested}"
    gone = [name for name in TESTS_OF if name not in programs]
    assert not gone, f"tests for examples that no longer exist: {gone}"
    for name, tests in TESTS_OF.items():
        for test in tests:
            assert globals().get(test.__name__) is test, f"{name}: {test.__name__} is not here"
    # Each example says what it shows and how to run it, in its module docstring.
    for name in programs:
        text = (EXAMPLES / name).read_text()
        assert text.startswith('"""'), f"{name} has no module docstring"
        docstring = text.split('"""')[1]
        assert "What it shows" in docstring and "Run it" in docstring, name
