"""The ledger of a mixed-workload run: every published copy accounted for exactly once.

It accounts for every *published copy* by its Pub/Sub message id (from the publish
future): ingress stamps it as ``origin_message_id`` on what it forwards, and the dead-letter
copy carries it too. Each copy is therefore exactly one of: *delivered* (the handler succeeded
on it), *dead-lettered* (with a reason), or *deduplicated* (never forwarded). The checks:
every delivered or dead-lettered id was published, none twice, each key has exactly the fate its
kind expects (one delivery for a valid key, never two), every deduplicated copy is matched by a
``duplicate`` decision ingress logged for that very copy (its message id: a redelivery of another
copy cannot stand in for it), no delayed message arrived early, and each FIFO
group was handled in exactly its numbered order (poison skipped). ``in = delivered +
deduplicated + dead-lettered`` then holds by construction of disjoint, verified sets.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from bench.mix import POISON_ATTRIBUTE, Kind, Publish
from pubsub_toolkit import attributes as attr
from pubsub_toolkit.core.fifo_policy import REASON_POISON
from pubsub_toolkit.message import Message


class Observer:
    """Everything the run sees, from public surfaces only; thread-safe."""

    def __init__(self, ingress_log: Path) -> None:
        self.lock = threading.Lock()
        # origin message id -> (arrival, message) for each successful handler call
        self.delivered: list[tuple[str, float, Message]] = []
        self.dead_letters: list[tuple[str, str]] = []  # (origin message id, reason)
        self.consumer_outcomes: Counter[str] = Counter()
        self.ingress: Counter[tuple[str, str]] = Counter()  # (outcome, key)
        # Origin message ids ingress finished (processed/duplicate/mismatch; rejected), and
        # those it found duplicate: by id, so a redelivery of one copy never stands for another.
        self.ingress_decided: set[str] = set()
        self.ingress_duplicate_ids: set[str] = set()
        # Copies whose claim took over an expired lease: both holders may have forwarded, and the
        # consumer then deduplicates one of the two final copies.
        self.ingress_taken_over_ids: set[str] = set()
        self.last_event = time.monotonic()
        self._log = ingress_log
        self._offset = 0
        self._partial = b""

    def handler(self, message: Message) -> None:
        """The consumer's handler: fails on poison, records everything else."""
        if message.attributes.get(POISON_ATTRIBUTE):
            raise RuntimeError("poison by design")
        origin_id = message.attributes.get(attr.ORIGIN_MESSAGE_ID, "")
        with self.lock:
            self.delivered.append((origin_id, time.time(), message))
            self.last_event = time.monotonic()

    def on_outcome(self, message: Message, outcome: str) -> None:
        with self.lock:
            self.consumer_outcomes[outcome] += 1

    def on_dead_letter(self, received: pubsub_v1.subscriber.message.Message) -> None:
        a = received.attributes
        with self.lock:
            self.dead_letters.append((a.get(attr.ORIGIN_MESSAGE_ID, ""), a.get(attr.ERROR_REASON)))
            self.last_event = time.monotonic()
        received.ack()

    def read_ingress_log(self) -> None:
        """Count ingress's decisions from the lines its log gained since the last call."""
        with self._log.open("rb") as log:
            log.seek(self._offset)
            chunk = log.read()
        self._offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()  # an incomplete last line waits for the next read
        for line in lines:
            if not line.startswith(b"{"):
                continue  # functions-framework's own lines
            entry = json.loads(line)
            outcome, consumer = entry.get("outcome"), entry.get("consumer")
            message_id = entry.get("message_id") or ""
            if consumer == "ingress" and outcome in ("processed", "duplicate", "mismatch"):
                self.ingress[(outcome, entry.get("dedup_key") or "")] += 1
                self.ingress_decided.add(message_id)
                if outcome == "duplicate":
                    self.ingress_duplicate_ids.add(message_id)
            elif consumer == "ingress" and outcome == "taken_over":
                self.ingress_taken_over_ids.add(message_id)
            elif consumer == "ingress-rejected" and outcome in ("processed", "duplicate"):
                self.ingress_decided.add(message_id)

    @property
    def ingress_terminal(self) -> int:
        """How many distinct published copies ingress has finished with."""
        return len(self.ingress_decided)


@dataclass
class Ledger:
    """The accounting of one run; ``problems`` is empty when it balances."""

    published: int = 0
    delivered: int = 0
    deduplicated: int = 0
    dead_lettered: int = 0
    dead_letter_reasons: dict[str, int] = field(default_factory=dict)
    duplicate_decisions: int = 0  # ingress "duplicate" decisions (>= deduplicated copies)
    consumer_outcomes: dict[str, int] = field(default_factory=dict)
    lateness_ms: list[float] = field(default_factory=list)  # handler start - due time
    # Final topic's publish time - due time: the pipeline's own lateness, without the time the
    # message then waits in the consumer (which shares the process with the publisher).
    release_lateness_ms: list[float] = field(default_factory=list)
    fifo_groups_in_order: int = 0
    fifo_groups: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def balanced(self) -> bool:
        total = self.delivered + self.deduplicated + self.dead_lettered
        return not self.problems and self.published == total


