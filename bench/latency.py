"""bench/latency: the immediate path's latency, origin -> ingress -> final vs a direct publish.

Run with ``make bench-latency`` (or ``python -m bench.latency [--rounds N] [--messages M]``).
It starts the local stack the way ``pubsub-toolkit local up`` does (Pub/Sub and Firestore
emulators, Redis for ``--backend redis``, ingress under functions-framework behind the
emulator's push subscription, the Cloud Tasks emulator and the relay), opens one streaming-pull
subscriber on a subscription of the final topic, and measures per message the time from the
publish call to the subscriber's callback, one message at a time (latency, not throughput):

* ``origin``: publish to the origin topic; the push subscription hands it to ingress, which
  validates, claims the dedup key, republishes to the final topic and completes the claim;
* ``direct``: publish straight to the final topic - the floor the pipeline is compared with;
* ``push_bypassed`` (informative, not part of the target): the benchmark POSTs the same push
  body the emulator would straight to ingress and waits for the copy on the final topic. It
  shows the path without the emulator's push loop, which polls an idle subscription every
  100 ms (``PushLoop`` in the 0.8.20 jar; real Pub/Sub pushes as messages arrive), and it also
  records ingress's own HTTP service time (``ingress_http_ms``).

Both variants use the same publisher client (google-cloud-pubsub's defaults, as a user's
code has) and the same subscriber, so what differs is exactly the ingress hop. Rounds
alternate the variants (odd rounds start with the other one), and the result reports p50/p99
of each variant over all rounds, the ratios, and the same per round. It writes
``bench/results/latency.json``. Everything it started is stopped by process group on exit.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from bench.common import stop_on_sigterm, write_result
from bench.delay import percentile
from pubsub_toolkit_local.stack import LocalStack, StackOptions

REPO = Path(__file__).resolve().parent.parent
VARIANTS = ("direct", "origin")
BYPASS = "push_bypassed"
PROBE = "latency_probe"  # the attribute that names each probe message


class Receiver:
    """A streaming-pull subscriber that timestamps each probe's arrival and wakes its waiter."""

    def __init__(self, subscription: str) -> None:
        self._arrived: dict[str, float] = {}
        self._cond = threading.Condition()
        self._client = pubsub_v1.SubscriberClient()
        # One message at a time: nothing queues behind the probe being timed.
        self._future = self._client.subscribe(
            subscription,
            self._on_message,
            flow_control=pubsub_v1.types.FlowControl(max_messages=10),
        )

    def _on_message(self, message: Any) -> None:
        now = time.perf_counter()
        message.ack()
        probe = message.attributes.get(PROBE)
        if probe is None:
            return
        with self._cond:
            # The first arrival counts: a redelivered copy must not move the timestamp.
            self._arrived.setdefault(probe, now)
            self._cond.notify_all()

    def wait(self, probe: str, timeout: float) -> float | None:
        """The arrival time of ``probe``, or None when it did not arrive within ``timeout``."""
        with self._cond:
            self._cond.wait_for(lambda: probe in self._arrived, timeout=timeout)
            return self._arrived.pop(probe, None)

    def close(self) -> None:
        self._future.cancel()
        self._client.close()


def measure(
    publisher: pubsub_v1.PublisherClient,
    receiver: Receiver,
    topic: str,
    count: int,
    *,
    timeout: float,
) -> tuple[list[float], int]:
    """Publish ``count`` probes to ``topic`` one after the other; their latencies in ms and
    how many never arrived."""
    latencies: list[float] = []
    lost = 0
    for _ in range(count):
        probe = uuid.uuid4().hex
        start = time.perf_counter()
        publisher.publish(topic, b"latency probe", **{PROBE: probe}).result(timeout=30)
        arrived = receiver.wait(probe, timeout)
        if arrived is None:
            lost += 1
            continue
        latencies.append((arrived - start) * 1000)
    return latencies, lost


