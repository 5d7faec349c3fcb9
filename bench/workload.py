"""The mixed workload and its ledger, shared by the e2e test and the soak.

``tests/e2e/test_mixed_workload.py`` runs it small (2,000 publishes) on every ``make test``;
``bench/soak.py`` runs it at 50,000 and more. Both publish to the origin topic with the official
client and watch only public surfaces: a :class:`~pubsub_toolkit.consumer.Consumer` on the final
topic, a pull on the dead-letter topic, and ingress's structured decision log.

The mix, in waves (each wave shuffled, FIFO numbers reserved from the sequencer per wave so a
group arrives out of order within a wave but waves follow each other):

* plain messages, messages delayed by ``delay_range`` seconds, FIFO messages in ``groups``;
* re-published duplicates of those (same data and attributes, a new Pub/Sub message id);
* ``invalid`` contract violations (dead-lettered by ingress with a reason);
* ``mismatched`` keys published twice with different content (one delivered, one dead-lettered
  as ``fingerprint_mismatch``);
* ``poison`` FIFO messages whose handler always fails (dead-lettered as ``fifo_poison`` by the
  consumer's gate; the group skips them and goes on).

**The ledger** accounts for every *published copy* by its Pub/Sub message id (from the publish
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

import enum
import json
import math
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.config import ConsumerSettings, Settings
from pubsub_toolkit.consumer import Consumer
from pubsub_toolkit.fifo.counter import SequenceCounter
from pubsub_toolkit.fifo.gate import REASON_POISON
from pubsub_toolkit.local.topology import Topology
from pubsub_toolkit.message import Message
from pubsub_toolkit.processing import MessageProcessor

POISON_ATTRIBUTE = "workload_poison"  # a business attribute: the handler fails on it, by design
# Contract violations ingress must dead-letter, with the reason it must give.
INVALID_KINDS: tuple[tuple[dict[str, str], str], ...] = (
    ({"delay_seconds": "-5"}, attr.REASON_INVALID_DELAY),
    ({"fifo_seq": "3"}, attr.REASON_SEQ_WITHOUT_GROUP),
    ({"deliver_at": "not-a-time"}, attr.REASON_INVALID_DELIVER_AT),
    ({"fifo_group": "g", "fifo_seq": "zero"}, attr.REASON_INVALID_FIFO_SEQ),
)


class Kind(enum.StrEnum):
    PLAIN = "plain"
    DELAYED = "delayed"
    FIFO = "fifo"
    POISON = "poison"
    INVALID = "invalid"
    MISMATCH = "mismatch"


@dataclass(frozen=True)
class Mix:
    """How many of what. ``total`` counts publishes (copies), duplicates and bad ones included."""

    total: int = 2000
    duplicate_share: float = 0.2
    delayed_share: float = 0.2
    fifo_share: float = 0.3
    groups: int = 10
    delay_range: tuple[float, float] = (1.0, 5.0)
    invalid: int = 0
    mismatched: int = 0
    poison: int = 0
    wave: int = 0  # publishes per wave; 0 = one wave
    seed: int = 2030

    @property
    def duplicates(self) -> int:
        return round(self.total * self.duplicate_share)

    @property
    def delayed(self) -> int:
        return round(self.total * self.delayed_share)

    @property
    def fifo(self) -> int:
        return round(self.total * self.fifo_share)

    @property
    def plain(self) -> int:
        return (
            self.total
            - self.duplicates
            - self.delayed
            - self.fifo
            - self.invalid
            - 2 * self.mismatched  # a reused key is published twice, with different data
        )


@dataclass(frozen=True)
class Publish:
    """One publish to origin."""

    kind: Kind
    key: str
    data: bytes
    attributes: dict[str, str]
    reason: str | None = None  # the dead-letter reason this copy must get, if it must


def build_waves(mix: Mix, counter: SequenceCounter) -> list[list[Publish]]:
    """The publishes, in shuffled waves; FIFO numbers come from ``counter`` (the sequencer)."""
    if mix.plain < 0:
        raise ValueError(f"{mix} leaves no room for plain messages")
    rng = random.Random(mix.seed)
    waves = max(1, math.ceil(mix.total / mix.wave)) if mix.wave else 1
    share = [list[Publish]() for _ in range(waves)]

    def spread(count: int, make: Callable[[int], Publish]) -> None:
        for i in range(count):
            share[i * waves // count].append(make(i))  # evenly over the waves, in order

    spread(mix.plain, lambda i: Publish(Kind.PLAIN, f"plain-{i}", f"plain-{i}".encode(), {}))
    lo, hi = mix.delay_range
    spread(
        mix.delayed,
        lambda i: Publish(
            Kind.DELAYED,
            f"delayed-{i}",
            f"delayed-{i}".encode(),
            {"delay_seconds": f"{rng.uniform(lo, hi):.3f}"},
        ),
    )
    # Poison messages are spread evenly among the FIFO ones.
    poison_at = {round((j + 0.5) * mix.fifo / mix.poison) for j in range(mix.poison)}
    spread(
        mix.fifo,
        lambda i: Publish(
            Kind.POISON if i in poison_at else Kind.FIFO,
            "",  # keyed once numbered, below
            b"",
            {attr.FIFO_GROUP: f"group-{i % mix.groups}"}
            | ({POISON_ATTRIBUTE: "1"} if i in poison_at else {}),
            REASON_POISON if i in poison_at else None,
        ),
    )
    spread(
        mix.invalid,
        lambda i: Publish(
            Kind.INVALID,
            f"invalid-{i}",
            f"invalid-{i}".encode(),
            dict(INVALID_KINDS[i % len(INVALID_KINDS)][0]),
            INVALID_KINDS[i % len(INVALID_KINDS)][1],
        ),
    )
    for wave in share:
        _number_fifo(wave, counter)
    for i in range(mix.mismatched):
        key = f"mismatch-{i}"
        for variant in ("a", "b"):  # which copy wins is up to the race; one of each fate
            share[i * waves // mix.mismatched].append(
                Publish(Kind.MISMATCH, key, f"{key}:{variant}".encode(), {})
            )
    # A duplicate copies an original of its own wave: a producer's retry re-publishes what it
    # just sent. Contract violations and reused keys are left alone (their fates are their own).
    pools = [[p for p in wave if p.kind not in (Kind.INVALID, Kind.MISMATCH)] for wave in share]
    for i in range(mix.duplicates):
        w = i * waves // mix.duplicates
        share[w].append(rng.choice(pools[w]))
    for wave in share:
        rng.shuffle(wave)  # FIFO numbers go out of order within a wave; duplicates anywhere
    return share


def _number_fifo(wave: list[Publish], counter: SequenceCounter) -> None:
    by_group: dict[str, list[int]] = defaultdict(list)
    for index, p in enumerate(wave):
        if p.kind in (Kind.FIFO, Kind.POISON):
            by_group[p.attributes[attr.FIFO_GROUP]].append(index)
    for group, indexes in by_group.items():
        block = counter.reserve(group, len(indexes))  # one reservation per group and wave
        for index, seq in zip(indexes, block.numbers(), strict=True):
            p = wave[index]
            key = f"fifo-{group}-{seq}"
            wave[index] = Publish(
                p.kind, key, key.encode(), {**p.attributes, attr.FIFO_SEQ: str(seq)}, p.reason
            )


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
        if not deduplicated_ids <= seen.ingress_duplicate_ids:
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


@dataclass(frozen=True)
class RunResult:
    """What one run of the workload measured, and its ledger."""

    ledger: Ledger
    published: int
    wall_s: float  # first publish -> every key at its final fate (or the deadline)
    complete: bool  # every key reached its fate before the deadline


Progress = Callable[[str], None]


def wait_for(
    condition: Callable[[], bool],
    deadline: float,
    *,
    interval: float = 0.25,
    report: Callable[[], str] | None = None,
    progress: Progress | None = None,
    every: float = 10.0,
) -> bool:
    """Poll ``condition`` until true (True) or ``deadline`` (monotonic) passes (False)."""
    next_report = time.monotonic() + every
    while True:
        if condition():
            return True
        now = time.monotonic()
        if now >= deadline:
            return False
        if progress is not None and report is not None and now >= next_report:
            progress(report())
            next_report = now + every
        time.sleep(min(interval, max(0.0, deadline - now)))


def run_workload(
    *,
    topology: Topology,
    env: dict[str, str],
    mix: Mix,
    counter: SequenceCounter,
    ingress_log: Path,
    deadline: float,
    backlog: int = 4000,
    quiet: float = 2.0,
    progress: Progress | None = None,
) -> RunResult:
    """Publish ``mix`` to origin, consume the final topic, and account for every copy.

    A wave is published only while fewer than ``backlog`` copies wait for ingress, so a long
    run keeps a bounded backlog (and FIFO gaps bounded in time) instead of queueing everything
    in the emulator at once. ``env`` configures the Consumer (it needs ``CONSUMER_ID``).
    """
    waves = build_waves(mix, counter)
    seen = Observer(ingress_log)
    processor = MessageProcessor.from_settings(
        Settings.from_env(env), ConsumerSettings.from_env(env), seen.handler
    )
    sent: dict[str, Publish] = {}
    want = Counter[str]()
    for wave in waves:
        for p in wave:
            want[p.key] = expected_fates(p.kind)
    fates_needed = sum(want.values())

    def fates_reached() -> int:
        with seen.lock:
            reached = Counter(m.attributes.get(attr.DEDUP_KEY, "") for _, _, m in seen.delivered)
            dead = [i for i, _ in seen.dead_letters]
        for message_id in dead:
            if message_id in sent:
                reached[sent[message_id].key] += 1
        return sum(min(n, reached[key]) for key, n in want.items())

    def report() -> str:
        return (
            f"{time.monotonic() - started:.0f}s: published {len(sent)}/{mix.total}, "
            f"ingress decided {seen.ingress_terminal}, fates {fates_reached()}/{fates_needed}"
        )

    def ingress_caught_up(limit: int) -> Callable[[], bool]:
        def check() -> bool:
            seen.read_ingress_log()
            return len(sent) - seen.ingress_terminal <= limit

        return check

    subscriber = pubsub_v1.SubscriberClient()
    dead_letter_stream = subscriber.subscribe(topology.dead_letter_sub, seen.on_dead_letter)
    publisher = pubsub_v1.PublisherClient()
    complete = False
    started = time.monotonic()
    wall = 0.0
    try:
        with Consumer(topology.final_sub, processor, concurrency=16, on_outcome=seen.on_outcome):
            for wave in waves:
                if not wait_for(
                    ingress_caught_up(backlog), deadline, report=report, progress=progress
                ):
                    break
                futures = [
                    (p, publisher.publish(topology.origin, p.data, dedup_key=p.key, **p.attributes))
                    for p in wave
                ]
                for p, future in futures:
                    sent[future.result(timeout=max(1.0, deadline - time.monotonic()))] = p
            else:
                complete = wait_for(
                    lambda: ingress_caught_up(0)() and fates_reached() >= fates_needed,
                    deadline,
                    report=report,
                    progress=progress,
                )
            wall = time.monotonic() - started
            if complete:
                # A quiet spell after the last fate: a late duplicate would show up in it.
                wait_for(
                    lambda: time.monotonic() - seen.last_event >= quiet,
                    min(deadline, time.monotonic() + 60),
                )
    finally:
        dead_letter_stream.cancel()
        subscriber.close()
        publisher.stop()
    seen.read_ingress_log()
    return RunResult(check_ledger(sent, seen), len(sent), wall, complete)
