"""A consumer Cloud Function built on the library, and a run that serves it locally.

What it shows: the serverless consumer (like the repository's ``functions/consumer`` template).
A Pub/Sub push subscription reaches ``consume``, an HTTP function reading the raw push body;
the toolkit's :class:`pubsub_toolkit.MessageProcessor` deduplicates plain messages by
``dedup_key`` and runs each FIFO group in ``fifo_seq`` order through the gate, then calls
:func:`handle`. A serverless
consumer cannot retry between events, so ``sweep`` - an HTTP function that Cloud Scheduler
calls every minute - runs the parked and backed-off messages.

This file is two things:

* **the function source**, served as Cloud Functions would run it::

      functions-framework --source=examples/consumer_function.py --target=consume \\
          --signature-type=http                  # and --target=sweep

  with the toolkit's settings in the environment (``GOOGLE_CLOUD_PROJECT``,
  ``PUBSUB_TOOLKIT_FINAL_TOPIC``, ``PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC``,
  ``PUBSUB_TOOLKIT_CONSUMER_ID``, ``PUBSUB_TOOLKIT_STORE_BACKEND`` and
  ``PUBSUB_TOOLKIT_REDIS_URL``...) and ``EFFECTS_DIR``, where :func:`handle` records its effect
  (replace it with yours);

* **a run** (``python examples/consumer_function.py``): it creates a topic on the Pub/Sub
  emulator, serves ``consume`` and ``sweep`` with functions-framework on loopback ports (two
  processes, like two deployed functions sharing one store), pushes the topic to ``consume``,
  and publishes a welcome message twice (a producer's retry) and an order's three steps in one
  FIFO group. The handler fails once on ``paid``, so that group waits; the run then calls
  ``sweep`` as Cloud Scheduler would, which runs ``paid`` and ``shipped`` in order. It prints
  every delivery and effect, stops both servers (by process group), and exits 0 only if the
  welcome was handled once and the order's steps exactly once each in order (1 otherwise, 2 for
  a setup error), within ``--timeout`` seconds.

Run it (needs ``pip install 'pubsub-toolkit[functions]'``, and ``[redis]`` for the Redis store)::

    export PUBSUB_EMULATOR_HOST=127.0.0.1:8085           # a running Pub/Sub emulator
    export PUBSUB_TOOLKIT_REDIS_URL=redis://127.0.0.1:6379/0            # the store in Redis ...
    python examples/consumer_function.py
    export FIRESTORE_EMULATOR_HOST=127.0.0.1:8086        # ... or in Firestore
    python examples/consumer_function.py --store firestore

``GOOGLE_CLOUD_PROJECT`` defaults to ``local-project``; ``--store`` defaults to
``PUBSUB_TOOLKIT_STORE_BACKEND``, else redis when ``PUBSUB_TOOLKIT_REDIS_URL`` is set, else
firestore.

Why one file of ~450 lines: the function is the part above ``# --- the run``; the rest serves
that very file, so what the run proves is the source you would deploy. Deploy the function
part (like ``functions/consumer/main.py``) and leave the run out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import functions_framework
from flask import Request
from google.api_core import exceptions as gexc

from pubsub_toolkit import ConsumerSettings, Message, MessageProcessor, Settings
from pubsub_toolkit.cloudevent import message_from_push_body
from pubsub_toolkit.errors import PermanentError

logger = logging.getLogger("consumer_function")

# --- the function ------------------------------------------------------------------------

_lock = threading.Lock()
_processor: MessageProcessor | None = None


def _record(entry: dict[str, Any]) -> None:
    """Append one JSON line to this process's file in EFFECTS_DIR (the example's effect log;
    one file per process, so two function instances never interleave writes)."""
    path = Path(os.environ["EFFECTS_DIR"]) / f"{os.getpid()}.jsonl"
    with _lock, path.open("a", encoding="utf-8") as out:
        out.write(json.dumps({**entry, "at": time.time()}) + "\n")


def handle(message: Message) -> str:
    """Your handler: runs once per dedup key, each FIFO group in order. Here it records the
    effect; the ``example_fail_once`` attribute makes its first attempt fail (the example's
    stand-in for a dependency that is down for a moment)."""
    key = message.attributes.get("dedup_key", message.message_id)
    if message.attributes.get("example_fail_once") == "true":
        # A marker file, not process memory: the first attempt fails in whichever function
        # instance (consume or sweep) makes it, and only that one.
        marker = Path(os.environ["EFFECTS_DIR"]) / f"failed-{key}"
        try:
            marker.touch(exist_ok=False)
        except FileExistsError:
            pass  # failed before: this attempt goes through
        else:
            _record({"failure": key, "step": message.data.decode()})
            raise RuntimeError(f"{key}: downstream unavailable (the example's injected failure)")
    _record(
        {
            "effect": key,
            "step": message.data.decode(),
            "fifo_group": message.attributes.get("fifo_group"),
            "fifo_seq": message.attributes.get("fifo_seq"),
        }
    )
    return "ok"


def _get_processor() -> MessageProcessor:
    """One processor per function instance (clients are made once, on the first event)."""
    global _processor  # noqa: PLW0603 - a function instance's one lazily built processor
    with _lock:
        if _processor is None:
            _processor = MessageProcessor.from_settings(
                Settings.from_env(), ConsumerSettings.from_env(), handle
            )
        return _processor


@functions_framework.http
def consume(request: Request) -> tuple[str, int]:
    """The push subscription's endpoint: a 2xx answer acks; raising (answered 500) makes
    Pub/Sub deliver again."""
    processor = _get_processor()
    body = request.get_data()
    try:
        message = message_from_push_body(body)
    except PermanentError as exc:
        # Not a Pub/Sub message: dead-letter the body as it came, with the reason, then ack.
        processor.reject(Message(body), exc)
        return exc.reason, 200
    outcome = processor.process(message)
    _record({"delivery": message.message_id, "outcome": outcome})
    return outcome, 200


@functions_framework.http
def sweep(request: Request) -> dict[str, Any]:
    """Cloud Scheduler's target: run parked heads and expired gaps of every group."""
    gate = _get_processor().gate
    outcomes = {group: gate.sweep(group).outcome.value for group in gate.groups()}
    return {"swept": len(outcomes), "outcomes": outcomes}