def measure_bypass(
    url: str, subscription: str, receiver: Receiver, count: int, *, timeout: float
) -> tuple[list[float], list[float], int]:
    """POST ``count`` push bodies straight to ingress, one after the other; the latencies to
    the final topic, ingress's HTTP service times (both ms), and how many never arrived."""
    latencies: list[float] = []
    service: list[float] = []
    lost = 0
    for _ in range(count):
        probe = uuid.uuid4().hex
        # Its own dedup key: the emulator's message ids are small integers this must not reuse.
        attributes = {PROBE: probe, "dedup_key": f"bypass-{probe}"}
        body = json.dumps(
            {
                "message": {
                    "data": base64.b64encode(b"latency probe").decode(),
                    "attributes": attributes,
                    "messageId": f"bypass-{probe}",
                    "publishTime": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                },
                "subscription": subscription,
            }
        ).encode()
        request = urllib.request.Request(
            url, data=body, headers={"Content-Type": "application/json"}
        )
        start = time.perf_counter()
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
        answered = time.perf_counter()
        arrived = receiver.wait(probe, timeout)
        service.append((answered - start) * 1000)
        if arrived is None:
            lost += 1
            continue
        latencies.append((arrived - start) * 1000)
    return latencies, service, lost


def stats(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"messages": 0, "p50_ms": None, "p99_ms": None, "mean_ms": None, "max_ms": None}
    return {
        "messages": len(values),
        "p50_ms": round(percentile(values, 50), 1),
        "p99_ms": round(percentile(values, 99), 1),
        "mean_ms": round(statistics.fmean(values), 1),
        "max_ms": round(max(values), 1),
    }


def histogram(values: list[float], tick: float = 50.0) -> dict[str, int]:
    """How many latencies lie nearest each multiple of ``tick`` ms. The emulator hands a
    streaming pull its messages every 50 ms and polls an idle push subscription every 100 ms,
    so the latencies are a few sharp peaks at those multiples, which p50/p99 alone hide."""
    counts: dict[int, int] = {}
    for value in values:
        nearest = round(value / tick) * int(tick)
        counts[nearest] = counts.get(nearest, 0) + 1
    return {f"~{ms}": counts[ms] for ms in sorted(counts)}


def ratios(origin: dict[str, Any], direct: dict[str, Any]) -> dict[str, float | None]:
    def ratio(key: str) -> float | None:
        if origin[key] is None or not direct[key]:
            return None
        return round(origin[key] / direct[key], 2)

    return {"p50": ratio("p50_ms"), "p99": ratio("p99_ms")}


