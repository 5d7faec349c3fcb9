"""A consumer process for crash tests: run as ``python -m tests.support.worker MODE ...``.

Modes:

* ``pull-once SUBSCRIPTION BACKEND TARGET EFFECTS_FILE --crash-after-commit``: pull one message,
  process it idempotently (the effect appends a line to EFFECTS_FILE), then either ack it or,
  with ``--crash-after-commit``, die before the ack - the "ack lost" failure.
* ``inbox PROJECT KEY --crash-before-commit``: process KEY with the Firestore transactional inbox;
  the handler writes an effect document; with the flag the process dies after the handler's
  writes and before the commit.

Exits 17 when it crashed on purpose, 0 otherwise; prints the outcome on stdout.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta

CRASH_EXIT = 17


def _store(backend: str, target: str):  # type: ignore[no-untyped-def]
    if backend == "redis":
        from pubsub_toolkit.stores.dedup.redis import RedisDedupStore

        url, prefix = target.split("|")
        return RedisDedupStore.from_url(url, prefix=prefix)
    from google.cloud import firestore

    from pubsub_toolkit.stores.dedup.firestore import FirestoreDedupStore

    return FirestoreDedupStore(firestore.Client(project=target))


def pull_once(args: argparse.Namespace) -> int:
    from google.cloud import pubsub_v1

    from pubsub_toolkit.dedup.idempotent import IdempotentProcessor

    subscriber = pubsub_v1.SubscriberClient()
    response = subscriber.pull(subscription=args.subscription, max_messages=1, timeout=30)
    if not response.received_messages:
        print("no-message")
        return 3
    received = response.received_messages[0]
    key = received.message.attributes["dedup_key"]
    processor = IdempotentProcessor(
        _store(args.backend, args.target),
        namespace="crash-consumer",
        lease=timedelta(seconds=60),
        ttl=timedelta(hours=1),
    )

    def effect() -> str:
        with open(args.effects_file, "a") as out:
            out.write(f"{key}\n")
        return "written"

    result = processor.process(key, "fp", effect)
    print(result.outcome.value, flush=True)
    if args.crash_after_commit:
        os._exit(CRASH_EXIT)  # the effect and the marker are committed; the ack never happens
    subscriber.acknowledge(subscription=args.subscription, ack_ids=[received.ack_id], timeout=10)
    return 0


def inbox(args: argparse.Namespace) -> int:
    from google.cloud import firestore

    from pubsub_toolkit.dedup.inbox import TransactionalInbox

    client = firestore.Client(project=args.project)
    box = TransactionalInbox(client, namespace="inbox-consumer", ttl=timedelta(hours=1))

    def handler(transaction: firestore.Transaction) -> str:
        # One effect document per process: were the effect ever committed twice, the test
        # would count two documents.
        effect = client.collection("effects").document(f"{args.key}-{os.getpid()}")
        transaction.set(effect, {"key": args.key, "applied": True})
        if args.crash_before_commit:
            os._exit(CRASH_EXIT)  # the handler's write is buffered; the commit never happens
        return "applied"

    print(box.process(args.key, "fp", handler).outcome.value, flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("pull-once")
    p.add_argument("subscription")
    p.add_argument("backend", choices=["redis", "firestore"])
    p.add_argument("target")
    p.add_argument("effects_file")
    p.add_argument("--crash-after-commit", action="store_true")
    i = sub.add_parser("inbox")
    i.add_argument("project")
    i.add_argument("key")
    i.add_argument("--crash-before-commit", action="store_true")
    args = parser.parse_args()
    return pull_once(args) if args.mode == "pull-once" else inbox(args)


if __name__ == "__main__":
    sys.exit(main())