# --- the run: serve the functions locally and check what they did -------------------------


class SetupError(Exception):
    """The environment cannot run the example; the message says what to set."""


def default_store() -> str:
    """``--store``'s default: PUBSUB_TOOLKIT_STORE_BACKEND, else redis when
    PUBSUB_TOOLKIT_REDIS_URL is set, else firestore."""
    configured = os.environ.get("PUBSUB_TOOLKIT_STORE_BACKEND", "").strip().lower()
    if configured in ("redis", "firestore"):
        return configured
    return "redis" if os.environ.get("PUBSUB_TOOLKIT_REDIS_URL") else "firestore"


def free_port() -> int:
    """A loopback TCP port that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serve(target: str, signature: str, env: dict[str, str], log: Path) -> Iterator[int]:
    """Serve ``target`` of this file with functions-framework on a loopback port; yield the port.

    It runs in its own process group, stopped by that group (SIGTERM, then SIGKILL) on exit.
    """
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "functions_framework",
        f"--source={Path(__file__).resolve()}",
        f"--target={target}",
        f"--signature-type={signature}",
        "--host=127.0.0.1",
        f"--port={port}",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise SetupError(f"functions-framework ({target}) exited: {log.read_text()[-800:]}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline:
                raise SetupError(f"functions-framework ({target}) did not listen within 30s")
            time.sleep(0.1)  # polling readiness against a deadline
        yield port
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            logger.warning("functions-framework (%s) ignored SIGTERM; killing it", target)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def read_records(directory: Path) -> list[dict[str, Any]]:
    """Every line the function instances recorded, in the order they were written."""
    records: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.jsonl")):
        records.extend(json.loads(line) for line in path.read_text().splitlines() if line)
    return sorted(records, key=lambda r: float(r["at"]))  # one timeline across the instances


@dataclass(frozen=True)
class Names:
    """This run's resources; the run id keeps them (and the store's records) apart from
    any other run's."""

    project: str
    run_id: str
    topic_id: str
    topic: str
    dead_letter_topic: str
    push_subscription: str
    group: str  # the order's FIFO group
    welcome: str  # the welcome message's dedup key

    @classmethod
    def for_run(cls, project: str, run_id: str) -> Names:
        """The names for ``run_id`` in ``project``."""
        topic_id = f"consumer-fn-example-{run_id}"
        topic = f"projects/{project}/topics/{topic_id}"
        return cls(
            project=project,
            run_id=run_id,
            topic_id=topic_id,
            topic=topic,
            dead_letter_topic=f"{topic}-dead-letter",
            push_subscription=f"projects/{project}/subscriptions/{topic_id}-push",
            group=f"order-{run_id}",
            welcome=f"welcome-{run_id}",
        )


