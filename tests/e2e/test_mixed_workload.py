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

from google.cloud import firestore

from bench.common import write_result
from bench.mix import Mix
from bench.workload import run_workload
from pubsub_toolkit.stores.counters.firestore import FirestoreSequenceCounter
from pubsub_toolkit_local.stack import LocalStack

MIX = Mix(total=2000, groups=10, delay_range=(1.0, 5.0), invalid=4, mismatched=2, poison=2)


def test_mixed_workload_exactly_once_on_time_in_order(stack: LocalStack) -> None:
    assert stack.topology is not None
    env = {**stack.env, "PUBSUB_TOOLKIT_CONSUMER_ID": "e2e-consumer"}
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
