"""One contract suite for the FIFO sequence counters, run against every backend on real servers.

memory runs in-process; redis against a real redis-server; firestore (the ``Increment`` counter)
against the official emulator. The transaction baseline used by the benchmark gets a small
correctness check of its own: it is slow on the emulator by design.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

import pytest
from google.cloud import firestore

from pubsub_toolkit.errors import StoreUnavailableError
from pubsub_toolkit.stores.counters.base import SequenceBlock, SequenceCounter
from pubsub_toolkit.stores.counters.firestore import (
    DEFAULT_COLLECTION,
    FirestoreSequenceCounter,
    FirestoreTransactionCounter,
    document_id,
)
from pubsub_toolkit.stores.counters.memory import MemorySequenceCounter
from pubsub_toolkit.stores.counters.redis import RedisSequenceCounter
from pubsub_toolkit_local.processes import free_port

BACKENDS = ("memory", "redis", "firestore")
CounterFactory = Callable[[], SequenceCounter]

THREADS = 4
RESERVES_PER_THREAD = 200


def counter_factory(request: pytest.FixtureRequest, backend: str) -> CounterFactory:
    """A function returning counters of ``backend`` that share one isolated backing store.

    Each call makes a new counter object with its own client (Redis connection, Firestore
    client), as separate publisher processes would have; memory has one shared instance.
    """
    suffix = uuid.uuid4().hex[:12]
    if backend == "memory":
        shared = MemorySequenceCounter()
        return lambda: shared
    if backend == "redis":
        url = request.getfixturevalue("redis_url")
        return lambda: RedisSequenceCounter.from_url(url, prefix=f"test-{suffix}:")
    if backend == "firestore":
        request.getfixturevalue("firestore_emulator")
        project = f"test-{suffix}"
        return lambda: FirestoreSequenceCounter(firestore.Client(project=project))
    raise ValueError(backend)


@pytest.fixture(params=BACKENDS)
def make_counter(request: pytest.FixtureRequest) -> CounterFactory:
    return counter_factory(request, request.param)


def assert_exact_cover(blocks: Iterable[SequenceBlock], group: str) -> int:
    """Assert the blocks cover 1..N exactly once (no number shared, none skipped); return N."""
    blocks = list(blocks)
    assert {b.group for b in blocks} == {group}
    numbers = sorted(n for b in blocks for n in b.numbers())
    assert numbers == list(range(1, len(numbers) + 1))
    return len(numbers)


def test_first_reservation_is_one_and_current_follows(make_counter: CounterFactory) -> None:
    counter = make_counter()
    assert counter.current("g") == 0
    assert counter.reserve("g") == SequenceBlock("g", 1, 1)
    assert counter.current("g") == 1


def test_blocks_are_contiguous_and_monotonic(make_counter: CounterFactory) -> None:
    counter = make_counter()
    sizes = [1, 3, 1, 5, 2, 50]
    blocks = [counter.reserve("orders", size) for size in sizes]
    assert [b.size for b in blocks] == sizes
    for previous, block in itertools.pairwise(blocks):
        assert block.first == previous.last + 1
    assert assert_exact_cover(blocks, "orders") == sum(sizes)
    assert counter.current("orders") == sum(sizes)


def test_groups_are_independent(make_counter: CounterFactory) -> None:
    counter = make_counter()
    counter.reserve("a", 3)
    assert counter.reserve("b") == SequenceBlock("b", 1, 1)
    assert counter.reserve("a") == SequenceBlock("a", 4, 4)
    assert (counter.current("a"), counter.current("b"), counter.current("c")) == (4, 1, 0)


def test_counter_objects_share_the_backing_store(make_counter: CounterFactory) -> None:
    first, second = make_counter(), make_counter()
    assert first.reserve("shared", 2) == SequenceBlock("shared", 1, 2)
    assert second.reserve("shared", 3) == SequenceBlock("shared", 3, 5)
    assert first.current("shared") == 5


ODD_GROUPS = [
    "tenant/42/orders",
    "../..",
    "a b",  # the same as "a_b" or "a/b" to no backend
    "a_b",
    "a/b",
    "ünïcødé-群组-🚀",
    "x" * 900,
    "x" * 899,  # a prefix of the previous one
    "__name__",  # reserved-looking Firestore id
]


def test_any_group_name_has_its_own_counter(make_counter: CounterFactory) -> None:
    counter = make_counter()
    for index, group in enumerate(ODD_GROUPS, start=1):
        assert counter.reserve(group, index) == SequenceBlock(group, 1, index)
    assert [counter.current(g) for g in ODD_GROUPS] == list(range(1, len(ODD_GROUPS) + 1))


@pytest.mark.parametrize(("group", "count"), [("", 1), ("g", 0), ("g", -2), ("g", True)])
def test_invalid_reservations_are_rejected(
    make_counter: CounterFactory, group: str, count: int
) -> None:
    counter = make_counter()
    with pytest.raises(ValueError):
        counter.reserve(group, count)
    assert counter.current("g") == 0


def _reserve_concurrently(counters: list[SequenceCounter], group: str) -> list[SequenceBlock]:
    """THREADS threads each reserve RESERVES_PER_THREAD blocks of 1..5 at once on ``group``."""
    barrier = threading.Barrier(len(counters))

    def worker(index: int) -> list[SequenceBlock]:
        sizes = random.Random(index).choices(range(1, 6), k=RESERVES_PER_THREAD)
        barrier.wait(timeout=30)  # start together so the reservations really collide
        blocks = [counters[index].reserve(group, size) for size in sizes]
        # One caller's blocks come in increasing order.
        assert all(b.first > a.last for a, b in itertools.pairwise(blocks))
        assert [b.size for b in blocks] == sizes
        return blocks

    with ThreadPoolExecutor(len(counters)) as pool:
        per_thread = list(pool.map(worker, range(len(counters))))
    return [block for blocks in per_thread for block in blocks]


def test_concurrent_publishers_never_share_or_skip(make_counter: CounterFactory) -> None:
    counters = [make_counter() for _ in range(THREADS)]  # one per "publisher process"
    blocks = _reserve_concurrently(counters, "hot")
    total = assert_exact_cover(blocks, "hot")
    assert len(blocks) == THREADS * RESERVES_PER_THREAD
    assert counters[0].current("hot") == total


def test_threads_sharing_one_counter_never_share_or_skip(make_counter: CounterFactory) -> None:
    # One object for all threads: the Redis/Firestore counters coalesce these into shared
    # round trips and split the ranges, which must still be exact.
    counter = make_counter()
    blocks = _reserve_concurrently([counter] * THREADS, "hot-shared")
    assert counter.current("hot-shared") == assert_exact_cover(blocks, "hot-shared")


def test_redis_fails_closed_when_unreachable() -> None:
    counter = RedisSequenceCounter.from_url(f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(StoreUnavailableError):
        counter.reserve("g")
    with pytest.raises(StoreUnavailableError):
        counter.current("g")


def test_firestore_fails_closed_when_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{free_port()}")
    counter = FirestoreSequenceCounter(firestore.Client(project="unreachable"), timeout=1)
    start = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        counter.reserve("g")
    with pytest.raises(StoreUnavailableError):
        counter.current("g")
    # Bounded by the counter's timeout, not the client's default 60-300 s retry deadline.
    assert time.monotonic() - start < 10


def test_firestore_increment_result_is_the_new_value(firestore_emulator: str, unique: str) -> None:
    # The counter relies on this: a merge-set with Increment returns the new value in the
    # commit's write result, with no read.
    client = firestore.Client(project=f"test-{unique}")
    ref = client.collection("probe").document("d")
    values = []
    for step in (1, 5):
        batch = client.batch()
        batch.set(ref, {"n": firestore.Increment(step)}, merge=True)
        [result] = batch.commit(timeout=10)
        values.append(result.transform_results[0].integer_value)
    assert values == [1, 6]


def test_firestore_document_layout(firestore_emulator: str, unique: str) -> None:
    client = firestore.Client(project=f"test-{unique}")
    counter = FirestoreSequenceCounter(client, collection="custom_counters")
    group = "tenant/7 ünïcødé"
    counter.reserve(group, 4)
    snapshot = client.collection("custom_counters").document(document_id(group)).get()
    assert snapshot.to_dict() == {"group": group, "last": 4}
    assert not client.collection(DEFAULT_COLLECTION).document(document_id(group)).get().exists


def test_transaction_baseline_is_correct(firestore_emulator: str, unique: str) -> None:
    client = firestore.Client(project=f"test-{unique}")
    baseline = FirestoreTransactionCounter(client)
    assert baseline.current("g") == 0
    assert baseline.reserve("g") == SequenceBlock("g", 1, 1)
    assert baseline.reserve("g", 3) == SequenceBlock("g", 2, 4)
    # Same document layout as the Increment counter, so they continue each other's numbers.
    assert FirestoreSequenceCounter(client).reserve("g", 2) == SequenceBlock("g", 5, 6)
    assert baseline.reserve("g") == SequenceBlock("g", 7, 7)
    assert baseline.current("g") == 7


def test_transaction_baseline_under_contention(firestore_emulator: str, unique: str) -> None:
    # Tiny on purpose: colliding transactions take about 2 s each on the emulator.
    project = f"test-{unique}"
    counters: list[SequenceCounter] = [
        FirestoreTransactionCounter(firestore.Client(project=project)) for _ in range(2)
    ]
    barrier = threading.Barrier(2)

    def worker(index: int) -> list[SequenceBlock]:
        barrier.wait(timeout=30)
        return [counters[index].reserve("contended") for _ in range(3)]

    with ThreadPoolExecutor(2) as pool:
        blocks = [b for blocks in pool.map(worker, range(2)) for b in blocks]
    assert assert_exact_cover(blocks, "contended") == 6
