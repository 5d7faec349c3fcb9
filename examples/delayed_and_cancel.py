"""Delayed delivery and cancel, through the pipeline: ingress -> Cloud Tasks -> relay -> final.

What it shows: two messages published to the origin topic with a delay (``Publisher.publish(...,
delay=...)``); ingress turns each into a Cloud Tasks task that the relay releases to the final
topic at its due time. One of them is cancelled before it is due with
:func:`pubsub_toolkit.delay.cancel.cancel`, which answers truthfully:

* the cancelled message never reaches the final topic (``already_delivered=False``);
* the other arrives once, never before its ``deliver_at``;
* cancelling that one after it arrived answers ``already_delivered=True`` (too late).

It prints what happened and exits 0 only if all three held (1 otherwise, 2 for a setup error),
within ``--timeout`` seconds. It listens on a subscription of its own on the final topic,
created for the run and deleted afterwards, so it takes nothing from other consumers.

Run it inside the repository's local stack (Pub/Sub and Firestore emulators, the project's
Cloud Tasks emulator, ingress under functions-framework, the relay under gunicorn)::

    pubsub-toolkit local up                  # from a checkout: make up
    eval "$(pubsub-toolkit local env)"       # GOOGLE_CLOUD_PROJECT, PUBSUB_EMULATOR_HOST,
                                             # PUBSUB_TOOLKIT_TASKS_QUEUE,
                                             # CLOUD_TASKS_EMULATOR_HOST, ...
    python examples/delayed_and_cancel.py --delay 3

It needs the ``tasks`` extra (``pip install 'pubsub-toolkit[tasks]'``). The origin topic is
``ORIGIN_TOPIC`` (default ``origin``, the local stack's); the final topic is
``PUBSUB_TOOLKIT_FINAL_TOPIC``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import uuid
import warnings
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from pubsub_toolkit import Publisher, PubSubSink, Settings
from pubsub_toolkit.attributes import parse_time
from pubsub_toolkit.config import topic_path
from pubsub_toolkit.delay.cancel import cancel
from pubsub_toolkit.delay.scheduler import CloudTasksScheduler, tasks_client
from pubsub_toolkit.errors import ToolkitError
from pubsub_toolkit.stores.factory import dedup_store_from_settings

logger = logging.getLogger("delayed_and_cancel")
QUIET_AFTER_ARRIVAL = 3.0  # seconds to keep listening after the kept message, for the other


class SetupError(Exception):
    """The environment cannot run the example; the message says what to set."""


@dataclass(frozen=True)
class Arrival:
    """A message seen on the final topic."""

    dedup_key: str
    deliver_at: datetime
    publish_time: datetime


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line: ``--delay`` and ``--timeout``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--delay", type=float, default=3.0, help="seconds until both messages are due (default 3)"
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="give up after this many seconds (default 60)"
    )
    args = parser.parse_args(argv)
    if not 1 <= args.delay <= 60:
        parser.error(f"--delay must be between 1 and 60 seconds, got {args.delay:g}")
    return args


def load_settings() -> Settings:
    """The pipeline's settings from the environment (what `local env` exports)."""
    if not os.environ.get("PUBSUB_EMULATOR_HOST", "").strip():
        # It creates and deletes a subscription: keep it off a real project.
        raise SetupError(
            "set PUBSUB_EMULATOR_HOST and the rest of the local stack's environment: "
            'pubsub-toolkit local up, then eval "$(pubsub-toolkit local env)"'
        )
    settings = Settings.from_env()
    if settings.delay is None:
        raise SetupError(
            "PUBSUB_TOOLKIT_TASKS_QUEUE is not set (delayed delivery is off): "
            'eval "$(pubsub-toolkit local env)" sets it for the local stack'
        )
    return settings


def pull(subscriber: Any, subscription: str) -> list[Any]:
    """One unary pull, acking what came (unary: no stream for the emulator to get stuck on)."""
    with warnings.catch_warnings():
        # The emulator answers an empty pull at once only with return_immediately.
        warnings.simplefilter("ignore", DeprecationWarning)
        response = subscriber.pull(
            subscription=subscription, max_messages=100, return_immediately=True, timeout=10
        )
    received = list(response.received_messages)
    if received:
        subscriber.acknowledge(
            subscription=subscription, ack_ids=[r.ack_id for r in received], timeout=10
        )
    return [r.message for r in received]


def wait_for_task(scheduler: CloudTasksScheduler, client: Any, key: str, deadline: float) -> str:
    """Wait until ingress has scheduled ``key``'s task; its name (empty if it never appeared)."""
    name = scheduler.task_name(key)
    while time.monotonic() < deadline:
        try:
            client.get_task(name=name, timeout=10)
        except gexc.NotFound:
            time.sleep(0.1)  # polling a condition with a deadline: ingress has not got to it
            continue
        return name
    return ""