def function_env(names: Names, store: str, effects_dir: Path) -> dict[str, str]:
    """The functions' environment: the toolkit's settings, as a deployment would set them."""
    env = dict(os.environ)
    env.update(
        GOOGLE_CLOUD_PROJECT=names.project,
        PUBSUB_TOOLKIT_FINAL_TOPIC=names.topic,
        PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC=names.dead_letter_topic,
        PUBSUB_TOOLKIT_STORE_BACKEND=store,
        PUBSUB_TOOLKIT_CONSUMER_ID=f"fulfilment-{names.run_id}",
        # Retry a failed head soon (default 5 s, doubling).
        PUBSUB_TOOLKIT_FIFO_RETRY_BACKOFF_SECONDS="0.2",
        EFFECTS_DIR=str(effects_dir),
    )
    return env


def publish_all(names: Names, settings: Settings, sink: Any) -> list[str]:
    """The welcome twice (a producer's retry) and the order's three steps in its group."""
    from pubsub_toolkit import Publisher
    from pubsub_toolkit.stores.factory import counter_from_settings

    publisher = Publisher(sink, names.topic, counter_from_settings(settings))
    published = []
    for _retry in range(2):  # the producer's retry: same dedup_key, a new message id
        published.append(publisher.publish(b"welcome email", dedup_key=names.welcome).result())
    for n, step in enumerate(("created", "paid", "shipped"), 1):
        extra = {"example_fail_once": "true"} if step == "paid" else {}
        published.append(
            publisher.publish(
                step.encode(), extra, fifo_group=names.group, dedup_key=f"{names.group}-{n}"
            ).result()
        )
    return published


