"""bench/ingress_ordering: message ordering on the ingress push subscription, on and off.

Run with ``make bench-ingress-ordering`` (or ``python -m bench.ingress_ordering [--rounds N]``).
It starts the local stack the way ``pubsub-toolkit local up`` does (Redis store) and, for each
round and variant, creates a fresh origin topic with a push subscription to the running ingress
- ``unordered`` (the default deploy) or ``ordered`` (``ingress_message_ordering = true`` /
``INGRESS_MESSAGE_ORDERING=1``) - and a fresh ordered pull subscription on the final topic. The
toolkit's ``Publisher`` publishes ``--messages`` FIFO messages over ``--groups`` groups (its
ordering key is the group) without waiting between them; the benchmark then pulls the final
subscription until every message arrived and counts, per group, the arrivals a consumer's gate
would park: a number arriving before the one before it. Variants alternate round by round.

Machine-independent figure: the share of FIFO messages parked (arrived early), per variant.
Timing figure: seconds until the last message reached the final topic, and the ratio ordered /
unordered (the cost: one push per group at a time). Writes ``bench/results/ingress_ordering.json``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from bench.common import stop_on_sigterm, write_result
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.producer.sink import PubSubSink
from pubsub_toolkit.stores.counters.redis import RedisSequenceCounter
from pubsub_toolkit_local.stack import LocalStack, StackOptions

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ("unordered", "ordered")
RUN = "bench_run"  # the attribute naming the round's messages (other rounds' stragglers differ)


def one_round(
    stack: LocalStack, counter: RedisSequenceCounter, *, ordered: bool, messages: int, groups: int
) -> dict[str, Any]:
    """Publish one round through a fresh origin topic; count early arrivals on the final."""
    topo = stack.topology
    assert topo is not None
    run = uuid.uuid4().hex[:8]
    topic = f"projects/{topo.project}/topics/origin-{run}"
    push = f"projects/{topo.project}/subscriptions/push-{run}"
    final = f"projects/{topo.project}/subscriptions/final-{run}"
    admin_pub, admin_sub = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    admin_pub.create_topic(name=topic, timeout=10)
    admin_sub.create_subscription(
        request={"name": final, "topic": topo.final, "enable_message_ordering": True}, timeout=10
    )
    endpoint = f"http://127.0.0.1:{stack.ports['ingress']}/projects/{topo.project}/topics/origin"
    admin_sub.create_subscription(
        request={
            "name": push,
            "topic": topic,
            "push_config": {"push_endpoint": endpoint},
            "ack_deadline_seconds": 30,
            "enable_message_ordering": ordered,
        },
        timeout=10,
    )
    sink = PubSubSink()
    publisher = Publisher(sink, topic, counter)
    started = time.monotonic()
    futures = [
        publisher.publish(
            f"{run}:{n}".encode(),
            {RUN: run},
            fifo_group=f"{run}-g{n % groups}",
            dedup_key=f"{run}-{n}",
        )
        for n in range(messages)
    ]
    for future in futures:
        future.result(timeout=60)
    sink.close()
    arrivals = pull_all(admin_sub, final, run, messages, timeout=300)
    elapsed = time.monotonic() - started
    admin_sub.delete_subscription(subscription=push, timeout=10)
    admin_sub.delete_subscription(subscription=final, timeout=10)
    admin_sub.close()
    parked, duplicates = early_arrivals(arrivals)
    return {
        "messages": messages,
        "arrived": len({key for key, _ in arrivals}),
        "parked": parked,
        "duplicates": duplicates,
        "parked_share": round(parked / messages, 4),
        "seconds_to_last": round(elapsed, 3),
    }


def pull_all(
    subscriber: pubsub_v1.SubscriberClient,
    subscription: str,
    run: str,
    expected: int,
    timeout: float,
) -> list[tuple[str, tuple[str, int]]]:
    """(dedup_key, (group, seq)) per arrival of this run's messages, in arrival order."""
    arrivals: list[tuple[str, tuple[str, int]]] = []
    keys: set[str] = set()
    deadline = time.monotonic() + timeout
    while len(keys) < expected and time.monotonic() < deadline:
        response = subscriber.pull(
            subscription=subscription, max_messages=1000, return_immediately=True, timeout=10
        )
        if not response.received_messages:
            time.sleep(0.05)  # the emulator answers an empty pull at once: don't spin
            continue
        for item in response.received_messages:
            attributes = item.message.attributes
            if attributes.get(RUN) != run:
                continue
            key = attributes["dedup_key"]
            keys.add(key)
            arrivals.append((key, (attributes["fifo_group"], int(attributes["fifo_seq"]))))
        subscriber.acknowledge(
            subscription=subscription,
            ack_ids=[i.ack_id for i in response.received_messages],
            timeout=10,
        )
    return arrivals