def watch_final(subscriber: Any, subscription: str, keep: str, deadline: float) -> list[Arrival]:
    """Everything that reaches ``subscription`` until ``keep`` has arrived and then
    QUIET_AFTER_ARRIVAL seconds pass (time for the cancelled one to show up if it were
    released: it was due no later than ``keep``), or until ``deadline``."""
    arrivals: list[Arrival] = []
    kept_at: float | None = None
    while time.monotonic() < deadline:
        if kept_at is not None and time.monotonic() - kept_at >= QUIET_AFTER_ARRIVAL:
            break
        messages = pull(subscriber, subscription)
        for m in messages:
            arrival = Arrival(
                m.attributes.get("dedup_key", ""),
                parse_time(m.attributes["deliver_at"]),
                m.publish_time,
            )
            arrivals.append(arrival)
            late_ms = (arrival.publish_time - arrival.deliver_at).total_seconds() * 1000
            print(
                f"arrived on the final topic: {arrival.dedup_key} "
                f"({late_ms:+.0f} ms after its deliver_at)"
            )
            if arrival.dedup_key == keep and kept_at is None:
                kept_at = time.monotonic()
        if not messages:
            time.sleep(0.1)  # an empty pull answers at once: don't spin
    return arrivals


def run(settings: Settings, delay: float, timeout: float) -> bool:
    """Publish two delayed messages, cancel one, watch the final topic; True when it held."""
    assert settings.delay is not None  # load_settings checked it
    deadline = time.monotonic() + timeout
    run_id = uuid.uuid4().hex[:8]
    origin = topic_path(settings.project, os.environ.get("ORIGIN_TOPIC", "").strip() or "origin")
    listen = f"projects/{settings.project}/subscriptions/delay-example-{run_id}"
    keep, drop = f"reminder-{run_id}-keep", f"reminder-{run_id}-cancel"

    subscriber = pubsub_v1.SubscriberClient()
    subscriber.create_subscription(
        name=listen, topic=settings.final_topic, ack_deadline_seconds=30, timeout=10
    )
    sink = PubSubSink()
    store = dedup_store_from_settings(settings)  # the store ingress and the relay use
    scheduler = CloudTasksScheduler.from_settings(settings.delay)
    try:
        publisher = Publisher(sink, origin)
        for key in (drop, keep):  # the one to cancel first: it is due no later than the other
            message_id = publisher.publish(
                f"remind me ({key})".encode(), dedup_key=key, delay=timedelta(seconds=delay)
            ).result()
            print(f"published {key} (message {message_id}) to {origin}, due in {delay:g}s")
        client = tasks_client(settings.delay.tasks_emulator_host)
        task = wait_for_task(scheduler, client, drop, deadline)
        print(
            f"ingress scheduled {drop} as task {task.rsplit('/', 1)[-1][:12]}..."
            if task
            else f"{drop}: no task seen before the deadline"
        )
        cancelled = cancel(drop, store=store, scheduler=scheduler)
        print(
            f"cancel({drop}): cancelled={cancelled.cancelled} "
            f"already_delivered={cancelled.already_delivered} task_deleted={cancelled.task_deleted}"
        )
        arrivals = watch_final(subscriber, listen, keep, deadline)
        kept = [a for a in arrivals if a.dedup_key == keep]
        too_late = cancel(keep, store=store, scheduler=scheduler) if kept else None
        if too_late is not None:
            print(
                f"cancel({keep}) after it arrived: already_delivered={too_late.already_delivered}"
            )
    finally:
        subscriber.delete_subscription(subscription=listen, timeout=10)
        subscriber.close()
        sink.close()

    failures = []
    if len(kept) != 1:
        failures.append(f"{keep} must arrive exactly once, arrived {len(kept)} times")
    elif kept[0].publish_time < kept[0].deliver_at:
        failures.append(f"{keep} arrived before its deliver_at")
    if any(a.dedup_key == drop for a in arrivals):
        failures.append(f"{drop} was cancelled but reached the final topic")
    if not cancelled.cancelled:
        failures.append(f"cancel({drop}) before its due time answered already_delivered")
    if too_late is None or not too_late.already_delivered:
        failures.append(f"cancel({keep}) after its arrival must answer already_delivered=True")
    if failures:
        print("FAILED: " + "; ".join(failures))
        return False
    print(
        "OK: the cancelled message never arrived, the other arrived once and on time, and a "
        "late cancel said it was too late"
    )
    return True


def main(argv: list[str] | None = None) -> int:
    """Run the example; 0 when the guarantee held, 1 when it did not, 2 for a setup error."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    try:
        settings = load_settings()
    except (SetupError, ToolkitError) as exc:  # ToolkitError: a setting the library refuses
        print(f"delayed_and_cancel: {exc}", file=sys.stderr)
        return 2
    ok = run(settings, args.delay, args.timeout)
    print(f"took {time.monotonic() - started:.1f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
