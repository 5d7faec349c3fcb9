"""Settings.from_env: defaults, validation, and errors that name the variable."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pubsub_toolkit.config import Settings, topic_path
from pubsub_toolkit.errors import ConfigurationError

BASE = {"GOOGLE_CLOUD_PROJECT": "p", "FINAL_TOPIC": "final", "DEAD_LETTER_TOPIC": "dlq"}


def test_defaults() -> None:
    settings = Settings.from_env(BASE)
    assert settings.final_topic == "projects/p/topics/final"
    assert settings.dead_letter_topic == "projects/p/topics/dlq"
    assert settings.store_backend == "firestore"
    assert settings.dedup_ttl == timedelta(days=8)


@pytest.mark.parametrize("missing", sorted(BASE))
def test_missing_variable_is_named(missing: str) -> None:
    env = {k: v for k, v in BASE.items() if k != missing}
    with pytest.raises(ConfigurationError, match=missing):
        Settings.from_env(env)


@pytest.mark.parametrize("variable", ["STORE_BACKEND", "DEDUP_BACKEND"])
def test_redis_backend_needs_redis_url(variable: str) -> None:
    with pytest.raises(
        ConfigurationError,
        match=f"REDIS_URL \\(or REDIS_URL_SECRET\\) is required when {variable}=redis",
    ):
        Settings.from_env({**BASE, variable: "redis"})
    s = Settings.from_env({**BASE, variable: "redis", "REDIS_URL": "redis://h:1/0"})
    assert (s.store_backend, s.redis_url) == ("redis", "redis://h:1/0")


def test_dedup_backend_is_an_alias_of_store_backend() -> None:
    """One backend holds dedup records, FIFO state and counters: STORE_BACKEND names it, and
    the older DEDUP_BACKEND still works - alone, or agreeing with STORE_BACKEND."""
    assert Settings.from_env({**BASE, "DEDUP_BACKEND": "memory"}).store_backend == "memory"
    both = {**BASE, "STORE_BACKEND": "Memory", "DEDUP_BACKEND": "memory "}
    assert Settings.from_env(both).store_backend == "memory"
    assert Settings.from_env({**BASE, "DEDUP_BACKEND": ""}).store_backend == "firestore"


def test_store_backend_and_dedup_backend_must_agree() -> None:
    env = {**BASE, "STORE_BACKEND": "redis", "REDIS_URL": "redis://h:1/0"}
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({**env, "DEDUP_BACKEND": "firestore"})
    assert str(caught.value) == (
        "STORE_BACKEND='redis' and DEDUP_BACKEND='firestore' disagree; set STORE_BACKEND only "
        "(DEDUP_BACKEND is its older name)"
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("STORE_BACKEND", "mongo"),
        ("DEDUP_BACKEND", "mongo"),
        ("DEDUP_TTL_SECONDS", "abc"),
        ("DEDUP_TTL_SECONDS", "-5"),
        ("DEDUP_LEASE_SECONDS", "0"),
        ("FINAL_TOPIC", "a/b"),
    ],
)
def test_invalid_values_are_named(name: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=name if name != "FINAL_TOPIC" else "a/b"):
        Settings.from_env({**BASE, name: value})


def test_topic_path_accepts_full_paths() -> None:
    assert topic_path("p", "projects/q/topics/t") == "projects/q/topics/t"
    with pytest.raises(ConfigurationError):
        topic_path("p", "projects/q/subscriptions/t")


def test_stats_flush_interval() -> None:
    assert Settings.from_env(BASE).stats_flush == timedelta(seconds=5)
    assert Settings.from_env({**BASE, "STATS_FLUSH_SECONDS": "0.5"}).stats_flush == timedelta(
        seconds=0.5
    )
    assert Settings.from_env({**BASE, "STATS_FLUSH_SECONDS": "0"}).stats_flush is None
    with pytest.raises(ConfigurationError, match="STATS_FLUSH_SECONDS"):
        Settings.from_env({**BASE, "STATS_FLUSH_SECONDS": "often"})
