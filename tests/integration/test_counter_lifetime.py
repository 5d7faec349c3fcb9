"""A Redis counter built from settings lives ``DEDUP_TTL`` past its last reservation, never longer
than the group state it numbers (issue 24, defect 4): with a longer counter, a group idle past
``DEDUP_TTL`` lost its state but kept its counter, and its next number waited for #1 forever."""

from __future__ import annotations

import uuid
from datetime import timedelta

import redis

from pubsub_toolkit.config import Settings
from pubsub_toolkit.stores.counters.redis import DEFAULT_PREFIX
from pubsub_toolkit.stores.factory import counter_from_settings


def test_the_counter_from_settings_expires_with_dedup_ttl(redis_url: str) -> None:
    ttl = timedelta(days=7, hours=1)  # shorter than the counter's own default (8 days)
    settings = Settings(
        project="p",
        final_topic="t",
        dead_letter_topic="d",
        store_backend="redis",
        redis_url=redis_url,
        dedup_ttl=ttl,
    )
    group = f"g-{uuid.uuid4().hex[:8]}"
    counter_from_settings(settings).reserve(group)
    client = redis.Redis.from_url(redis_url)
    try:
        remaining = timedelta(milliseconds=client.pttl(f"{DEFAULT_PREFIX}{group}"))
    finally:
        client.close()
    assert ttl - timedelta(minutes=1) < remaining <= ttl
