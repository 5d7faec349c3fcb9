"""The soak/e2e ledger catches a lost copy even when another copy's redelivery looks like it."""

from __future__ import annotations

import json
from pathlib import Path

from bench.ledger import Observer, check_ledger
from bench.mix import Kind, Publish
from pubsub_toolkit import attributes as attr
from pubsub_toolkit.message import Message


def ledger_for(tmp_path: Path, log_lines: list[dict[str, str]]) -> list[str]:
    """Two copies (ids A and B) of one key; A is handled; ingress logged ``log_lines``."""
    log = tmp_path / "ingress.log"
    log.write_text("".join(json.dumps(line) + "\n" for line in log_lines))
    copy = Publish(Kind.PLAIN, "plain-0", b"plain-0", {})
    seen = Observer(log)
    seen.handler(Message(b"plain-0", {attr.ORIGIN_MESSAGE_ID: "A", attr.DEDUP_KEY: "plain-0"}))
    seen.read_ingress_log()
    ledger = check_ledger({"A": copy, "B": copy}, seen)
    assert ledger.balanced == (not ledger.problems)
    return ledger.problems


def decision(outcome: str, message_id: str) -> dict[str, str]:
    return {
        "consumer": "ingress",
        "outcome": outcome,
        "dedup_key": "plain-0",
        "message_id": message_id,
    }


def test_copy_b_deduplicated_by_ingress_balances(tmp_path: Path) -> None:
    assert ledger_for(tmp_path, [decision("processed", "A"), decision("duplicate", "B")]) == []


def test_a_redelivery_of_copy_a_does_not_stand_in_for_a_lost_copy_b(tmp_path: Path) -> None:
    # B never reached ingress; Pub/Sub redelivered A once (its first push timed out).
    problems = ledger_for(tmp_path, [decision("processed", "A"), decision("duplicate", "A")])
    assert problems and "lost" in problems[0]


def test_a_copy_forwarded_after_a_lease_takeover_and_deduplicated_by_the_consumer_balances(
    tmp_path: Path,
) -> None:
    # A's lease expired mid-publish; B took over and forwarded too; the consumer handled A's
    # final copy and deduplicated B's. Ingress never logged B as a duplicate.
    takeover = decision("taken_over", "B")
    lines = [takeover, decision("processed", "B"), decision("duplicate", "A")]
    assert ledger_for(tmp_path, lines) == []
