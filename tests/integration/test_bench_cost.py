"""bench/cost counts what the library really sends: a short run of three paths on Redis.

The counts come from the wrappers (bench/cost_counting), so these asserts fail if the wrappers
stop seeing the clients' calls (a client upgrade renames a method) or if a path changes how
many messages it publishes - the cost model cannot rot silently.
"""

from __future__ import annotations

import os

import pytest

from bench import cost
from bench.common import Servers
from bench.cost_prices import PRICES, dollars_per_million

pytestmark = pytest.mark.usefixtures("pubsub_emulator", "firestore_emulator")


def test_counts_for_immediate_duplicate_and_dead_lettered_on_redis(redis_url: str) -> None:
    servers = Servers(
        os.environ["PUBSUB_EMULATOR_HOST"], os.environ["FIRESTORE_EMULATOR_HOST"], redis_url
    )
    counter = cost.CostCounter()
    uninstall = cost.install(counter)
    try:
        with cost.Rig(servers, counter, "redis") as rig:
            windows = cost.run_paths(rig, 4, 1, only=("immediate", "duplicate", "dead_lettered"))
    finally:
        uninstall()
    immediate = windows["immediate"].totals
    assert immediate["pubsub.published.origin"] == 1  # the producer's publish
    assert immediate["pubsub.published.final"] == 1  # exactly one copy reaches the final topic
    assert immediate["pubsub.push_deliveries"] == 1
    assert immediate["invocations.ingress"] == 1
    assert immediate["invocations.consumer"] == 1
    assert immediate["pubsub.pulled"] >= 1
    assert immediate["redis_cmd.SET"] >= 1  # the claims are Redis writes ...
    assert immediate.get("firestore.writes", 0) == 0  # ... and nothing goes to Firestore
    assert immediate.get("tasks.create_task", 0) == 0
    duplicate = windows["duplicate"].totals
    assert duplicate.get("pubsub.published.final", 0) == 0  # ingress drops the second copy
    assert duplicate["invocations.ingress"] == 1
    assert duplicate.get("invocations.consumer", 0) == 0
    dead = windows["dead_lettered"].totals
    assert dead["pubsub.published.dead-letter"] == 1
    assert dead.get("pubsub.published.final", 0) == 0
    usd = dollars_per_million(immediate)
    assert usd["invocations"] == pytest.approx(0.40)
    assert usd["pubsub"] > 0 and usd["firestore"] == 0


def test_prices_convert_counts_per_million() -> None:
    per_message = {"firestore.writes": 1.0, "firestore.reads": 2.0, "tasks.billable_operations": 1}
    usd = dollars_per_million(per_message)
    assert usd["firestore"] == pytest.approx(1.8 + 2 * 0.6)
    assert usd["cloud_tasks"] == pytest.approx(0.40)
    # 2000 publish + 2000 push billable bytes per message at $40 per TiB
    usd = dollars_per_million(
        {"pubsub.publish_billable_bytes_unbatched": 2000, "pubsub.push_billable_bytes": 2000}
    )
    assert usd["pubsub"] == pytest.approx(4000 * 1e6 * 40 / 2**40, rel=1e-3)
    assert all(p.source and p.looked_up for p in vars(PRICES).values())
