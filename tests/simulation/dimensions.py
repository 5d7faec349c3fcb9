"""The opt-in dimensions of issue 24 that reshape a schedule's workload or deployment.

Each runs only when its kind (:data:`tests.simulation.faults.EXTRA_KINDS`) is in the plan, and
draws from its own stream of the seed, so the default workload of a seed never changes:

* ``long_pause`` - in each group, the messages from some point on are published after a pause
  longer than every TTL (the dedup TTL and the completed group's retention: 8 days);
* ``late_cancel`` - ``cancel()`` of a delivered delayed message, again, a TTL after its release;
* ``fifo_end`` - each group's last message is published with ``end_of_group=True``;
* ``retry_later`` - the handler raises ``RetryLater`` on some messages' first tries; some of
  them carry as many attributes of their own as the ``Publisher`` accepts (the producer finds
  the widest by asking it: 88 today, room kept for the 12 the toolkit may add);
* ``reserved_attributes`` - a producer sets attributes the toolkit reserves on a plain message
  (``dlq_*``, ``error_*``, ``retry_*``, ``fifo_filler``);
* ``renumber_far`` - a group gets a burst of 66-80 small messages, and one message published
  before the burst has its first publish time out after Pub/Sub accepted it: its producer's
  retry comes after the burst, from the producer restarted meanwhile (:mod:`.producer`: a
  ``Publisher`` that remembers the number gives the retry the same one), more than 64 numbers
  after the first copy;
* ``scale`` - groups publish over hours (the lease-hold and retention paths);
* ``process_batch`` - (the shape is wired in :mod:`.world`) a burst of 5-20 messages in one
  group, and mostly a batch handler (3 or 5), so that runs from a group's head form;
* ``handler_permanent`` - half the poison messages make the handler raise ``PermanentError``
  (it can never succeed): a plain one is dead-lettered with the error's reason, once however
  often it comes back; a grouped one is poison at once.
"""

from __future__ import annotations

import random
from dataclasses import replace

from pubsub_toolkit.attributes import (
    DLQ_PREFIX,
    REASON_FINGERPRINT_MISMATCH,
    REASON_RESERVED_ATTRIBUTE,
)
from tests.simulation.components import TTL
from tests.simulation.faults import FaultPlan, Kind
from tests.simulation.workload import Expect, LogicalMessage, Workload

REFUSED = "sim_refused"  # the reason of the handler's PermanentError (handler_permanent)
# ... or, when a hostile producer reused its key first, the impostor's dead letter takes it
REASONS = (REFUSED, REASON_FINGERPRINT_MISMATCH)
RESERVED = {
    "dlq_wrapped": "json",
    "error_reason": "forged",
    "error_detail": "a producer's own",
    "retry_attempt": "7",
    "fifo_filler": "true",
}


