"""bench/peer: the dedup store against the PyPI peer ``gcp-pubsub-idempotency``, in one run.

Why: issue 15 item 4 asks that the Redis claim -> complete be ahead of the peer and close to the
floor (two bare round trips), and that Firestore be well ahead of the peer's. Figures from
different days prove nothing on these shared machines; only variants measured side by side on
the same servers in the same run compare, so every figure here comes from one run.

What it does (``python -m bench.peer`` or ``make bench-peer``):

* Installs ``gcp-pubsub-idempotency==0.1.0`` (and ``google-cloud-datastore``, which its
  Datastore backend needs) with ``pip install --target .tools/peer-pkgs --no-deps``: the bench's
  own directory, appended to ``sys.path`` after the project's environment (whose redis-py and
  google-api-core both use). Never a project dependency.
* Starts its own servers with ``bench.common.local_servers()`` (Pub/Sub and Firestore emulators,
  redis-server; loopback only), plus one more Firestore emulator in Datastore mode for the
  peer's ``DatastoreLock`` (the peer speaks the Datastore API; same emulator jar).
* A warm-up round (``--warmup-rounds``; reported apart, not in the medians: the emulators'
  JVMs are still compiling), then ``--rounds`` rounds (default 9). Each round measures, per
  metric, every variant once, the order alternating round by round
  (A B C, then C B A, ...) so that no variant always runs first:

  - ``redis_1t`` / ``redis_8t``: claim -> complete of distinct keys per second on 1 and 8
    threads (each thread loops over its share of the keys): the project (``RedisDedupStore``),
    the peer (``RedisLock.claim`` then ``.complete``), and the floor: bare ``SET k v NX PX
    ttl`` then ``SET k v XX PX ttl`` with redis-py (values the size of the project's record).
  - ``firestore_1t`` / ``firestore_8t``: the project (``FirestoreDedupStore``) and the peer
    (``DatastoreLock``).
  - ``redis_race_ms``: 8 threads claim one fresh key at once (a barrier releases them); wall
    time until all 8 have their answer, mean over the races of the round. Exactly one winner
    is checked every race.

* Then, with the clients' send paths wrapped (``bench.compare_workloads.StoreCounter`` for
  redis-py and Firestore, a wrapper of the Datastore client's RPCs here), it counts per cycle
  on 1 thread:
  Redis round trips and commands by name, Firestore/Datastore RPCs; and per race: Redis round
  trips. These do not depend on the machine's speed.

JSON goes to ``bench/results/peer.json``: per-round figures, medians, and per metric the median
of the per-round ratios project / peer and project / floor (for the race: peer wall / project
wall, so above 1 means the project is faster), with their min-max spread.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.common import local_servers, median, write_result

REPO = Path(__file__).resolve().parents[1]
PEER = "gcp-pubsub-idempotency==0.1.0"
PEER_DIR = REPO / ".tools" / "peer-pkgs"
LEASE, TTL = timedelta(seconds=60), timedelta(hours=1)
THREADS = 8
VALUE = "v" * 190  # about the size of the project's pending / done record
PIP_INSTALL = (sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target")
DATASTORE_RPCS = ("lookup", "begin_transaction", "commit", "rollback", "run_query")


def install_peer() -> None:
    """Install the peer (and its Datastore driver) into the bench's own directory, once."""
    if not (PEER_DIR / "gcp_pubsub_idempotency").is_dir():
        print(f"installing {PEER} into {PEER_DIR}")
        subprocess.run(
            [*PIP_INSTALL, str(PEER_DIR), PEER, "google-cloud-datastore"],
            check=True,
        )
    if str(PEER_DIR) not in sys.path:
        sys.path.append(str(PEER_DIR))  # after the venv: its redis-py and api-core win


@contextmanager
def datastore_emulator(work: Path) -> Iterator[str]:
    """A second Firestore emulator, in Datastore mode, for the peer; stopped on exit."""
    from pubsub_toolkit_local import emulators
    from pubsub_toolkit_local.processes import ServiceGroup, free_port

    port = free_port()
    spec = emulators.firestore_emulator(port, work)
    spec = replace(
        spec, name="datastore-emulator", argv=(*spec.argv, "--database-mode=datastore-mode")
    )
    with ServiceGroup(work) as group:
        group.start(spec)
        yield f"127.0.0.1:{port}"