def sweep_until_done(
    sweep_port: int, effects_dir: Path, published: list[str], group: str, timeout: float
) -> tuple[bool, list[tuple[float, str]]]:
    """Call ``sweep`` as Cloud Scheduler would until every message was acked and the group's
    three steps ran, or ``timeout``; (finished, the sweeps that did something)."""
    sweeps: list[tuple[float, str]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        records = read_records(effects_dir)
        acked = {r["delivery"] for r in records if "delivery" in r}
        steps = [r for r in records if "effect" in r and r["fifo_group"] == group]
        if acked >= set(published) and len(steps) >= 3:
            return True, sweeps
        with urllib.request.urlopen(f"http://127.0.0.1:{sweep_port}/", timeout=10) as response:
            swept = json.loads(response.read())
        busy = {g: o for g, o in swept["outcomes"].items() if o != "idle"}
        if busy:
            sweeps.append((time.time(), f"sweep (Cloud Scheduler's call): {busy}"))
        time.sleep(0.5)  # the scheduler's interval (every minute in production)
    return False, sweeps


def run(store: str, timeout: float) -> bool:
    """Serve the functions, push messages to them, sweep; True when the guarantees held."""
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    from pubsub_toolkit import PubSubSink

    project = os.environ.get("GOOGLE_CLOUD_PROJECT", "").strip() or "local-project"
    names = Names.for_run(project, uuid.uuid4().hex[:8])
    work = Path(tempfile.mkdtemp(prefix="consumer-fn-example-"))
    effects_dir = work / "effects"
    effects_dir.mkdir()
    env = function_env(names, store, effects_dir)
    settings = Settings.from_env(env)
    admin = pubsub_v1.PublisherClient()
    subscriber = pubsub_v1.SubscriberClient()
    for name in (names.topic, names.dead_letter_topic):
        admin.create_topic(name=name, timeout=10)
    sink = PubSubSink()
    try:
        with (
            serve("consume", "http", env, work / "consume.log") as consume_port,
            serve("sweep", "http", env, work / "sweep.log") as sweep_port,
        ):
            # functions-framework builds the CloudEvent's source from a /projects/P/topics/T path.
            endpoint = (
                f"http://127.0.0.1:{consume_port}/projects/{names.project}/topics/{names.topic_id}"
            )
            subscriber.create_subscription(
                name=names.push_subscription,
                topic=names.topic,
                push_config=pubsub_v1.types.PushConfig(push_endpoint=endpoint),
                ack_deadline_seconds=10,
                timeout=10,
            )
            print(
                f"serving consume on :{consume_port} and sweep on :{sweep_port}; "
                f"{names.topic} pushes to consume"
            )
            published = publish_all(names, settings, sink)
            print(f"published {len(published)} messages: ids {', '.join(published)}")
            finished, sweeps = sweep_until_done(
                sweep_port, effects_dir, published, names.group, timeout
            )
    finally:
        try:
            subscriber.delete_subscription(subscription=names.push_subscription, timeout=10)
        except gexc.NotFound:
            logger.info("no push subscription to delete (serving the functions failed)")
        subscriber.close()
        sink.close()
        for name in (names.topic, names.dead_letter_topic):
            admin.delete_topic(topic=name, timeout=10)
    ok = report(read_records(effects_dir), sweeps, names, finished=finished, timeout=timeout)
    if ok:
        shutil.rmtree(work)
    else:  # what the functions logged is the first thing to read
        print(f"the functions' logs are kept in {work}")
    return ok


def report(
    records: list[dict[str, Any]],
    sweeps: list[tuple[float, str]],
    names: Names,
    *,
    finished: bool,
    timeout: float,
) -> bool:
    """Print what the functions did; True when each effect ran once, the group in order."""
    timeline = list(sweeps)
    for r in records:
        if "delivery" in r:
            text = f"consume: delivery of message {r['delivery']} -> {r['outcome']}"
        elif "failure" in r:
            text = f"handler: {r['step']} failed (injected); the gate keeps it for a retry"
        else:
            where = f" ({r['fifo_group']}#{r['fifo_seq']})" if r["fifo_group"] else ""
            text = f"handler: effect of {r['step']}{where}"
        timeline.append((float(r["at"]), text))
    for _at, text in sorted(timeline):
        print(text)
    effects = [r for r in records if "effect" in r]
    failures = []
    if not finished:
        failures.append(f"not every message was acked and handled within {timeout:g}s")
    welcomes = sum(1 for r in effects if r["effect"] == names.welcome)
    if welcomes != 1:
        failures.append(f"the welcome must be handled once, was handled {welcomes} times")
    steps = [r["step"] for r in effects if r["fifo_group"] == names.group]
    if steps != ["created", "paid", "shipped"]:
        failures.append(f"the order's steps must run once each in order, ran {steps}")
    if failures:
        print("FAILED: " + "; ".join(failures))
        return False
    print(
        "OK: the producer's retry was handled once, and the order's steps ran once each in "
        "order - the failed one retried by the sweep"
    )
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the example; 0 when the guarantee held, 1 when it did not, 2 for a setup error."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--store",
        choices=("redis", "firestore"),
        default=default_store(),
        help="where dedup records and FIFO state live (default: PUBSUB_TOOLKIT_STORE_BACKEND, "
        "else redis when PUBSUB_TOOLKIT_REDIS_URL is set, else firestore)",
    )
    parser.add_argument(
        "--timeout", type=float, default=90.0, help="give up after this many seconds (default 90)"
    )
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    try:
        if not os.environ.get("PUBSUB_EMULATOR_HOST", "").strip():
            raise SetupError("set PUBSUB_EMULATOR_HOST to a running Pub/Sub emulator")
        if args.store == "redis" and not os.environ.get("PUBSUB_TOOLKIT_REDIS_URL", "").strip():
            raise SetupError(
                "--store redis needs PUBSUB_TOOLKIT_REDIS_URL, e.g. redis://127.0.0.1:6379/0"
            )
        if args.store == "firestore" and not os.environ.get("FIRESTORE_EMULATOR_HOST", ""):
            raise SetupError("--store firestore needs FIRESTORE_EMULATOR_HOST")
        ok = run(args.store, args.timeout)
    except SetupError as exc:
        print(f"consumer_function: {exc}", file=sys.stderr)
        return 2
    print(f"took {time.monotonic() - started:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