def reshape(workload: Workload, plan: FaultPlan, rng: random.Random) -> Workload:
    """``workload`` with the plan's opt-in dimensions applied (unchanged without them)."""
    messages = list(workload.messages)
    ttl = TTL.total_seconds()
    if plan.has(Kind.SCALE):
        messages = [
            replace(m, publish_at=m.publish_at * rng.uniform(20, 120)) if m.group else m
            for m in messages
        ]
    if plan.has(Kind.LONG_PAUSE):
        for group in workload.groups:
            mine = [i for i, m in enumerate(messages) if m.group == group and not m.hostile]
            mine.sort(key=lambda i: messages[i].publish_at)
            if len(mine) < 2:
                continue
            cut = rng.randint(1, len(mine) - 1)
            pause = ttl + rng.uniform(3600, 2 * 86_400)
            for i in mine[cut:]:
                messages[i] = replace(messages[i], publish_at=messages[i].publish_at + pause)
    if plan.has(Kind.LATE_CANCEL):
        for i, m in enumerate(messages):
            span = m.delay or m.deliver_in or 0.0
            plain = m.dedup_key and not m.group and not m.hostile
            if plain and 0 < span < 365 * 86_400 and rng.random() < 0.5:
                late = m.publish_at + span + ttl + rng.uniform(3600, 86_400)
                messages[i] = replace(m, late_cancel_at=late)
    if plan.has(Kind.RETRY_LATER):
        for i, m in enumerate(messages):
            if not m.hostile and not m.poison and rng.random() < 0.25:
                wide = rng.random() < 0.5
                messages[i] = replace(
                    m, retry_later=rng.randint(1, 2), retry_delay=rng.uniform(1, 120), wide=wide
                )
    if plan.has(Kind.RESERVED_ATTRS):
        for i, m in enumerate(messages):
            if not m.group and not m.hostile and not m.delayed and rng.random() < 0.2:
                names = rng.sample(sorted(RESERVED), rng.randint(1, 3))
                # a dlq_* name is refused (a producer's message must not read as a dead
                # letter: issue 24's defect 8); the others: one effect or one dead letter
                refused = any(name.startswith(DLQ_PREFIX) for name in names)
                expect = Expect.DEAD_LETTER if refused else Expect.EITHER
                reasons: tuple[str, ...] = (REASON_RESERVED_ATTRIBUTE,) if refused else ()
                messages[i] = replace(m, reserved=tuple(names), expect=expect, reasons=reasons)
    if plan.has(Kind.RENUMBER_FAR):
        messages = _renumber_far(messages, workload.groups, rng)
    config = workload.config
    if plan.has(Kind.PROCESS_BATCH) and workload.groups:
        # batches need traffic: a burst in one group, and mostly a batch handler
        group = rng.choice(workload.groups)
        messages += _burst(len(messages), group, rng.uniform(0, plan.heal_at), 5, 20, rng)
        if rng.random() < 0.7:
            config = replace(config, batch=rng.choice((3, 5)))
    if plan.has(Kind.DEEP_INTERLEAVE):
        config = replace(config, ingresses=3, relays=3, consumers=3)
    if plan.has(Kind.HANDLER_PERMANENT):  # drawn last: the draws above stay as they were
        messages = _permanent(messages, workload.config.gate_dead_letters, rng)
    return replace(workload, messages=tuple(messages), config=config)


def _permanent(
    messages: list[LogicalMessage], dead_letters: bool, rng: random.Random
) -> list[LogicalMessage]:
    """handler_permanent: half the poison messages raise PermanentError; and, with a
    dead-letter topic, some plain ones too - also where the subscription has no dead-letter
    policy, so a PermanentError the consumer nacked instead of dead-lettering would be lost
    (redelivered for ever: invariant 1 "never neither")."""
    out = []
    for m in messages:
        plain = dead_letters and m.group is None and not m.hostile and m.expect is Expect.EFFECT
        if m.poison and rng.random() < 0.5:
            reasons = m.reasons or (() if m.group else REASONS)
            out.append(replace(m, permanent=True, reasons=reasons))
        elif not m.poison and plain and rng.random() < 0.08:
            refused = Expect.DEAD_LETTER
            out.append(replace(m, poison=True, permanent=True, expect=refused, reasons=REASONS))
        else:
            out.append(m)
    return out


def unpermanent_without_policy(workload: Workload) -> Workload:
    """``workload`` for a consumer that nacks every failure: the plain messages whose
    PermanentError only the consumer could dead-letter (the subscription has no dead-letter
    policy) succeed instead."""
    if workload.config.final.max_delivery_attempts is not None:
        return workload
    messages = tuple(
        replace(m, poison=False, permanent=False, expect=Expect.EFFECT, reasons=())
        if m.permanent and m.group is None
        else m
        for m in workload.messages
    )
    return replace(workload, messages=messages)


def _renumber_far(
    messages: list[LogicalMessage], groups: tuple[str, ...], rng: random.Random
) -> list[LogicalMessage]:
    keyed = [m for m in messages if m.group and m.dedup_key and not m.hostile and not m.delayed]
    if not groups or not keyed:
        return messages
    straggler = rng.choice(keyed)
    burst = _burst(len(messages), str(straggler.group), straggler.publish_at + 1, 66, 80, rng)
    out = [replace(m, retry_after_burst=True) if m is straggler else m for m in messages]
    return out + burst


def _burst(
    after: int, group: str, start: float, least: int, most: int, rng: random.Random
) -> list[LogicalMessage]:
    """Small messages published in ``group`` 50 ms apart from ``start`` (half keyed)."""
    return [
        LogicalMessage(
            lid=f"L{after + n + 1}",
            data=f"L{after + n + 1}:burst".encode(),
            dedup_key=f"b{after + n + 1}" if rng.random() < 0.5 else None,
            group=group,
            publish_at=start + n * 0.05,
        )
        for n in range(rng.randint(least, most))
    ]