def rate(items: int, work: Callable[[int], object], *, threads: int) -> float:
    """Cycles per second of ``work(i)`` for ``items`` items on ``threads`` threads.

    Each thread runs its own share of the items in a loop, as a worker would: unlike
    ``bench.common.rate``'s thread pool, no Future and no queue hand-off per item, whose
    client CPU (the same for every variant) would dilute the ratios between them.
    """
    if threads == 1:
        start = time.perf_counter()
        for i in range(items):
            work(i)
        return items / (time.perf_counter() - start)
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def worker(first: int) -> None:
        barrier.wait()
        try:
            for i in range(first, items, threads):
                work(i)
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return items / elapsed


# --------------------------------------------------------------------------------------------
# The cycles: one claim -> complete of a fresh key per call, per variant.
# --------------------------------------------------------------------------------------------

Cycle = Callable[[int], object]


def project_redis(url: str) -> tuple[Cycle, Callable[[str], bool]]:
    from pubsub_toolkit.stores.dedup.redis import RedisDedupStore

    store = RedisDedupStore.from_url(url, prefix=f"bench-peer-{uuid.uuid4().hex[:8]}:")
    run = uuid.uuid4().hex[:8]

    def cycle(i: int) -> None:
        claim = store.claim("bench", f"{run}-{i}", "fp", lease=LEASE, ttl=TTL)
        store.complete("bench", f"{run}-{i}", claim, "ok", ttl=TTL)

    def claim_once(key: str) -> bool:
        return store.claim("race", key, "fp", lease=LEASE, ttl=TTL).owns_key

    return cycle, claim_once


def peer_redis(url: str) -> tuple[Cycle, Callable[[str], bool]]:
    import redis
    from gcp_pubsub_idempotency import RedisLock, Won

    client = redis.Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)
    lock = RedisLock(client, ttl=TTL, prefix=f"bench-peer-{uuid.uuid4().hex[:8]}")
    run = uuid.uuid4().hex[:8]

    def cycle(i: int) -> None:
        won = lock.claim(f"{run}-{i}", LEASE)
        assert isinstance(won, Won)
        lock.complete(won.claim)

    def claim_once(key: str) -> bool:
        return isinstance(lock.claim(key, LEASE), Won)

    return cycle, claim_once


def floor_redis(url: str) -> Cycle:
    import redis

    client = redis.Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0)
    run = uuid.uuid4().hex[:8]
    ttl_ms = int(TTL.total_seconds() * 1000)

    def cycle(i: int) -> None:
        key = f"bench-floor:{run}-{i}"
        client.set(key, VALUE, nx=True, px=ttl_ms)
        client.set(key, VALUE, xx=True, px=ttl_ms)

    return cycle


def project_firestore() -> Cycle:
    from google.cloud import firestore

    from pubsub_toolkit.stores.dedup.firestore import FirestoreDedupStore

    store = FirestoreDedupStore(firestore.Client(project=f"bench-{uuid.uuid4().hex[:8]}"))

    def cycle(i: int) -> None:
        claim = store.claim("bench", f"k{i}", "fp", lease=LEASE, ttl=TTL)
        store.complete("bench", f"k{i}", claim, "ok", ttl=TTL)

    return cycle


def peer_firestore(datastore_host: str) -> Cycle:
    from gcp_pubsub_idempotency import DatastoreLock, Won
    from google.cloud import datastore

    os.environ["DATASTORE_EMULATOR_HOST"] = datastore_host
    project = f"bench-{uuid.uuid4().hex[:8]}"
    lock = DatastoreLock(client=datastore.Client(project=project), ttl=TTL)

    def cycle(i: int) -> None:
        won = lock.claim(f"k{i}", LEASE)
        assert isinstance(won, Won)
        lock.complete(won.claim)

    return cycle


class Racers:
    """``threads`` threads that claim one key at once, again and again."""

    def __init__(self, threads: int) -> None:
        self._threads = threads
        self._start = threading.Barrier(threads + 1)
        self._end = threading.Barrier(threads + 1)
        self._claim: Callable[[str], bool] = lambda key: False
        self._key = ""
        self._wins: list[bool] = []
        self._lock = threading.Lock()
        self._stop = False
        self._workers = [threading.Thread(target=self._work, daemon=True) for _ in range(threads)]
        for worker in self._workers:
            worker.start()

    def _work(self) -> None:
        while True:
            self._start.wait()
            if self._stop:
                return
            won = self._claim(self._key)
            with self._lock:
                self._wins.append(won)
            self._end.wait()

    def race(self, claim: Callable[[str], bool], key: str) -> float:
        """Seconds from the release of all threads until the last has its answer."""
        self._claim, self._key, self._wins = claim, key, []
        self._start.wait()
        started = time.perf_counter()
        self._end.wait()
        elapsed = time.perf_counter() - started
        if sum(self._wins) != 1:
            raise AssertionError(f"{sum(self._wins)} winners in a race for {key}")
        return elapsed

    def close(self) -> None:
        self._stop = True
        self._start.wait()
        for worker in self._workers:
            worker.join()


