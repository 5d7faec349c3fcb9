"""bench/delay: how late delayed messages arrive, and how fast ingress can schedule them.

Run with ``make bench`` (or ``python -m bench.delay``); it starts the whole local stack.

* **lateness**: ``N`` messages published to origin with ``delay_seconds`` spread over 1-10 s go
  through ingress -> Cloud Tasks emulator -> relay (gunicorn) -> final; a streaming-pull
  subscriber records when each arrives. Lateness = arrival - ``deliver_at`` (which ingress
  stamps on receipt). Reported as p50/p99/max, plus the count that arrived early (must be 0).
* **scheduling**: ``CloudTasksScheduler.schedule`` on 8 threads against the emulator, as a
  ratio to plain publishes of the same messages to Pub/Sub (the pass-through) in the same run.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from bench.common import median, rate, write_result
from pubsub_toolkit import attributes as attr
from pubsub_toolkit.delay.scheduler import CloudTasksScheduler, HttpTarget, tasks_client
from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit.producer.sink import PubSubSink
from pubsub_toolkit_local.stack import LocalStack, StackOptions

REPO = Path(__file__).resolve().parent.parent


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def bench_lateness(stack: LocalStack, count: int) -> dict[str, object]:
    assert stack.topology is not None
    topo = stack.topology
    arrivals: dict[str, tuple[float, str]] = {}
    done = threading.Event()
    lock = threading.Lock()

    def on_message(message: pubsub_v1.subscriber.message.Message) -> None:
        arrived = time.time()
        with lock:
            arrivals.setdefault(
                message.attributes["dedup_key"], (arrived, message.attributes["deliver_at"])
            )
            if len(arrivals) >= count:
                done.set()
        message.ack()

    subscriber = pubsub_v1.SubscriberClient()
    streaming = subscriber.subscribe(topo.final_sub, on_message)
    publisher = pubsub_v1.PublisherClient()
    rng = random.Random(1)
    started = time.monotonic()
    futures = [
        publisher.publish(
            topo.origin,
            b"delayed",
            dedup_key=f"late-{i}",
            delay_seconds=f"{rng.uniform(1, 10):.3f}",
        )
        for i in range(count)
    ]
    for future in futures:
        future.result(timeout=60)
    finished = done.wait(timeout=120)
    wall = time.monotonic() - started
    streaming.cancel()
    subscriber.close()
    lateness_ms = [
        (arrived - attr.parse_time(due).timestamp()) * 1000 for arrived, due in arrivals.values()
    ]
    early = sum(1 for v in lateness_ms if v < 0)
    result = {
        "messages": count,
        "arrived": len(arrivals),
        "complete": finished,
        "wall_s": round(wall, 2),
        "lateness_ms": {
            "p50": round(percentile(lateness_ms, 50), 1),
            "p99": round(percentile(lateness_ms, 99), 1),
            "max": round(max(lateness_ms), 1),
            "mean": round(statistics.fmean(lateness_ms), 1),
        },
        "early": early,
        "target": {"p99_ms": 250, "early": 0},
    }
    print(
        f"lateness over {len(arrivals)}/{count} messages: {result['lateness_ms']}, early: {early}"
    )
    return result


def bench_scheduling(stack: LocalStack, count: int, rounds: int) -> dict[str, object]:
    client = tasks_client(stack.env["CLOUD_TASKS_EMULATOR_HOST"])
    parent = stack.queue.rsplit("/queues/", 1)[0]
    from google.cloud import tasks_v2

    queue = f"{parent}/queues/bench-paused"
    client.create_queue(parent=parent, queue=tasks_v2.Queue(name=queue))
    client.pause_queue(name=queue)  # measure scheduling only; nothing is dispatched
    scheduler = CloudTasksScheduler(
        client, queue=queue, target=HttpTarget("http://127.0.0.1:9/release", "inv@x", "aud")
    )
    assert stack.topology is not None
    final = stack.topology.final
    sink = PubSubSink()
    due = datetime.now(UTC) + timedelta(days=1)
    message = OutboundMessage(b"x" * 256, {"k": "v"})
    samples: dict[str, list[float]] = {"schedule": [], "publish": []}
    for r in range(rounds):
        samples["schedule"].append(
            rate(count, lambda i, r=r: scheduler.schedule(message, due, f"s{r}-{i}"), threads=8)
        )
        samples["publish"].append(rate(count, lambda i: sink.publish(final, message), threads=8))
        print(
            f"round {r + 1}: schedule {samples['schedule'][-1]:.0f}/s, "
            f"publish {samples['publish'][-1]:.0f}/s"
        )
    sink.close()
    scheduled, published = median(samples["schedule"]), median(samples["publish"])
    return {
        "threads": 8,
        "tasks_per_round": count,
        "rounds": rounds,
        "schedule_per_s": round(scheduled, 1),
        "publish_per_s": round(published, 1),
        "ratio_schedule_to_publish": round(scheduled / published, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=600)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pubsub-toolkit-bench-delay-"))
    with LocalStack(StackOptions(project="bench-delay"), work, REPO) as stack:
        lateness = bench_lateness(stack, args.messages)
        scheduling = bench_scheduling(stack, args.tasks, args.rounds)
    path = write_result("delay", {"lateness": lateness, "scheduling": scheduling})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
