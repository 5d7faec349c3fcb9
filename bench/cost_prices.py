"""Google Cloud list prices for bench/cost, and the conversion of counts to $ per million messages.

One table (:data:`PRICES`), each figure with the page it comes from and the day it was looked
up. List prices in USD, no free tier, no committed-use discounts, no network egress. Where the
stored copy of Google's page did not show the figure (Firestore's per-location table and Cloud
Run's request price are rendered by script; Memorystore's page is not in the corpus) the
``source`` says where the figure comes from instead. Re-check them before quoting a bill.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

LOOKED_UP = "2026-12-01"
TIB = 2**40


@dataclass(frozen=True)
class Price:
    """One list price: ``usd`` per ``per`` units of ``unit``."""

    usd: float
    per: float
    unit: str
    source: str
    looked_up: str = LOOKED_UP
    note: str = ""

    @property
    def per_unit(self) -> float:
        return self.usd / self.per


@dataclass(frozen=True)
class Prices:
    """The prices bench/cost converts counts with."""

    pubsub_throughput: Price = Price(
        40.0,
        TIB,
        "byte of publish or delivery throughput (min 1000 bytes per request)",
        "https://cloud.google.com/pubsub/pricing",
        note="Message Delivery Basic: $40 per TiB after the first 10 GiB; data + attributes + "
        "20 B timestamp + message_id; a minimum of 1000 bytes per publish, push or pull request; "
        "acks, modacks and admin calls are free",
    )
    firestore_read: Price = Price(
        0.06,
        100_000,
        "document read",
        "https://cloud.google.com/firestore/pricing (archived copy of the page's table, "
        "multi-region nam5/eur3)",
        note="regional locations (e.g. us-central1) are half: $0.03 per 100k (airbyte.com's "
        "Firestore pricing guide); the stored copy of Google's page renders its per-location "
        "table by script",
    )
    firestore_write: Price = Price(
        0.18,
        100_000,
        "document write",
        "https://cloud.google.com/firestore/pricing (archived copy, multi-region)",
        note="regional: $0.09 per 100k",
    )
    firestore_delete: Price = Price(
        0.02,
        100_000,
        "document delete",
        "https://cloud.google.com/firestore/pricing (archived copy, multi-region)",
        note="regional: $0.01 per 100k; TTL deletes are billed as deletes and are not counted "
        "here (they happen a day later, one per expired record)",
    )
    tasks_operation: Price = Price(
        0.40,
        1_000_000,
        "Cloud Tasks billable operation (API call or push delivery attempt, per 32 KB chunk)",
        "https://cloud.google.com/tasks/docs/pricing",
        note="first million per month free; $0.40 per million up to 5 billion",
    )
    invocation: Price = Price(
        0.40,
        1_000_000,
        "function invocation / Cloud Run request",
        "https://cloud.google.com/functions/pricing (1st gen: $0.40 per million beyond 2 "
        "million); Cloud Run request-based billing: $0.40 per million "
        "(cloud.google.com/run/pricing, figure as quoted by cloudwebschool.com)",
        note="the per-request fee only: CPU and memory seconds come on top and depend on the "
        "function's size and speed (not counted here)",
    )
    memorystore_gb_hour: Price = Price(
        0.049,
        1,
        "GB-hour of a Memorystore for Redis Basic instance (M1, 1-4 GB)",
        "not in the stored corpus: Google's Memorystore for Redis pricing page "
        "(cloud.google.com/memorystore/docs/redis/pricing), us-central1 Basic M1, as the author "
        "knows it; Standard tier (a replica) is about twice",
        note="a fixed cost per hour of capacity, whatever the message volume",
    )

    def table(self) -> dict[str, dict[str, object]]:
        """The prices as JSON-ready rows."""
        return {
            name: asdict(price) | {"per_unit_usd": price.per_unit}
            for name, price in asdict_fields(self).items()
        }


def asdict_fields(prices: Prices) -> dict[str, Price]:
    return {name: getattr(prices, name) for name in prices.__dataclass_fields__}


PRICES = Prices()


def dollars_per_million(
    per_message: Mapping[str, float], prices: Prices = PRICES
) -> dict[str, float]:
    """$ per million messages by service, from per-message counts (see bench/cost_counting).

    Pub/Sub: every published and delivered message at ``max(1000 B, its size)``, as if each
    travelled in a request of its own - exact for push deliveries and for the library's
    publishes (it waits for each publish), an upper bound for batched pulls (the measured
    per-request volume is in the raw counts). Invocations: the ingress function and the relay
    (Cloud Run requests); the streaming-pull consumer is a long-running process, not billed
    per message. Redis: nothing per message (Memorystore is billed per GB-hour).
    """
    million = 1_000_000

    def count(name: str) -> float:
        return float(per_message.get(name, 0.0))

    pubsub_bytes = (
        count("pubsub.publish_billable_bytes_unbatched")
        + count("pubsub.push_billable_bytes")
        + count("pubsub.pull_billable_bytes_unbatched")
    )
    out = {
        "pubsub": pubsub_bytes * million * prices.pubsub_throughput.per_unit,
        "firestore": million
        * (
            count("firestore.reads") * prices.firestore_read.per_unit
            + count("firestore.writes") * prices.firestore_write.per_unit
            + count("firestore.deletes") * prices.firestore_delete.per_unit
        ),
        "cloud_tasks": million
        * (count("tasks.billable_operations") + count("tasks.dispatch_attempts"))
        * prices.tasks_operation.per_unit,
        "invocations": million
        * (count("invocations.ingress") + count("invocations.relay"))
        * prices.invocation.per_unit,
        "redis": 0.0,
    }
    out["total"] = sum(out.values())
    return {name: round(value, 4) for name, value in out.items()}


def memorystore_month(gb: float = 1.0, prices: Prices = PRICES) -> float:
    """The fixed monthly cost (730 h) of a Memorystore instance of ``gb`` GB."""
    return round(gb * 730 * prices.memorystore_gb_hour.per_unit, 2)