# --------------------------------------------------------------------------------------------
# Counting what each cycle sends.
# --------------------------------------------------------------------------------------------


def install_datastore_counter(counter: Any) -> None:
    """Count the peer's Datastore RPCs (the gapic client's methods), like StoreCounter does
    for Firestore."""
    from google.cloud.datastore_v1.services.datastore.client import DatastoreClient

    for rpc in DATASTORE_RPCS:
        original = getattr(DatastoreClient, rpc)

        def counted(
            client: Any, *args: Any, _rpc: str = rpc, _orig: Any = original, **kw: Any
        ) -> Any:
            counter.add(**{"datastore_rpcs": 1, f"datastore_rpc.{_rpc}": 1})
            return _orig(client, *args, **kw)

        setattr(DatastoreClient, rpc, counted)


def counts_per(counter: Any, work: Callable[[], object], items: int) -> dict[str, float]:
    before = counter.snapshot()
    work()
    delta: Counter[str] = counter.snapshot() - before
    return {name: round(value / items, 3) for name, value in sorted(delta.items())}


def measure_counts(
    variants: dict[str, dict[str, Cycle]],
    racers: dict[str, Callable[[str], bool]],
    race_threads: Racers,
    items: int,
) -> dict[str, dict[str, dict[str, float]]]:
    from bench.compare_workloads import StoreCounter

    counter = StoreCounter()
    counter.install()
    install_datastore_counter(counter)
    counts: dict[str, dict[str, dict[str, float]]] = {}
    for backend, by_variant in variants.items():
        counts[f"{backend}_per_cycle_1t"] = {}
        for variant, cycle in by_variant.items():
            offset = 10_000_000  # keys no timed run used

            def work(cycle: Cycle = cycle, offset: int = offset) -> None:
                for i in range(items):
                    cycle(offset + i)

            counts[f"{backend}_per_cycle_1t"][variant] = counts_per(counter, work, items)
    counts["redis_per_race_8t"] = {}
    races = 20
    for variant, claim in racers.items():

        def race_all(claim: Callable[[str], bool] = claim, variant: str = variant) -> None:
            for n in range(races):
                race_threads.race(claim, f"count-{variant}-{n}")

        counts["redis_per_race_8t"][variant] = counts_per(counter, race_all, races)
    return counts


# --------------------------------------------------------------------------------------------
# The rounds.
# --------------------------------------------------------------------------------------------


