"""bench/dedup: claim throughput per backend, and ingress throughput as a ratio to pass-through.

Run with ``make bench`` (or ``python -m bench.dedup``). It starts its own emulators and Redis.

* **claims**: claim + complete of distinct keys, 1 and 8 threads, per backend.
* **ingress**: ``Ingress.handle`` publishing to the Pub/Sub emulator on 8 threads, per dedup
  backend, divided by a *pass-through* that does the same validation and the same publish
  without any dedup. Rounds alternate between variants and the median is reported, because the
  machine is shared and noisy; only ratios are meaningful.
"""

from __future__ import annotations

import argparse
import os
import uuid
from collections.abc import Callable
from datetime import timedelta

from google.cloud import firestore, pubsub_v1  # type: ignore[attr-defined]

from bench.common import Servers, local_servers, median, rate, write_result
from pubsub_toolkit import attributes as attr
from pubsub_toolkit.envelope import parse_envelope
from pubsub_toolkit.ingress.pipeline import Ingress
from pubsub_toolkit.message import Message, OutboundMessage
from pubsub_toolkit.producer.sink import PubSubSink
from pubsub_toolkit.stores.dedup.base import DedupStore
from pubsub_toolkit.stores.dedup.firestore import FirestoreDedupStore
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit.stores.dedup.redis import RedisDedupStore

LEASE, TTL = timedelta(seconds=60), timedelta(hours=1)
THREADS = int(os.environ.get("BENCH_THREADS", "8"))


def make_store(backend: str, servers: Servers) -> DedupStore:
    suffix = uuid.uuid4().hex[:8]
    if backend == "memory":
        return MemoryDedupStore()
    if backend == "redis":
        return RedisDedupStore.from_url(servers.redis_url, prefix=f"bench-{suffix}:")
    return FirestoreDedupStore(firestore.Client(project=f"bench-{suffix}"))


def bench_claims(servers: Servers, items: int) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    for backend in ("memory", "redis", "firestore"):
        results[backend] = {}
        for threads in (1, THREADS):
            store = make_store(backend, servers)

            def claim(i: int, store: DedupStore = store) -> None:
                c = store.claim("bench", f"k{i}", "fp", lease=LEASE, ttl=TTL)
                store.complete("bench", f"k{i}", c, "ok", ttl=TTL)

            results[backend][f"claims_per_s_{threads}_threads"] = round(
                rate(items, claim, threads=threads), 1
            )
            figure = results[backend][f"claims_per_s_{threads}_threads"]
            print(f"claims  {backend:<9} {threads} threads: {figure:>8}/s")
    return results


def bench_ingress(servers: Servers, items: int, rounds: int) -> dict[str, object]:
    project = f"bench-{uuid.uuid4().hex[:8]}"
    final = f"projects/{project}/topics/final"
    dead = f"projects/{project}/topics/dead-letter"
    admin = pubsub_v1.PublisherClient()
    admin.create_topic(name=final)
    admin.create_topic(name=dead)
    sink = PubSubSink()  # one publisher client for every variant, as one function instance

    def passthrough_variant() -> Callable[[Message], object]:
        def handle(message: Message) -> object:
            envelope = parse_envelope(message, now=attr.parse_time("2030-01-01T00:00:00Z"))
            outbound = OutboundMessage(message.data, envelope.stamped_attributes())
            return sink.publish(final, outbound)

        return handle

    def ingress_variant(backend: str) -> Callable[[Message], object]:
        ingress = Ingress(
            store=make_store(backend, servers),
            sink=sink,
            final_topic=final,
            dead_letter_topic=dead,
            lease=LEASE,
            ttl=TTL,
        )
        return ingress.handle

    variants = ("passthrough", "memory", "redis", "firestore")
    samples: dict[str, list[float]] = {v: [] for v in variants}
    for round_no in range(rounds):
        # Rotate the order each round so no variant always runs on a warmer or fuller emulator.
        shift = round_no % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            handle = passthrough_variant() if variant == "passthrough" else ingress_variant(variant)
            prefix = f"r{round_no}-{variant}"

            def one(
                i: int, handle: Callable[[Message], object] = handle, prefix: str = prefix
            ) -> None:
                handle(Message(b"x" * 256, {"n": str(i)}, message_id=f"{prefix}-{i}"))

            samples[variant].append(rate(items, one, threads=THREADS))
        print(
            f"ingress round {round_no + 1}/{rounds}: "
            + ", ".join(f"{v} {samples[v][-1]:.0f}/s" for v in variants)
        )
    sink.close()
    base = median(samples["passthrough"])
    return {
        "threads": THREADS,
        "messages_per_round": items,
        "rounds": rounds,
        "msgs_per_s_median": {v: round(median(samples[v]), 1) for v in variants},
        "ratio_to_passthrough": {
            v: round(median(samples[v]) / base, 3) for v in variants if v != "passthrough"
        },
        "targets": {"redis": 0.8, "firestore": 0.5},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=2000, help="keys per claim run")
    parser.add_argument("--messages", type=int, default=1000, help="messages per ingress round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with local_servers() as servers:
        claims = bench_claims(servers, args.claims)
        ingress = bench_ingress(servers, args.messages, args.rounds)
    path = write_result("dedup", {"claims": claims, "ingress": ingress})
    print(f"ratios to pass-through: {ingress['ratio_to_passthrough']}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
