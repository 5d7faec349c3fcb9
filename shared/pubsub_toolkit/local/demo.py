"""`make run`: a narrated demo of the pipeline on the official emulators.

It starts the Pub/Sub and Firestore emulators and the ingress function (functions-framework,
fed by a push subscription as Eventarc would), publishes orders the way a flaky producer does -
each one twice, one reusing a key for different content, two breaking the contract - and shows
what reaches the final and dead-letter topics. Everything it starts, it stops.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from pathlib import Path

from pubsub_toolkit.local import emulators
from pubsub_toolkit.local.processes import ServiceGroup, free_port
from pubsub_toolkit.local.servers import cloud_function
from pubsub_toolkit.local.topology import create_topology, drain

PROJECT = "demo-project"
ORDERS = 10


def _say(text: str) -> None:
    print(f"==> {text}", flush=True)


def run_demo(repo: Path) -> int:
    """Run the dedup demo end to end; returns a process exit code (0 when all checks hold)."""
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    work = Path(tempfile.mkdtemp(prefix="pubsub-toolkit-demo-"))
    with ServiceGroup(work) as group:
        _say("starting the Pub/Sub and Firestore emulators")
        pubsub_port, firestore_port, ingress_port = free_port(), free_port(), free_port()
        group.start(emulators.pubsub_emulator(pubsub_port, work))
        group.start(emulators.firestore_emulator(firestore_port, work))
        os.environ["PUBSUB_EMULATOR_HOST"] = f"127.0.0.1:{pubsub_port}"
        os.environ["FIRESTORE_EMULATOR_HOST"] = f"127.0.0.1:{firestore_port}"
        _say("starting functions/ingress under functions-framework")
        group.start(
            cloud_function(
                "ingress",
                source=repo / "functions/ingress/main.py",
                target="ingress",
                port=ingress_port,
                env={
                    "GOOGLE_CLOUD_PROJECT": PROJECT,
                    "FINAL_TOPIC": "final",
                    "DEAD_LETTER_TOPIC": "dead-letter",
                    "DEDUP_BACKEND": "firestore",
                },
            )
        )
        topo = create_topology(PROJECT, ingress_url=f"http://127.0.0.1:{ingress_port}")
        _say(f"topology ready: {topo.origin} -> ingress -> {topo.final}")

        publisher = pubsub_v1.PublisherClient()
        sent: Counter[str] = Counter()
        for n in range(1, ORDERS + 1):
            for _attempt in range(2):  # a producer that retries after a timeout sends twice
                publisher.publish(topo.origin, f"order {n}".encode(), dedup_key=f"order-{n}")
                sent["orders (each sent twice)"] += 1
        publisher.publish(topo.origin, b"order 1 but changed", dedup_key="order-1")
        sent["same key, different content"] += 1
        publisher.publish(topo.origin, b"bad", fifo_seq="1").result(timeout=10)
        publisher.publish(topo.origin, b"bad", delay_seconds="-3").result(timeout=10)
        sent["contract violations"] += 2
        _say(f"published {sum(sent.values())} messages to origin: {dict(sent)}")

        final = drain(topo.final_sub, expected=ORDERS, timeout=60, quiet=2)
        dead = drain(topo.dead_letter_sub, expected=3, timeout=30, quiet=1)
        keys = Counter(m.attributes["dedup_key"] for m in final)
        reasons = Counter(m.attributes["error_reason"] for m in dead)

        rows = [
            ("published to origin", sum(sent.values())),
            ("delivered to final", len(final)),
            ("distinct keys on final", len(keys)),
            ("duplicates filtered", sent["orders (each sent twice)"] - len(final)),
            *((f"dead-lettered: {reason}", count) for reason, count in sorted(reasons.items())),
        ]
        width = max(len(label) for label, _ in rows)
        print()
        print(f"{'what':<{width}}  count")
        print(f"{'-' * width}  -----")
        for label, count in rows:
            print(f"{label:<{width}}  {count:>5}")
        print()
        ok = (
            len(final) == ORDERS
            and len(keys) == ORDERS
            and reasons
            == Counter(
                {"fingerprint_mismatch": 1, "fifo_seq_without_group": 1, "invalid_delay_seconds": 1}
            )
        )
        _say("every order delivered exactly once" if ok else "UNEXPECTED RESULT (see above)")
        _say(f"stopping everything (logs in {work})")
    return 0 if ok else 1
