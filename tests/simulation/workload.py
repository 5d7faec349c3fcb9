"""What one schedule publishes, and how the pipeline is configured for it - drawn from the seed.

A workload is 5-30 logical messages: plain ones, ones with a producer ``dedup_key``, delayed
ones (``delay`` or an absolute ``deliver_at``, some beyond Cloud Tasks' 30-day horizon so they
hop, a few beyond the 365-day limit), and 0-3 FIFO groups published through ``Publisher`` with
``fifo_group``. Some are published twice on purpose (same content: a duplicate), some are
poison for the handler or fail transiently at first, some are cancelled, and a hostile producer
may publish raw messages that break the rules (a reused ``fifo_seq`` with another key, a number
beyond 64 bits, a dedup key reused with different content).

Each logical message says what the guarantee expects of it (:class:`Expect`).
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

from tests.simulation.faults import FaultPlan, Kind
from tests.simulation.pubsub import SubscriptionConfig

OUT_OF_RANGE_SEQ = str(2**63)  # one past the largest 64-bit integer
DAY = 86_400.0


class Expect(enum.StrEnum):
    EFFECT = "effect"  # its effect exactly once, or dead-lettered with a reason
    DEAD_LETTER = "dead_letter"  # dead-lettered with one of ``reasons``, never an effect
    EITHER = "either"  # a hostile copy: effect once or dead-lettered (never both, never neither)


@dataclass(frozen=True)
class LogicalMessage:
    lid: str
    data: bytes
    dedup_key: str | None
    group: str | None
    publish_at: float
    delay: float | None = None  # published as delay_seconds
    deliver_in: float | None = None  # published as deliver_at = producer's now + deliver_in
    republish_after: float | None = None  # the producer publishes it again on purpose
    poison: bool = False
    transient: float = 0.0  # the handler fails for this long after its first call
    cancel_at: float | None = None
    hostile: str | None = None  # reused_seq | out_of_range_seq | key_reuse
    expect: Expect = Expect.EFFECT
    reasons: tuple[str, ...] = ()  # the acceptable reasons when DEAD_LETTER
    # --- opt-in dimensions (:mod:`.dimensions`) ---
    late_cancel_at: float | None = None  # cancel() again, a TTL after its release
    retry_later: int = 0  # the handler raises RetryLater on this many first tries
    retry_delay: float = 0.0  # ... asking for this many seconds
    wide: bool = False  # as many attributes of its own as the Publisher accepts
    reserved: tuple[str, ...] = ()  # attributes the toolkit reserves, set by its producer
    retry_after_burst: bool = False  # its first publish times out; retried after a burst
    permanent: bool = False  # (poison) the handler raises PermanentError, not an exception

    @property
    def delayed(self) -> bool:
        return bool(self.delay) or bool(self.deliver_in)


@dataclass(frozen=True)
class Config:
    """The deployment for one schedule."""

    origin: SubscriptionConfig
    final: SubscriptionConfig
    ingresses: int
    relays: int
    consumers: int
    poison_policy: str  # skip | block
    gap_policy: str  # wait | skip
    gate_dead_letters: bool  # the consumer has a dead-letter topic
    dedup_lease: float
    lease_hold: float  # the FIFO gate keeps a group's lease between deliveries (0 = never)
    batch: int  # the consumer's handler takes lists of up to this many (1 = one message)


@dataclass(frozen=True)
class Workload:
    messages: tuple[LogicalMessage, ...]
    groups: tuple[str, ...]
    config: Config


def _subscription(rng: random.Random) -> SubscriptionConfig:
    return SubscriptionConfig(
        ack_deadline=rng.uniform(10, 60),
        min_backoff=rng.uniform(5, 15),
        max_backoff=600.0,
        max_delivery_attempts=rng.choice((None, 5, 10, 20)),
    )


def _config(rng: random.Random) -> Config:
    final = _subscription(rng)
    # Without a dead-letter topic the consumer nacks what it cannot handle, so that it reaches
    # Pub/Sub's dead-letter policy: a deployment with neither has nowhere to put it.
    gate_dead_letters = rng.random() < 0.9 or final.max_delivery_attempts is None
    return Config(
        origin=_subscription(rng),
        final=final,
        ingresses=rng.randint(1, 2),
        relays=rng.randint(1, 2),
        consumers=rng.randint(1, 2),
        poison_policy=rng.choice(("skip", "block")),
        gap_policy=rng.choice(("wait", "wait", "skip")),
        gate_dead_letters=gate_dead_letters,
        dedup_lease=rng.choice((30.0, 90.0)),
        lease_hold=rng.choice((0.0, 2.0, 2.0, 20.0)),
        batch=rng.choice((1, 1, 3)),
    )


def _due(rng: random.Random) -> tuple[float | None, float | None]:
    """(delay, deliver_in) for a delayed message: mostly soon, some hop, a few too far."""
    roll = rng.random()
    if roll < 0.6:
        span = rng.uniform(1, 90)
    elif roll < 0.85:
        span = rng.uniform(90, 3 * 3600)
    elif roll < 0.97:
        span = rng.uniform(31 * DAY, 70 * DAY)  # beyond the 30-day horizon: hops
    else:
        span = rng.uniform(366 * DAY, 400 * DAY)  # beyond the 365-day limit
    return (span, None) if rng.random() < 0.5 else (None, span)


def draw(rng: random.Random, plan: FaultPlan) -> Workload:
    """The workload for one schedule (the fault plan decides which hostile parts exist)."""
    config = _config(rng)
    groups = tuple(f"g{i}" for i in range(1, rng.randint(0, 3) + 1))
    window = plan.heal_at * 0.8
    messages: list[LogicalMessage] = []
    for i in range(1, rng.randint(5, 30) + 1):
        lid = f"L{i}"
        group = rng.choice(groups) if groups and rng.random() < 0.5 else None
        keyed = rng.random() < (0.8 if group else 0.7)
        delay, deliver_in = _due(rng) if rng.random() < (0.1 if group else 0.3) else (None, None)
        if group is not None and (delay or deliver_in):
            delay, deliver_in = (rng.uniform(1, 30), None)  # FIFO delays stay short
        far = (delay or deliver_in or 0.0) > 365 * DAY
        # Every draw is made whatever the plan enables, so a plan with fewer fault kinds (a
        # shrunk schedule) gets the same messages, minus the disabled parts.
        poison = rng.random() < 0.06 and plan.has(Kind.HANDLER_POISON)
        if poison and group is None and config.final.max_delivery_attempts is None:
            poison = False  # nacked forever with no dead-letter policy: the user's choice
        transient = rng.uniform(1, 30) if rng.random() < 0.15 else 0.0
        cancel = rng.random() < 0.6 and plan.has(Kind.CANCEL)
        cancel = cancel and keyed and group is None and bool(delay or deliver_in)
        publish_at = rng.uniform(0, window)
        span = delay or deliver_in or 0.0
        cancel_at = (
            publish_at + span + rng.uniform(-4, 4)
            if rng.random() < 0.5
            else rng.uniform(publish_at, publish_at + span + 10)
        )
        messages.append(
            LogicalMessage(
                lid=lid,
                data=f"{lid}:{rng.getrandbits(32):08x}".encode(),
                dedup_key=f"k{i}" if keyed else None,
                group=group,
                publish_at=publish_at,
                delay=delay,
                deliver_in=deliver_in,
                republish_after=rng.uniform(0, 30) if keyed and rng.random() < 0.1 else None,
                poison=poison,
                transient=transient if plan.has(Kind.HANDLER_TRANSIENT) else 0.0,
                cancel_at=cancel_at if cancel and not far else None,
                expect=Expect.DEAD_LETTER if far or poison else Expect.EFFECT,
                reasons=("delay_too_long",) if far else (),
            )
        )
    if plan.has(Kind.HOSTILE):
        messages.extend(_hostile(rng, messages, groups, window))
    return Workload(tuple(messages), groups, config)


def _hostile(
    rng: random.Random, legit: list[LogicalMessage], groups: tuple[str, ...], window: float
) -> list[LogicalMessage]:
    """Raw publishes that break the rules; each must end dead-lettered or with one effect."""
    out: list[LogicalMessage] = []
    plain_keys = [m for m in legit if m.dedup_key and not m.group and not m.delayed]
    for _ in range(rng.randint(1, 2)):
        lid = f"L{len(legit) + len(out) + 1}"  # no gap: later bursts number from the end
        data = f"{lid}:hostile{rng.getrandbits(32):08x}".encode()
        kind = rng.choice(("reused_seq", "out_of_range_seq", "key_reuse"))
        at = rng.uniform(0, window)
        if kind == "key_reuse" and plain_keys:
            victim = rng.choice(plain_keys)
            out.append(
                LogicalMessage(
                    lid, data, victim.dedup_key, None, at, hostile=kind, expect=Expect.EITHER
                )
            )
        elif kind == "reused_seq" and groups:
            out.append(
                LogicalMessage(
                    lid, data, f"h{lid}", rng.choice(groups), at, hostile=kind, expect=Expect.EITHER
                )
            )
        elif kind == "out_of_range_seq":
            group = rng.choice(groups) if groups else "gx"
            out.append(
                LogicalMessage(
                    lid,
                    data,
                    f"h{lid}",
                    group,
                    at,
                    hostile=kind,
                    expect=Expect.DEAD_LETTER,
                    reasons=("invalid_fifo_seq",),
                )
            )
    return out
