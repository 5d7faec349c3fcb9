"""What the local stack holds right now, so stopping or restarting a part can say what it loses.

Counts are taken just before the part stops: undelivered messages on the pipeline's pull
subscriptions (pulled and held, never acked - the emulator is about to go), tasks waiting in the
delay queue, Firestore documents (dedup records, FIFO state and counters) and Redis keys. Each
count is best effort and bounded in time: a part that does not answer is reported as unknown
rather than holding up ``down``.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Mapping

logger = logging.getLogger(__name__)

COUNT_SECONDS = 5.0  # per subscription: enough for thousands of messages on the emulator
SUBSCRIPTIONS = ("final-sub", "dead-letter-sub")


def undelivered_messages(project: str) -> dict[str, int | None]:
    """Messages waiting on each pull subscription of the pipeline (None: could not count)."""
    from pubsub_toolkit_cli.emulator import subscriber_client

    counts: dict[str, int | None] = {}
    subscriber = subscriber_client()
    try:
        for name in SUBSCRIPTIONS:
            try:
                counts[name] = _count(subscriber, f"projects/{project}/subscriptions/{name}")
            except Exception as exc:  # reported as unknown; the caller goes on stopping
                logger.info("cannot count messages on %s: %s", name, exc)
                counts[name] = None
    finally:
        subscriber.close()
    return counts


def _count(subscriber: object, subscription: str) -> int:
    seen: set[str] = set()
    deadline = time.monotonic() + COUNT_SECONDS
    empty = 0
    while empty < 2 and time.monotonic() < deadline:
        response = subscriber.pull(  # type: ignore[attr-defined]
            subscription=subscription,
            max_messages=1000,
            return_immediately=True,
            timeout=10,
            retry=None,
        )
        if not response.received_messages:
            empty += 1
            continue
        empty = 0
        seen.update(item.message.message_id for item in response.received_messages)
    return len(seen)


def scheduled_tasks(env: Mapping[str, str]) -> int | None:
    """Tasks waiting in the delay queue (None: could not count)."""
    from pubsub_toolkit.delay.scheduler import tasks_client

    try:
        client = tasks_client(env["CLOUD_TASKS_EMULATOR_HOST"])
        return sum(
            1 for _ in client.list_tasks(parent=env["PUBSUB_TOOLKIT_TASKS_QUEUE"], timeout=10)
        )
    except Exception as exc:  # reported as unknown
        logger.info("cannot count scheduled tasks: %s", exc)
        return None


def firestore_documents(project: str) -> int | None:
    """Documents in the project's root collections (None: could not count)."""
    from google.cloud import firestore

    try:
        client = firestore.Client(project=project)
        total = 0
        for collection in client.collections(timeout=10, retry=None):
            result = collection.count().get(timeout=10, retry=None)
            total += int(result[0][0].value)
        return total
    except Exception as exc:  # reported as unknown
        logger.info("cannot count Firestore documents: %s", exc)
        return None


def redis_keys(port: int) -> int | None:
    """Keys in the local redis-server's database 0 (None: could not count)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(b"DBSIZE\r\n")
            reply = sock.recv(64)
    except OSError as exc:
        logger.info("cannot count Redis keys: %s", exc)
        return None
    if not reply.startswith(b":"):
        return None
    return int(reply[1:].split(b"\r\n", 1)[0])


def amount(count: int | None, what: str) -> str:
    """``3 undelivered messages`` / ``an unknown number of ...``."""
    return f"an unknown number of {what}" if count is None else f"{count} {what}"
