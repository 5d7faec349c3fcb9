"""The mixed workload: what is published, in waves (shared by the e2e test and the soak).

The mix, in waves (each wave shuffled, FIFO numbers reserved from the sequencer per wave so a
group arrives out of order within a wave but waves follow each other):

* plain messages, messages delayed by ``delay_range`` seconds, FIFO messages in ``groups``;
* re-published duplicates of those (same data and attributes, a new Pub/Sub message id);
* ``invalid`` contract violations (dead-lettered by ingress with a reason);
* ``mismatched`` keys published twice with different content (one delivered, one dead-lettered
  as ``fingerprint_mismatch``);
* ``poison`` FIFO messages whose handler always fails (dead-lettered as ``fifo_poison`` by the
  consumer's gate; the group skips them and goes on).
"""

from __future__ import annotations

import enum
import math
import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from pubsub_toolkit import attributes as attr
from pubsub_toolkit.core.fifo_policy import REASON_POISON
from pubsub_toolkit.stores.counters.base import SequenceCounter

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
