"""`make run`: a narrated demo of the pipeline on the local stack.

It starts everything (:class:`~pubsub_toolkit.local.stack.LocalStack`), then publishes the way
real producers do: each order twice (a retry after a timeout), one key reused for different
content, two messages that break the contract, and two delayed messages. It shows what reaches
the final and dead-letter topics, when, and stops everything it started.
"""

from __future__ import annotations

import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.local.stack import LocalStack, StackOptions
from pubsub_toolkit.local.topology import drain

ORDERS = 10
DELAYS = (3, 5)


def _say(text: str) -> None:
    print(f"==> {text}", flush=True)


def _table(rows: list[tuple[str, object]]) -> None:
    width = max(len(label) for label, _ in rows)
    print(f"\n{'what':<{width}}  result\n{'-' * width}  ------")
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    print()


def run_demo(repo: Path) -> int:
    """Run the demo end to end; returns a process exit code (0 when every check holds)."""
    from google.cloud import pubsub_v1  # type: ignore[attr-defined]

    work = Path(tempfile.mkdtemp(prefix="pubsub-toolkit-demo-"))
    _say("starting the local stack: Pub/Sub + Firestore emulators, Cloud Tasks emulator,")
    _say("  ingress (functions-framework), relay (gunicorn)")
    with LocalStack(StackOptions(project="demo-project"), work, repo) as stack:
        topo = stack.topology
        assert topo is not None
        _say(f"ready: {topo.origin} -> ingress -> {topo.final}")
        publisher = pubsub_v1.PublisherClient()
        started = datetime.now(UTC)
        for n in range(1, ORDERS + 1):
            for _attempt in range(2):  # a producer that retries after a timeout sends twice
                publisher.publish(topo.origin, f"order {n}".encode(), dedup_key=f"order-{n}")
        for delay in DELAYS:
            publisher.publish(
                topo.origin, b"reminder", dedup_key=f"reminder-{delay}s", delay_seconds=str(delay)
            )
        publisher.publish(topo.origin, b"bad", fifo_seq="1")
        publisher.publish(topo.origin, b"bad", delay_seconds="-3").result(timeout=10)
        time.sleep(0.5)  # demo pacing only: let the first copy of order-1 land before the change
        publisher.publish(topo.origin, b"order 1, changed", dedup_key="order-1").result(timeout=10)
        _say(
            f"published {2 * ORDERS} order copies, {len(DELAYS)} delayed reminders "
            f"({', '.join(f'{d}s' for d in DELAYS)}), 2 invalid messages, 1 reused key"
        )
        _say("waiting for the final topic (the reminders arrive when they are due)...")
        final = drain(topo.final_sub, expected=ORDERS + len(DELAYS), timeout=60, quiet=2)
        dead = drain(topo.dead_letter_sub, expected=3, timeout=20, quiet=1)

    orders = Counter(m.attributes["dedup_key"] for m in final if m.data.startswith(b"order"))
    reminders = [m for m in final if m.data == b"reminder"]
    reasons = Counter(m.attributes["error_reason"] for m in dead)
    rows: list[tuple[str, object]] = [
        ("orders published (each twice)", 2 * ORDERS),
        ("orders delivered to final", sum(orders.values())),
        ("distinct orders on final", len(orders)),
    ]
    on_time = True
    for m in sorted(reminders, key=lambda m: m.attributes["dedup_key"]):
        due = attr.parse_time(m.attributes["deliver_at"])
        assert m.publish_time is not None
        late_ms = (m.publish_time - due).total_seconds() * 1000
        on_time &= late_ms >= 0
        rows.append(
            (
                f"{m.attributes['dedup_key']} released",
                f"{(m.publish_time - started).total_seconds():.2f}s after start, "
                f"{late_ms:.0f} ms after its due time",
            )
        )
    rows += [(f"dead-lettered: {reason}", count) for reason, count in sorted(reasons.items())]
    _table(rows)
    ok = (
        sum(orders.values()) == ORDERS
        and len(orders) == ORDERS
        and len(reminders) == len(DELAYS)
        and on_time
        and reasons
        == Counter(
            {"fingerprint_mismatch": 1, "fifo_seq_without_group": 1, "invalid_delay_seconds": 1}
        )
    )
    _say("every order exactly once; reminders on time, never early" if ok else "UNEXPECTED RESULT")
    _say(f"stopped everything (logs in {work})")
    return 0 if ok else 1
