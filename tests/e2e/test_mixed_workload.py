"""A mixed workload through the whole local stack, checked end to end by the ledger.

2,000 publishes to origin with the official client: 20% are re-published duplicates, 20% are
delayed 1-5 s, 30% belong to 10 FIFO groups (numbered by the sequencer, then sent in a shuffled
order), plus a few contract violations, reused keys with different content and poison FIFO
messages. A Consumer on the final topic (dedup + FIFO gate) records what it handles. The ledger
(bench/ledger.py, shared with the soak in bench/soak.py) must balance: every published copy
delivered once, deduplicated, or dead-lettered with the right reason; no delayed message early;
every group in order. The run's wall time and rate go to bench/results/e2e_mixed.json.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta

from google.cloud import firestore

from bench.common import write_result
from bench.mix import Kind, Mix, build_waves
from bench.workload import run_workload
from pubsub_toolkit import attributes as attr
from pubsub_toolkit.config import ConsumerSettings
from pubsub_toolkit.consumer.processor_sync import gate_policy
from pubsub_toolkit.stores.counters.firestore import FirestoreSequenceCounter
from pubsub_toolkit.stores.counters.memory import MemorySequenceCounter
from pubsub_toolkit_local.stack import LocalStack

MIX = Mix(total=2000, groups=10, delay_range=(1.0, 5.0), invalid=4, mismatched=2, poison=2)
CONSUMER_ENV = {
    "PUBSUB_TOOLKIT_CONSUMER_ID": "e2e-consumer",
    # Quick FIFO retries, as the stack's Cloud Tasks queue retries quickly: both poison messages
    # fall in group-0, one after the other, and each is retried 4 times before it is
    # dead-lettered. At the 5 s default backoff (5+10+20+40 s each) group-0 alone held the run
    # for ~150 s; the path (retries counted, dead letter, skip, the group in order) is the same.
    "PUBSUB_TOOLKIT_FIFO_RETRY_BACKOFF_SECONDS": "0.2",
}
# What the consumer may spend waiting between retries of one group's poison messages: well
# inside the ~25 s the emulator's pushes to ingress take (6 s at 0.2 s, 150 s at the default).
POISON_WAIT_BUDGET = timedelta(seconds=10)


def test_poison_retry_waits_fit_the_run() -> None:
    """The backoffs the gate schedules for the poison messages of the busiest group, summed
    from the run's own mix and consumer settings (no servers, no timer): the run's length must
    not be those waits."""
    waves = build_waves(MIX, MemorySequenceCounter())
    poison = {
        (p.attributes[attr.FIFO_GROUP], p.key) for w in waves for p in w if p.kind is Kind.POISON
    }
    poison_per_group = Counter(group for group, _ in poison)  # a re-published copy is one
    policy = gate_policy(ConsumerSettings.from_env(CONSUMER_ENV))
    per_poison = sum(
        (policy.backoff(failures) for failures in range(1, policy.max_attempts)), timedelta()
    )
    assert max(poison_per_group.values()) * per_poison <= POISON_WAIT_BUDGET


def test_mixed_workload_exactly_once_on_time_in_order(stack: LocalStack) -> None:
    assert stack.topology is not None
    env = {**stack.env, **CONSUMER_ENV}
    counter = FirestoreSequenceCounter(firestore.Client(project=env["GOOGLE_CLOUD_PROJECT"]))
    ingress_log = next(s.log_path for s in stack.group.services if s.name == "ingress")

    result = run_workload(
        topology=stack.topology,
        env=env,
        mix=MIX,
        counter=counter,
        ingress_log=ingress_log,
        deadline=time.monotonic() + 240,
    )

    ledger = result.ledger
    assert result.complete, f"not every message reached its fate in time: {ledger.problems}"
    assert ledger.problems == []
    assert result.published == MIX.total
    assert ledger.balanced
    dead_lettered = MIX.invalid + MIX.mismatched + MIX.poison
    assert ledger.dead_lettered == dead_lettered
    assert ledger.delivered == MIX.total - MIX.duplicates - dead_lettered
    assert ledger.fifo_groups_in_order == ledger.fifo_groups == MIX.groups
    assert len(ledger.lateness_ms) == MIX.delayed
    write_result(
        "e2e_mixed",
        {
            "published": MIX.total,
            "duplicates": MIX.duplicates,
            "delayed_1_5s": MIX.delayed,
            "fifo_groups": MIX.groups,
            "fifo_messages": MIX.fifo,
            "dead_lettered": ledger.dead_lettered,
            "delivered_exactly_once": ledger.delivered,
            "wall_s": round(result.wall_s, 2),
            "published_msgs_per_s": round(MIX.total / result.wall_s, 1),
        },
    )