def run(stack: LocalStack, *, rounds: int, messages: int, warmup: int) -> dict[str, object]:
    """Warm both paths, then alternate the variants round by round."""
    topo = stack.topology
    assert topo is not None
    subscription = f"projects/{topo.project}/subscriptions/final-latency"
    admin = pubsub_v1.SubscriberClient()
    admin.create_subscription(
        name=subscription, topic=topo.final, ack_deadline_seconds=60, timeout=10
    )
    admin.close()
    publisher = pubsub_v1.PublisherClient()
    receiver = Receiver(subscription)
    topics = {"direct": topo.final, "origin": topo.origin}
    push_url = f"http://127.0.0.1:{stack.ports['ingress']}/projects/{topo.project}/topics/origin"
    samples: dict[str, list[float]] = {v: [] for v in (*VARIANTS, BYPASS)}
    service: list[float] = []
    lost = dict.fromkeys((*VARIANTS, BYPASS), 0)
    per_round: list[dict[str, object]] = []
    try:
        for variant in VARIANTS:  # first requests create clients and connections
            measure(publisher, receiver, topics[variant], warmup, timeout=30)
        measure_bypass(push_url, topo.ingress_push_sub, receiver, warmup, timeout=30)
        for index in range(rounds):
            order = VARIANTS if index % 2 == 0 else VARIANTS[::-1]
            row: dict[str, Any] = {"round": index + 1, "order": list(order)}
            for variant in order:
                values, missing = measure(
                    publisher, receiver, topics[variant], messages, timeout=30
                )
                samples[variant].extend(values)
                lost[variant] += missing
                row[variant] = stats(values)
            values, times, missing = measure_bypass(
                push_url, topo.ingress_push_sub, receiver, messages, timeout=30
            )
            samples[BYPASS].extend(values)
            service.extend(times)
            lost[BYPASS] += missing
            row[BYPASS] = stats(values)
            row["ratio"] = ratios(row["origin"], row["direct"])
            per_round.append(row)
            print(
                f"round {index + 1}: direct p50/p99 {row['direct']['p50_ms']}/"
                f"{row['direct']['p99_ms']} ms, origin {row['origin']['p50_ms']}/"
                f"{row['origin']['p99_ms']} ms, ratio {row['ratio']}; push bypassed "
                f"{row[BYPASS]['p50_ms']}/{row[BYPASS]['p99_ms']} ms",
                flush=True,
            )
    finally:
        receiver.close()
        publisher.stop()
    overall = {v: stats(samples[v]) for v in (*VARIANTS, BYPASS)}
    round_ratios = [r["ratio"] for r in per_round]
    return {
        **overall,
        "ratio": ratios(overall["origin"], overall["direct"]),
        "push_bypassed_ratio": ratios(overall[BYPASS], overall["direct"]),
        "ingress_http_ms": stats(service),
        "origin_latency_histogram_ms": histogram(samples["origin"]),
        "direct_latency_histogram_ms": histogram(samples["direct"]),
        "median_round_ratio": {
            q: round(statistics.median(float(r[q]) for r in round_ratios if r[q] is not None), 2)
            for q in ("p50", "p99")
        },
        "lost": lost,
        "rounds": per_round,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds per variant (default 5)")
    parser.add_argument("--messages", type=int, default=300, help="probes per variant per round")
    parser.add_argument("--warmup", type=int, default=20, help="unmeasured probes per variant")
    parser.add_argument("--backend", choices=("firestore", "redis"), default="firestore")
    parser.add_argument("--target", type=float, default=2.0, help="ratio to pass (default 2.0)")
    parser.add_argument("--output", default="latency", help="result name in bench/results")
    args = parser.parse_args(argv)
    stop_on_sigterm()
    work = Path(tempfile.mkdtemp(prefix="pubsub-toolkit-latency-"))
    load_before = [round(v, 2) for v in os.getloadavg()]
    print(f"latency: {args.rounds} rounds x {args.messages} probes per variant; logs: {work}")
    options = StackOptions(project="latency", store_backend=args.backend)
    with LocalStack(options, work, REPO) as stack:
        result = run(stack, rounds=args.rounds, messages=args.messages, warmup=args.warmup)
    ratio = result["ratio"]
    assert isinstance(ratio, dict)
    passed = all(r is not None and r <= args.target for r in ratio.values())
    document: dict[str, object] = {
        "backend": args.backend,
        "rounds_per_variant": args.rounds,
        "messages_per_variant_per_round": args.messages,
        "method": (
            "sequential: one probe published, then wait for its arrival at a streaming-pull "
            "subscriber on the final topic; same default PublisherClient for both variants; "
            "variants alternate per round; p50/p99 over all rounds"
        ),
        "target_ratio": args.target,
        "within_target": passed,
        **result,
        "conditions": {
            "load_average_before": load_before,
            "load_average_after": [round(v, 2) for v in os.getloadavg()],
            "note": "2 shared CPUs; emulators, ingress, relay and the benchmark all run on them",
        },
    }
    path = write_result(args.output, document)
    print(f"wrote {path}")
    print(
        f"direct {result['direct']}\norigin {result['origin']}\nratio {ratio} "
        f"(median per round {result['median_round_ratio']})\n{BYPASS} {result[BYPASS]} "
        f"ratio {result['push_bypassed_ratio']}; ingress HTTP {result['ingress_http_ms']}"
    )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
