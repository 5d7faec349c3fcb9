"""PUBSUB_TOOLKIT_STORE_PREFIX (``Settings.store_prefix``): read and checked like every setting,
and the one place (``stores.factory.store_names_from_settings``) that turns it into every
Firestore collection and Redis key prefix the stores use.

Empty (the default) keeps today's names, so an existing deployment keeps its data.
"""

from __future__ import annotations

import inspect
from unittest import mock

import pytest

from pubsub_toolkit.config import Settings
from pubsub_toolkit.stores import factory
from pubsub_toolkit.stores.backends.base import StoreNames
from tests.unit.test_settings import BASE, CODE, message


def test_the_default_is_no_prefix_and_todays_names() -> None:
    assert Settings(**CODE).store_prefix == ""
    assert Settings.from_env(BASE) == Settings(**CODE)
    names = factory.store_names_from_settings(Settings(**CODE))
    assert names == StoreNames()
    assert names == StoreNames(
        dedup_collection="pubsub_toolkit_dedup",
        fifo_state_collection="pubsub_toolkit_fifo_state",
        counter_collection="pubsub_toolkit_fifo_counters",
        stats_collection="pubsub_toolkit_stats",
        dedup_key_prefix="pubsub_toolkit:dedup:",
        fifo_state_key_prefix="pubsub_toolkit:fifo_state:",
        counter_key_prefix="pubsub_toolkit:fifo:",
        stats_key_prefix="pubsub_toolkit:stats:",
    )


def _default(function: object, argument: str) -> object:
    return inspect.signature(function).parameters[argument].default  # type: ignore[arg-type]


def test_the_default_names_are_the_stores_own_defaults() -> None:
    # Imported here: the Firestore and Redis store modules import their client libraries.
    from pubsub_toolkit.stores.counters import firestore as counters_firestore
    from pubsub_toolkit.stores.counters import redis as counters_redis
    from pubsub_toolkit.stores.dedup import firestore as dedup_firestore
    from pubsub_toolkit.stores.dedup import redis as dedup_redis
    from pubsub_toolkit.stores.dedup import redis_async as dedup_redis_async
    from pubsub_toolkit.stores.fifo_state import firestore as fifo_firestore
    from pubsub_toolkit.stores.fifo_state import redis as fifo_redis
    from pubsub_toolkit.stores.stats import firestore as stats_firestore
    from pubsub_toolkit.stores.stats import redis as stats_redis

    names = StoreNames()
    assert names.dedup_collection == dedup_firestore.DEFAULT_COLLECTION
    assert names.fifo_state_collection == fifo_firestore.DEFAULT_COLLECTION
    assert names.counter_collection == counters_firestore.DEFAULT_COLLECTION
    assert names.stats_collection == stats_firestore.DEFAULT_COLLECTION
    assert names.dedup_key_prefix == _default(dedup_redis.RedisDedupStore, "prefix")
    assert names.dedup_key_prefix == _default(dedup_redis_async.AsyncRedisDedupStore, "prefix")
    assert names.fifo_state_key_prefix == fifo_redis.DEFAULT_PREFIX
    assert names.counter_key_prefix == counters_redis.DEFAULT_PREFIX
    assert names.stats_key_prefix == _default(stats_redis.RedisStatsStore, "prefix")


def test_a_prefix_goes_in_front_of_every_collection_and_key_prefix() -> None:
    settings = Settings.from_env({**BASE, "PUBSUB_TOOLKIT_STORE_PREFIX": " blue_ "})
    assert settings == Settings(**CODE, store_prefix="blue_")
    assert settings.store_prefix == "blue_"
    assert factory.store_names_from_settings(settings) == StoreNames(
        dedup_collection="blue_pubsub_toolkit_dedup",
        fifo_state_collection="blue_pubsub_toolkit_fifo_state",
        counter_collection="blue_pubsub_toolkit_fifo_counters",
        stats_collection="blue_pubsub_toolkit_stats",
        dedup_key_prefix="blue_pubsub_toolkit:dedup:",
        fifo_state_key_prefix="blue_pubsub_toolkit:fifo_state:",
        counter_key_prefix="blue_pubsub_toolkit:fifo:",
        stats_key_prefix="blue_pubsub_toolkit:stats:",
    )


def test_an_explicit_dedup_collection_wins_over_the_prefix() -> None:
    settings = Settings(**CODE, store_prefix="blue_", dedup_collection="my_dedup")
    names = factory.store_names_from_settings(settings)
    assert names.dedup_collection == "my_dedup"
    assert names.counter_collection == "blue_pubsub_toolkit_fifo_counters"
    assert names.dedup_key_prefix == "blue_pubsub_toolkit:dedup:"  # Redis: the prefix applies


def test_the_backends_from_settings_carry_the_names() -> None:
    settings = Settings(**CODE, store_prefix="green_")
    names = factory.store_names_from_settings(settings)
    from pubsub_toolkit.stores.backends.firestore import FirestoreBackend

    # A client whose collections are their names: which collection each store opened.
    client = mock.Mock()
    client.collection.side_effect = lambda name: name
    backend = FirestoreBackend(client, names=names)
    assert backend.counter()._collection == "green_pubsub_toolkit_fifo_counters"
    assert backend.fifo_store()._collection == "green_pubsub_toolkit_fifo_state"
    assert backend.dedup_store()._collection == "green_pubsub_toolkit_dedup"
    assert backend.stats_store()._collection == "green_pubsub_toolkit_stats"


@pytest.mark.parametrize(
    "raw",
    ["blue-", "blue.", "blue/", "blue:", "b lue", "ü", "a" * 31],
)
def test_a_prefix_a_collection_id_or_key_should_not_hold_is_refused_by_name(raw: str) -> None:
    from_env = message(lambda: Settings.from_env({**BASE, "PUBSUB_TOOLKIT_STORE_PREFIX": raw}))
    from_code = message(lambda: Settings(**CODE, store_prefix=raw))
    assert from_env == from_code
    assert from_env.startswith(f"store_prefix (PUBSUB_TOOLKIT_STORE_PREFIX) {raw!r} ")
    assert "letters, digits and underscores" in from_env


def test_a_prefix_that_is_no_string_is_refused_by_name() -> None:
    got = message(lambda: Settings(**CODE, store_prefix=3))  # type: ignore[arg-type]
    assert got == "store_prefix (PUBSUB_TOOLKIT_STORE_PREFIX) must be a string, not int"


def test_the_longest_prefix_is_accepted() -> None:
    assert Settings(**CODE, store_prefix="A" * 29 + "_").store_prefix == "A" * 29 + "_"