def expected_fates(kind: Kind) -> int:
    """How many copies of a key end delivered or dead-lettered (the rest are duplicates)."""
    return 2 if kind is Kind.MISMATCH else 1


def check_ledger(sent: dict[str, Publish], seen: Observer) -> Ledger:
    """Account for every published copy (``sent``: message id -> publish); see the module doc."""
    with seen.lock:
        delivered = list(seen.delivered)
        dead_letters = list(seen.dead_letters)
        outcomes = dict(seen.consumer_outcomes)
    ledger = Ledger(published=len(sent), consumer_outcomes=outcomes)
    problems = ledger.problems
    delivered_ids = Counter(i for i, _, _ in delivered)
    dead_ids = Counter(i for i, _ in dead_letters)
    reasons = {i: reason for i, reason in dead_letters}
    for name, ids in (("delivered", delivered_ids), ("dead-lettered", dead_ids)):
        unknown = sorted(i for i in ids if i not in sent)
        if unknown:
            problems.append(f"{len(unknown)} {name} copies were never published: {unknown[:5]}")
        twice = sorted(i for i, n in ids.items() if n > 1)
        if twice:
            problems.append(f"{len(twice)} copies {name} more than once: {twice[:5]}")
    both = sorted(set(delivered_ids) & set(dead_ids))
    if both:
        problems.append(f"{len(both)} copies both delivered and dead-lettered: {both[:5]}")

    copies: dict[str, list[str]] = defaultdict(list)
    for message_id, p in sent.items():
        copies[p.key].append(message_id)
    wrong: list[str] = []
    uncorroborated: list[str] = []
    for key, ids in copies.items():
        p = sent[ids[0]]
        d = [i for i in ids if i in delivered_ids]
        x = [i for i in ids if i in dead_ids]
        got = sorted(reasons[i] or "?" for i in x)
        want_reasons = {
            Kind.POISON: [REASON_POISON],
            Kind.INVALID: [p.reason or "?"] * len(ids),
            Kind.MISMATCH: [attr.REASON_FINGERPRINT_MISMATCH],
        }.get(p.kind, [])
        want_delivered = 1 if p.kind in (Kind.PLAIN, Kind.DELAYED, Kind.FIFO, Kind.MISMATCH) else 0
        if len(d) != want_delivered or got != want_reasons:
            wrong.append(f"{key} ({p.kind}): delivered {len(d)}, dead-lettered {got}")
        duplicates = len(ids) - len(d) - len(x)
        ledger.delivered += len(d)
        ledger.dead_lettered += len(x)
        ledger.deduplicated += duplicates
        deduplicated_ids = set(ids) - set(d) - set(x)
        if not deduplicated_ids <= seen.ingress_duplicate_ids | seen.ingress_taken_over_ids:
            uncorroborated.append(key)
    if wrong:
        problems.append(f"{len(wrong)} keys with the wrong fate: {wrong[:5]}")
    if uncorroborated:
        problems.append(
            f"{len(uncorroborated)} keys have copies neither delivered, dead-lettered nor seen "
            f"as duplicates by ingress (lost): {uncorroborated[:5]}"
        )
    ledger.dead_letter_reasons = dict(Counter(r or "?" for _, r in dead_letters))
    ledger.duplicate_decisions = sum(n for (o, _), n in seen.ingress.items() if o == "duplicate")

    early: list[str] = []
    order: dict[str, list[int]] = defaultdict(list)
    for message_id, arrived, message in delivered:
        p = sent.get(message_id)
        if p is None:
            continue
        if p.kind is Kind.DELAYED:
            due = attr.parse_time(message.attributes[attr.DELIVER_AT])
            ledger.lateness_ms.append((arrived - due.timestamp()) * 1000)
            if message.publish_time:
                released = (message.publish_time - due).total_seconds() * 1000
                ledger.release_lateness_ms.append(released)
            if arrived < due.timestamp() or (message.publish_time and message.publish_time < due):
                early.append(p.key)
        if p.kind is Kind.FIFO:
            order[p.attributes[attr.FIFO_GROUP]].append(int(p.attributes[attr.FIFO_SEQ]))
    if early:
        problems.append(f"{len(early)} delayed messages arrived early: {early[:5]}")
    expected: dict[str, set[int]] = defaultdict(set)
    for p in sent.values():
        if p.kind is Kind.FIFO:
            expected[p.attributes[attr.FIFO_GROUP]].add(int(p.attributes[attr.FIFO_SEQ]))
    ledger.fifo_groups = len(expected)
    for group, seqs in sorted(expected.items()):
        if order.get(group) == sorted(seqs):
            ledger.fifo_groups_in_order += 1
        else:
            handled = order.get(group, [])
            problems.append(f"{group} out of order or incomplete: {handled[:20]}...")
    return ledger
