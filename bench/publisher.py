"""bench/publisher: the toolkit's Publisher against the google-cloud-pubsub client it wraps.

Run with ``python -m bench.publisher`` (or ``make bench-publisher``); it starts its own Pub/Sub
emulator and redis-server (the FIFO counter), and stops them.

Four comparisons, each ``messages`` messages of 200 bytes, on 1 and on 8 threads:

* **unordered**: ``PublisherClient.publish`` (every future collected, then waited) against
  ``Publisher.publish`` (the same, through a ``PubSubSink`` on the same client settings);
* **fifo**: the raw client publishing the same messages with ordering keys (one per group,
  ``GROUPS`` groups, the ``fifo_group``/``fifo_seq``/``fifo_epoch`` attributes the Publisher
  stamps, numbered in-process under a lock) against ``Publisher.publish(..., fifo_group=)``
  numbering each from a Redis counter.

Every variant publishes through its own client built with the same settings (google-cloud-pubsub's
defaults; message ordering on for FIFO), to its own topic. Rounds alternate the variants -
raw then Publisher, then the other way round - because the machine is shared and noisy; the
median per variant and the ratio Publisher / raw are reported. Only ratios are meaningful.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from bench.common import median, rate, write_result
from pubsub_toolkit.producer.publisher import Publisher
from pubsub_toolkit.producer.sink import PubSubSink
from pubsub_toolkit.stores.counters.redis import RedisSequenceCounter
from pubsub_toolkit_local import emulators
from pubsub_toolkit_local.processes import ServiceGroup, free_port

PAYLOAD = b"x" * 200
# What the Redis counter records as a group's epoch (the server's time in microseconds): the
# raw side's messages carry one too, so both sides send the same attributes.
EPOCH = "1764892800000000"
GROUPS = 8
THREADS = (1, 8)
WAIT = 120.0  # seconds: a future not settled by then fails the run

# (threads, one message i) -> the future of its publish; the bench waits for all of them.
Publish = Callable[[int], Any]


@contextmanager
def servers() -> Iterator[str]:
    """The Pub/Sub emulator (its host exported) and a redis-server; the Redis URL."""
    work = Path(tempfile.mkdtemp(prefix="pubsub-toolkit-bench-publisher-"))
    with ServiceGroup(work) as group:
        pubsub, redis = free_port(), free_port()
        group.start(emulators.pubsub_emulator(pubsub, work))
        group.start(emulators.redis_server(redis))
        os.environ["PUBSUB_EMULATOR_HOST"] = f"127.0.0.1:{pubsub}"
        yield f"redis://127.0.0.1:{redis}/0"


def client(*, ordered: bool) -> pubsub_v1.PublisherClient:
    """google-cloud-pubsub's publisher with its default batching (ordering on for FIFO)."""
    options = pubsub_v1.types.PublisherOptions(enable_message_ordering=ordered)
    return pubsub_v1.PublisherClient(publisher_options=options)


def new_topic(admin: pubsub_v1.PublisherClient, project: str) -> str:
    topic = f"projects/{project}/topics/t-{uuid.uuid4().hex[:8]}"
    admin.create_topic(name=topic)
    return topic


def variants(
    admin: pubsub_v1.PublisherClient, redis_url: str, mode: str
) -> tuple[dict[str, Publish], Callable[[], None]]:
    """``raw`` and ``publisher`` for ``mode``, each on its own client and topic; and a call
    that stops both clients (so no idle client of one comparison runs during the next)."""
    project = f"bench-{uuid.uuid4().hex[:8]}"
    ordered = mode == "fifo"
    raw_client, raw_topic = client(ordered=ordered), new_topic(admin, project)
    sink = PubSubSink(client(ordered=ordered))
    counter = RedisSequenceCounter.from_url(redis_url, prefix=f"bench-{project}:")
    publisher = Publisher(sink, new_topic(admin, project), counter)

    def stop() -> None:
        raw_client.stop()
        sink.close()

    if not ordered:
        return {
            "raw": lambda i: raw_client.publish(raw_topic, PAYLOAD),
            "publisher": lambda i: publisher.publish(PAYLOAD),
        }, stop
    seq = [0] * GROUPS
    lock = threading.Lock()

    def raw_fifo(i: int) -> Any:
        group = f"g{i % GROUPS}"
        with lock:  # the raw side numbers its messages too (in-process, the cheapest way)
            seq[i % GROUPS] += 1
            number = str(seq[i % GROUPS])
        return raw_client.publish(
            raw_topic,
            PAYLOAD,
            ordering_key=group,
            fifo_group=group,
            fifo_seq=number,
            fifo_epoch=EPOCH,
        )

    return {
        "raw": raw_fifo,
        "publisher": lambda i: publisher.publish(PAYLOAD, fifo_group=f"g{i % GROUPS}"),
    }, stop


def throughput(publish: Publish, messages: int, threads: int) -> float:
    """Messages per second: each thread publishes its share, then waits for its futures."""
    share = messages // threads

    def one_thread(t: int) -> None:
        futures = [publish(t * share + i) for i in range(share)]
        for future in futures:
            future.result(timeout=WAIT)

    return rate(threads, one_thread, threads=threads) * share


def run(messages: int, rounds: int) -> dict[str, object]:
    results: dict[str, object] = {}
    with servers() as redis_url:
        admin = pubsub_v1.PublisherClient()
        for mode in ("unordered", "fifo"):
            for threads in THREADS:
                pair, stop = variants(admin, redis_url, mode)
                for publish in pair.values():  # warm-up: connections, topic, counter script
                    throughput(publish, min(messages, 200), threads)
                samples: dict[str, list[float]] = {name: [] for name in pair}
                for r in range(rounds):
                    order = list(pair) if r % 2 == 0 else list(reversed(pair))
                    for name in order:
                        samples[name].append(throughput(pair[name], messages, threads))
                stop()
                raw, ours = median(samples["raw"]), median(samples["publisher"])
                key = f"{mode}_{threads}_threads"
                results[key] = {
                    "raw_client_msgs_per_s": round(raw, 1),
                    "publisher_msgs_per_s": round(ours, 1),
                    "ratio": round(ours / raw, 3),
                    "rounds": {n: [round(v, 1) for v in s] for n, s in samples.items()},
                }
                print(f"{key:<22} raw {raw:>8.0f}/s  publisher {ours:>8.0f}/s  {ours / raw:.2f}x")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=31)
    args = parser.parse_args()
    results = run(args.messages, args.rounds)
    path = write_result(
        "publisher",
        {
            "messages_per_round": args.messages,
            "payload_bytes": len(PAYLOAD),
            "rounds": args.rounds,
            "fifo_groups": GROUPS,
            "counter": "redis",
            "client_settings": "google-cloud-pubsub defaults (ordering on for fifo), same for both",
            "results": results,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