def early_arrivals(arrivals: list[tuple[str, tuple[str, int]]]) -> tuple[int, int]:
    """(parked, duplicates): arrivals ahead of their group's next number (a gate parks them),
    and arrivals of a number already seen."""
    seen: dict[str, set[int]] = {}
    parked = duplicates = 0
    for _key, (group, seq) in arrivals:
        numbers = seen.setdefault(group, set())
        if seq in numbers:
            duplicates += 1
            continue
        numbers.add(seq)
        if any(n not in numbers for n in range(1, seq)):
            parked += 1
    return parked, duplicates


def run(stack: LocalStack, *, rounds: int, messages: int, groups: int) -> dict[str, object]:
    redis_url = stack.env["PUBSUB_TOOLKIT_REDIS_URL"]
    counter = RedisSequenceCounter.from_url(redis_url, prefix=f"bench-{uuid.uuid4().hex[:6]}:")
    one_round(stack, counter, ordered=False, messages=min(messages, 50), groups=groups)  # warm
    per_round: list[dict[str, Any]] = []
    for index in range(rounds):
        order = VARIANTS if index % 2 == 0 else VARIANTS[::-1]
        row: dict[str, Any] = {"round": index + 1, "order": list(order)}
        for variant in order:
            row[variant] = one_round(
                stack, counter, ordered=variant == "ordered", messages=messages, groups=groups
            )
        row["seconds_ratio_ordered_to_unordered"] = round(
            row["ordered"]["seconds_to_last"] / row["unordered"]["seconds_to_last"], 2
        )
        per_round.append(row)
        print(
            f"round {index + 1}: parked unordered {row['unordered']['parked_share']:.1%}, "
            f"ordered {row['ordered']['parked_share']:.1%}; seconds "
            f"{row['unordered']['seconds_to_last']} vs {row['ordered']['seconds_to_last']}",
            flush=True,
        )
    summary = {
        v: {
            "parked_share_median": statistics.median(r[v]["parked_share"] for r in per_round),
            "parked_total": sum(r[v]["parked"] for r in per_round),
            "duplicates_total": sum(r[v]["duplicates"] for r in per_round),
            "seconds_to_last_median": statistics.median(r[v]["seconds_to_last"] for r in per_round),
        }
        for v in VARIANTS
    }
    return {
        "summary": summary,
        "median_round_seconds_ratio": statistics.median(
            r["seconds_ratio_ordered_to_unordered"] for r in per_round
        ),
        "rounds": per_round,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per variant (default 3)")
    parser.add_argument("--messages", type=int, default=400, help="messages per round")
    parser.add_argument("--groups", type=int, default=8, help="FIFO groups per round")
    args = parser.parse_args(argv)
    if min(args.rounds, args.messages, args.groups) < 1:
        parser.error("--rounds, --messages and --groups must be at least 1")
    stop_on_sigterm()
    work = Path(tempfile.mkdtemp(prefix="pubsub-toolkit-ordering-"))
    options = StackOptions(project="ordering", store_backend="redis")
    with LocalStack(options, work, REPO) as stack:
        result = run(stack, rounds=args.rounds, messages=args.messages, groups=args.groups)
    path = write_result(
        "ingress_ordering",
        {
            "rounds_per_variant": args.rounds,
            "messages_per_round": args.messages,
            "groups": args.groups,
            "method": (
                "Publisher futures (ordering key = group) to a fresh origin topic pushed to the "
                "local ingress (Pub/Sub emulator, Redis store); arrivals pulled from a fresh "
                "ordered subscription on the final topic; parked = a number arriving before a "
                "smaller one of its group; variants alternate per round"
            ),
            **result,
        },
    )
    print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