def ratio_summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument(
        "--warmup-rounds",
        type=int,
        default=1,
        help="full rounds run first and reported apart, not in the medians (the emulators' JIT)",
    )
    parser.add_argument("--redis-items", type=int, default=6000, help="cycles per Redis run")
    parser.add_argument("--firestore-items", type=int, default=400, help="cycles per run")
    parser.add_argument("--races", type=int, default=100, help="same-key races per round")
    parser.add_argument("--count-items", type=int, default=200)
    args = parser.parse_args()
    install_peer()
    work = Path(tempfile.mkdtemp(prefix="pubsub-toolkit-bench-peer-"))
    with local_servers() as servers, datastore_emulator(work) as datastore_host:
        redis_variants = {
            "project": project_redis(servers.redis_url),
            "peer": peer_redis(servers.redis_url),
        }
        redis_cycles: dict[str, Cycle] = {v: pair[0] for v, pair in redis_variants.items()}
        redis_cycles["floor"] = floor_redis(servers.redis_url)
        firestore_cycles: dict[str, Cycle] = {
            "project": project_firestore(),
            "peer": peer_firestore(datastore_host),
        }
        racers = {v: pair[1] for v, pair in redis_variants.items()}
        race_threads = Racers(THREADS)
        metrics: dict[str, tuple[dict[str, Cycle], int, int]] = {
            "redis_1t": (redis_cycles, 1, args.redis_items),
            "redis_8t": (redis_cycles, THREADS, args.redis_items * 2),
            "firestore_1t": (firestore_cycles, 1, args.firestore_items),
            "firestore_8t": (firestore_cycles, THREADS, args.firestore_items * 2),
        }
        # Warm every variant (connections, scripts, gRPC channels) outside the timed rounds.
        for cycles in (redis_cycles, firestore_cycles):
            for cycle in cycles.values():
                for i in range(20):
                    cycle(20_000_000 + i)
        offset = 0
        samples: dict[str, dict[str, list[float]]] = {
            m: {v: [] for v in cycles} for m, (cycles, _, _) in metrics.items()
        }
        samples["redis_race_ms"] = {v: [] for v in racers}
        total_rounds = args.warmup_rounds + args.rounds
        for round_no in range(total_rounds):
            for metric, (cycles, threads, items) in metrics.items():
                order = list(cycles)
                if round_no % 2:
                    order.reverse()  # ABC, CBA, ABC, ...: no variant always runs first
                for variant in order:
                    cycle = cycles[variant]
                    base = offset

                    def one(i: int, cycle: Cycle = cycle, base: int = base) -> None:
                        cycle(base + i)

                    samples[metric][variant].append(round(rate(items, one, threads=threads), 1))
                    offset += items
            order = list(racers)
            if round_no % 2:
                order.reverse()
            for variant in order:
                walls = [
                    race_threads.race(racers[variant], f"r{round_no}-{n}")
                    for n in range(args.races)
                ]
                samples["redis_race_ms"][variant].append(round(1000 * sum(walls) / len(walls), 3))
            print(
                f"round {round_no + 1}/{total_rounds}"
                + (" (warm-up)" if round_no < args.warmup_rounds else "")
                + ": "
                + "; ".join(
                    f"{m} " + " ".join(f"{v} {s[-1]:g}" for v, s in by_v.items())
                    for m, by_v in samples.items()
                ),
                flush=True,
            )
        counts = measure_counts(
            {"redis": redis_cycles, "firestore": firestore_cycles},
            racers,
            race_threads,
            args.count_items,
        )
        race_threads.close()

    warmup = {
        m: {v: s[: args.warmup_rounds] for v, s in by_v.items()} for m, by_v in samples.items()
    }
    samples = {
        m: {v: s[args.warmup_rounds :] for v, s in by_v.items()} for m, by_v in samples.items()
    }

    medians = {m: {v: median(s) for v, s in by_v.items()} for m, by_v in samples.items()}
    ratios: dict[str, dict[str, dict[str, float]]] = {}
    for metric, by_variant in samples.items():
        project = by_variant["project"]
        if metric == "redis_race_ms":  # a wall time: peer / project, above 1 = project faster
            per_round = [p / q for p, q in zip(by_variant["peer"], project, strict=True)]
            ratios[metric] = {"peer_wall_over_project_wall": ratio_summary(per_round)}
            continue
        ratios[metric] = {
            "project_over_peer": ratio_summary(
                [p / q for p, q in zip(project, by_variant["peer"], strict=True)]
            )
        }
        if "floor" in by_variant:
            ratios[metric]["project_over_floor"] = ratio_summary(
                [p / q for p, q in zip(project, by_variant["floor"], strict=True)]
            )
            ratios[metric]["peer_over_floor"] = ratio_summary(
                [p / q for p, q in zip(by_variant["peer"], by_variant["floor"], strict=True)]
            )
    payload: dict[str, object] = {
        "peer": PEER,
        "rounds": args.rounds,
        "warmup_rounds": args.warmup_rounds,
        "threads": THREADS,
        "items": {
            "redis_1t": args.redis_items,
            "redis_8t": args.redis_items * 2,
            "firestore_1t": args.firestore_items,
            "firestore_8t": args.firestore_items * 2,
            "races_per_round": args.races,
        },
        "units": {
            "redis_1t": "cycles/s",
            "redis_8t": "cycles/s",
            "firestore_1t": "cycles/s",
            "firestore_8t": "cycles/s",
            "redis_race_ms": "ms per 8-way race (wall)",
        },
        "per_round": samples,
        "warmup_per_round": warmup,
        "median": medians,
        "ratios": ratios,
        "targets": {
            "redis_1t.project_over_floor": 0.95,
            "redis_8t.project_over_peer": 1.5,
            "redis_race_ms.peer_wall_over_project_wall": 1.0,
            "firestore_1t.project_over_peer": 3.0,
        },
        "counts": counts,
    }
    path = write_result("peer", payload)
    for metric, by_ratio in ratios.items():
        print(metric, {name: summary["median"] for name, summary in by_ratio.items()})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
