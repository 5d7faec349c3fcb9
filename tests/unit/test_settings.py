"""Settings from code and from the environment: one validation path, the same messages.

Every check lives in the dataclasses' ``__post_init__``; ``from_env`` only parses strings. So a
bad value is refused with the same message whether it came as an argument or a variable, and
the message names both (``dedup_lease (PUBSUB_TOOLKIT_DEDUP_LEASE_SECONDS)``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from pubsub_toolkit.config import (
    SETTING_NAMES,
    ConsumerSettings,
    DelaySettings,
    Settings,
    topic_path,
)
from pubsub_toolkit.errors import ConfigurationError

BASE = {
    "GOOGLE_CLOUD_PROJECT": "p",
    "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
    "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dlq",
}
CODE = {"project": "p", "final_topic": "final", "dead_letter_topic": "dlq"}
SA = "relay@p.iam.gserviceaccount.com"
DELAY_ENV = {
    "PUBSUB_TOOLKIT_TASKS_QUEUE": "delay",
    "PUBSUB_TOOLKIT_TASKS_LOCATION": "europe-west1",
    "PUBSUB_TOOLKIT_RELAY_URL": "https://relay.example/",
    "PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT": SA,
}
DELAY_CODE = {
    "queue": "delay",
    "location": "europe-west1",
    "relay_url": "https://relay.example/",
    "invoker_email": SA,
}


def message(build: Callable[[], object]) -> str:
    with pytest.raises(ConfigurationError) as caught:
        build()
    return str(caught.value)


def test_defaults() -> None:
    settings = Settings.from_env(BASE)
    assert settings.final_topic == "projects/p/topics/final"
    assert settings.dead_letter_topic == "projects/p/topics/dlq"
    assert settings.store_backend == "firestore"
    assert settings.dedup_ttl == timedelta(days=8)
    assert settings == Settings(**CODE)  # the same defaults in code


def test_every_variable_has_an_argument_and_both_build_equal_settings() -> None:
    env = {
        **BASE,
        "PUBSUB_TOOLKIT_STORE_BACKEND": "Redis",
        "PUBSUB_TOOLKIT_REDIS_URL_SECRET": "projects/p/secrets/url",
        "PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET": "projects/p/secrets/ca/versions/3",
        "PUBSUB_TOOLKIT_DEDUP_TTL_SECONDS": "691201",
        "PUBSUB_TOOLKIT_DEDUP_LEASE_SECONDS": "120",
        "PUBSUB_TOOLKIT_DEDUP_COLLECTION": "dedup",
        "PUBSUB_TOOLKIT_FIRESTORE_DATABASE": "db",
        "PUBSUB_TOOLKIT_PUBLISH_TIMEOUT_SECONDS": "10",
        "PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS": "0",
        **DELAY_ENV,
        "PUBSUB_TOOLKIT_RELAY_AUDIENCE": "aud",
        "PUBSUB_TOOLKIT_RELAY_SERVICE": "relay",
        "CLOUD_TASKS_EMULATOR_HOST": "127.0.0.1:8123",
        "PUBSUB_TOOLKIT_OIDC_CERTS_URL": "http://127.0.0.1:1/certs",
    }
    code = Settings(
        project="p",
        final_topic="final",
        dead_letter_topic="projects/p/topics/dlq",
        store_backend="redis",
        redis_url_secret="projects/p/secrets/url",
        redis_ca_cert_secret="projects/p/secrets/ca/versions/3",
        dedup_ttl=timedelta(seconds=691201),
        dedup_lease=timedelta(minutes=2),
        dedup_collection="dedup",
        firestore_database="db",
        publish_timeout=timedelta(seconds=10),
        stats_flush=None,
        delay=DelaySettings(
            **DELAY_CODE,
            audience="aud",
            appengine_service="relay",
            tasks_emulator_host="127.0.0.1:8123",
            oidc_certs_url="http://127.0.0.1:1/certs",
        ),
    )
    assert Settings.from_env(env) == code
    # Short names resolve against the project; a secret without a version means its latest.
    assert code.final_topic == "projects/p/topics/final"
    assert code.redis_url_secret == "projects/p/secrets/url/versions/latest"
    assert code.delay is not None
    assert code.delay.queue == "projects/p/locations/europe-west1/queues/delay"
    assert (code.delay.relay_url, code.delay.relay_auth) == ("https://relay.example", "oidc")


def test_delay_defaults_are_the_environments() -> None:
    http = DelaySettings(queue="projects/p/locations/l/queues/q", relay_url="u", invoker_email=SA)
    assert (http.relay_auth, http.audience) == ("oidc", "u")
    appengine = DelaySettings(queue="projects/p/locations/l/queues/q", target="appengine")
    assert appengine.relay_auth == "appengine"
    env = {
        **BASE,
        "PUBSUB_TOOLKIT_TASKS_QUEUE": "projects/p/locations/l/queues/q",
        "PUBSUB_TOOLKIT_TASKS_TARGET": "appengine",
    }
    assert Settings.from_env(env).delay == appengine


def test_consumer_settings_from_code_equal_the_environments() -> None:
    env = {
        "PUBSUB_TOOLKIT_CONSUMER_ID": "shipping",
        "PUBSUB_TOOLKIT_FIFO_MAX_ATTEMPTS": "3",
        "PUBSUB_TOOLKIT_FIFO_POISON_POLICY": "BLOCK",
        "PUBSUB_TOOLKIT_FIFO_GAP_TIMEOUT_SECONDS": "60",
        "PUBSUB_TOOLKIT_FIFO_GAP_POLICY": "skip",
        "PUBSUB_TOOLKIT_FIFO_LEASE_SECONDS": "30",
        "PUBSUB_TOOLKIT_FIFO_PARK": "false",
        "PUBSUB_TOOLKIT_FIFO_RETRY_BACKOFF_SECONDS": "0.5",
    }
    assert ConsumerSettings.from_env(env) == ConsumerSettings(
        consumer_id="shipping",
        max_attempts=3,
        poison_policy="block",
        gap_timeout=timedelta(minutes=1),
        gap_policy="skip",
        lease=timedelta(seconds=30),
        park=False,
        retry_backoff=timedelta(seconds=0.5),
    )
    assert ConsumerSettings.from_env({"PUBSUB_TOOLKIT_CONSUMER_ID": "c"}) == ConsumerSettings(
        consumer_id="c"
    )


# (case, environment on top of BASE, arguments on top of CODE, the one message)
SETTINGS_CASES: list[tuple[str, dict[str, str], dict[str, Any], str]] = [
    (
        "no project",
        {"GOOGLE_CLOUD_PROJECT": ""},
        {"project": ""},
        "project (GOOGLE_CLOUD_PROJECT) is required",
    ),
    (
        "project with a slash",
        {"GOOGLE_CLOUD_PROJECT": "a/b"},
        {"project": "a/b"},
        "project (GOOGLE_CLOUD_PROJECT) 'a/b' is not a project id",
    ),
    (
        "no final topic",
        {"PUBSUB_TOOLKIT_FINAL_TOPIC": ""},
        {"final_topic": ""},
        "final_topic (PUBSUB_TOOLKIT_FINAL_TOPIC) is required",
    ),
    (
        "no dead-letter topic",
        {"PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": " "},
        {"dead_letter_topic": ""},
        "dead_letter_topic (PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC) is required",
    ),
    (
        "topic name with a slash",
        {"PUBSUB_TOOLKIT_FINAL_TOPIC": "a/b"},
        {"final_topic": "a/b"},
        "final_topic (PUBSUB_TOOLKIT_FINAL_TOPIC) 'a/b' is not a topic name or a path "
        "projects/P/topics/T",
    ),
    (
        "subscription path as a topic",
        {"PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "projects/q/subscriptions/t"},
        {"dead_letter_topic": "projects/q/subscriptions/t"},
        "dead_letter_topic (PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC) 'projects/q/subscriptions/t' is not "
        "a topic path "
        "projects/P/topics/T",
    ),
    (
        "unknown backend",
        {"PUBSUB_TOOLKIT_STORE_BACKEND": "mongo"},
        {"store_backend": "mongo"},
        "store_backend (PUBSUB_TOOLKIT_STORE_BACKEND) 'mongo' is not one of "
        "firestore, redis, memory",
    ),
    (
        "unknown backend by the older name",
        {"PUBSUB_TOOLKIT_STORE_BACKEND": "mongo"},
        {"store_backend": "mongo"},
        "store_backend (PUBSUB_TOOLKIT_STORE_BACKEND) 'mongo' is not one of "
        "firestore, redis, memory",
    ),
    (
        "redis without a URL",
        {"PUBSUB_TOOLKIT_STORE_BACKEND": "redis"},
        {"store_backend": "redis"},
        "redis_url or redis_url_secret (PUBSUB_TOOLKIT_REDIS_URL or "
        "PUBSUB_TOOLKIT_REDIS_URL_SECRET) is required when "
        "store_backend (PUBSUB_TOOLKIT_STORE_BACKEND) is 'redis'",
    ),
    (
        "URL and URL secret",
        {
            "PUBSUB_TOOLKIT_REDIS_URL": "redis://h:1/0",
            "PUBSUB_TOOLKIT_REDIS_URL_SECRET": "projects/p/secrets/u",
        },
        {"redis_url": "redis://h:1/0", "redis_url_secret": "projects/p/secrets/u"},
        "set redis_url (PUBSUB_TOOLKIT_REDIS_URL) or redis_url_secret "
        "(PUBSUB_TOOLKIT_REDIS_URL_SECRET), not both",
    ),
    (
        "malformed URL secret",
        {"PUBSUB_TOOLKIT_REDIS_URL_SECRET": "redis-url"},
        {"redis_url_secret": "redis-url"},
        "redis_url_secret (PUBSUB_TOOLKIT_REDIS_URL_SECRET) 'redis-url' is not a Secret Manager "
        "secret "
        "(projects/PROJECT/secrets/NAME[/versions/VERSION])",
    ),
    (
        "malformed CA secret",
        {"PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET": "projects/p/ca"},
        {"redis_ca_cert_secret": "projects/p/ca"},
        "redis_ca_cert_secret (PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET) 'projects/p/ca' is not a "
        "Secret Manager "
        "secret (projects/PROJECT/secrets/NAME[/versions/VERSION])",
    ),
    (
        "negative TTL",
        {"PUBSUB_TOOLKIT_DEDUP_TTL_SECONDS": "-5"},
        {"dedup_ttl": timedelta(seconds=-5)},
        "dedup_ttl (PUBSUB_TOOLKIT_DEDUP_TTL_SECONDS) must be a positive timedelta, not -5 s",
    ),
    (
        "zero lease",
        {"PUBSUB_TOOLKIT_DEDUP_LEASE_SECONDS": "0"},
        {"dedup_lease": timedelta(0)},
        "dedup_lease (PUBSUB_TOOLKIT_DEDUP_LEASE_SECONDS) must be a positive timedelta, not 0 s",
    ),
    (
        "zero publish timeout",
        {"PUBSUB_TOOLKIT_PUBLISH_TIMEOUT_SECONDS": "0"},
        {"publish_timeout": timedelta(0)},
        "publish_timeout (PUBSUB_TOOLKIT_PUBLISH_TIMEOUT_SECONDS) must be a positive timedelta, "
        "not 0 s",
    ),
    (
        "lease shorter than two publishes",
        {
            "PUBSUB_TOOLKIT_DEDUP_LEASE_SECONDS": "30",
            "PUBSUB_TOOLKIT_PUBLISH_TIMEOUT_SECONDS": "20",
        },
        {"dedup_lease": timedelta(seconds=30), "publish_timeout": timedelta(seconds=20)},
        "dedup_lease (PUBSUB_TOOLKIT_DEDUP_LEASE_SECONDS) is 30 s: it must be at least twice "
        "publish_timeout "
        "(PUBSUB_TOOLKIT_PUBLISH_TIMEOUT_SECONDS), 20 s",
    ),
    (
        "negative stats flush",
        {"PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS": "-1"},
        {"stats_flush": timedelta(seconds=-1)},
        "stats_flush (PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS) must be a positive timedelta or None "
        "(never), not -1 s",
    ),
    (
        "delay: unknown target",
        {**DELAY_ENV, "PUBSUB_TOOLKIT_TASKS_TARGET": "ftp"},
        {"delay": {**DELAY_CODE, "target": "ftp"}},
        "target (PUBSUB_TOOLKIT_TASKS_TARGET) 'ftp' is not one of http, appengine",
    ),
    (
        "delay: unknown relay auth",
        {**DELAY_ENV, "PUBSUB_TOOLKIT_RELAY_AUTH": "basic"},
        {"delay": {**DELAY_CODE, "relay_auth": "basic"}},
        "relay_auth (PUBSUB_TOOLKIT_RELAY_AUTH) 'basic' is not one of oidc, appengine",
    ),
    (
        "delay: HTTP target without a relay URL",
        {**DELAY_ENV, "PUBSUB_TOOLKIT_RELAY_URL": ""},
        {"delay": {**DELAY_CODE, "relay_url": None}},
        "relay_url (PUBSUB_TOOLKIT_RELAY_URL) is required when target "
        "(PUBSUB_TOOLKIT_TASKS_TARGET) is 'http'",
    ),
    (
        "delay: OIDC without a service account",
        {**DELAY_ENV, "PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT": ""},
        {"delay": {**DELAY_CODE, "invoker_email": None}},
        "invoker_email (PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT) is required when relay_auth "
        "(PUBSUB_TOOLKIT_RELAY_AUTH) is 'oidc'",
    ),
    (
        "delay: short queue without a location",
        {**DELAY_ENV, "PUBSUB_TOOLKIT_TASKS_LOCATION": ""},
        {"delay": {**DELAY_CODE, "location": None}},
        "location (PUBSUB_TOOLKIT_TASKS_LOCATION) is required when queue "
        "(PUBSUB_TOOLKIT_TASKS_QUEUE) is a short name",
    ),
    (
        "delay: malformed queue path",
        {**DELAY_ENV, "PUBSUB_TOOLKIT_TASKS_QUEUE": "projects/p/queues/q"},
        {"delay": {**DELAY_CODE, "queue": "projects/p/queues/q"}},
        "queue (PUBSUB_TOOLKIT_TASKS_QUEUE) 'projects/p/queues/q' is not "
        "projects/P/locations/L/queues/Q (or a "
        "short queue name with location (PUBSUB_TOOLKIT_TASKS_LOCATION))",
    ),
]


def _code_settings(arguments: dict[str, Any]) -> Settings:
    arguments = {**CODE, **arguments}
    if isinstance(arguments.get("delay"), dict):
        arguments["delay"] = DelaySettings(**arguments["delay"])
    return Settings(**arguments)


@pytest.mark.parametrize(
    ("env", "arguments", "expected"),
    [case[1:] for case in SETTINGS_CASES],
    ids=[case[0] for case in SETTINGS_CASES],
)
def test_a_bad_setting_gets_the_same_message_from_env_and_from_code(
    env: dict[str, str], arguments: dict[str, Any], expected: str
) -> None:
    from_env = message(lambda: Settings.from_env({**BASE, **env}))
    from_code = message(lambda: _code_settings(arguments))
    assert from_env == from_code == expected


CONSUMER_CASES: list[tuple[str, dict[str, str], dict[str, Any], str]] = [
    (
        "no consumer id",
        {"PUBSUB_TOOLKIT_CONSUMER_ID": ""},
        {"consumer_id": " "},
        "consumer_id (PUBSUB_TOOLKIT_CONSUMER_ID) is required",
    ),
    (
        "zero attempts",
        {"PUBSUB_TOOLKIT_FIFO_MAX_ATTEMPTS": "0"},
        {"max_attempts": 0},
        "max_attempts (PUBSUB_TOOLKIT_FIFO_MAX_ATTEMPTS) must be an integer >= 1, not 0",
    ),
    (
        "unknown poison policy",
        {"PUBSUB_TOOLKIT_FIFO_POISON_POLICY": "drop"},
        {"poison_policy": "drop"},
        "poison_policy (PUBSUB_TOOLKIT_FIFO_POISON_POLICY) 'drop' is not one of skip, block",
    ),
    (
        "unknown gap policy",
        {"PUBSUB_TOOLKIT_FIFO_GAP_POLICY": "jump"},
        {"gap_policy": "jump"},
        "gap_policy (PUBSUB_TOOLKIT_FIFO_GAP_POLICY) 'jump' is not one of wait, skip",
    ),
    (
        "zero gap timeout",
        {"PUBSUB_TOOLKIT_FIFO_GAP_TIMEOUT_SECONDS": "0"},
        {"gap_timeout": timedelta(0)},
        "gap_timeout (PUBSUB_TOOLKIT_FIFO_GAP_TIMEOUT_SECONDS) must be a positive timedelta, not "
        "0 s",
    ),
    (
        "negative lease",
        {"PUBSUB_TOOLKIT_FIFO_LEASE_SECONDS": "-1"},
        {"lease": timedelta(seconds=-1)},
        "lease (PUBSUB_TOOLKIT_FIFO_LEASE_SECONDS) must be a positive timedelta, not -1 s",
    ),
    (
        "zero retry backoff",
        {"PUBSUB_TOOLKIT_FIFO_RETRY_BACKOFF_SECONDS": "0"},
        {"retry_backoff": timedelta(0)},
        "retry_backoff (PUBSUB_TOOLKIT_FIFO_RETRY_BACKOFF_SECONDS) must be a positive timedelta, "
        "not 0 s",
    ),
    (
        "park neither true nor false",
        {"PUBSUB_TOOLKIT_FIFO_PARK": "yes"},
        {"park": "yes"},
        "park (PUBSUB_TOOLKIT_FIFO_PARK) must be true or false, not 'yes'",
    ),
]


@pytest.mark.parametrize(
    ("env", "arguments", "expected"),
    [case[1:] for case in CONSUMER_CASES],
    ids=[case[0] for case in CONSUMER_CASES],
)
def test_a_bad_consumer_setting_gets_the_same_message_from_env_and_from_code(
    env: dict[str, str], arguments: dict[str, Any], expected: str
) -> None:
    from_env = message(
        lambda: ConsumerSettings.from_env({"PUBSUB_TOOLKIT_CONSUMER_ID": "c", **env})
    )
    from_code = message(lambda: ConsumerSettings(**{"consumer_id": "c", **arguments}))
    assert from_env == from_code == expected


def test_every_settings_field_has_its_two_names() -> None:
    for cls in (Settings, DelaySettings, ConsumerSettings):
        for field in cls.__dataclass_fields__:
            if field != "delay":
                assert SETTING_NAMES[field].startswith(f"{field} ("), field


@pytest.mark.parametrize(
    ("variable", "raw", "field"),
    [
        ("PUBSUB_TOOLKIT_DEDUP_TTL_SECONDS", "abc", "dedup_ttl"),
        ("PUBSUB_TOOLKIT_DEDUP_LEASE_SECONDS", "inf", "dedup_lease"),
        ("PUBSUB_TOOLKIT_PUBLISH_TIMEOUT_SECONDS", "nan", "publish_timeout"),
        ("PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS", "often", "stats_flush"),
        ("PUBSUB_TOOLKIT_DEDUP_TTL_SECONDS", "1e300", "dedup_ttl"),  # beyond what a timedelta holds
    ],
)
def test_a_variable_that_is_no_number_is_named(variable: str, raw: str, field: str) -> None:
    assert message(lambda: Settings.from_env({**BASE, variable: raw})) == (
        f"{SETTING_NAMES[field]} {raw!r} is not a number of seconds"
    )


def test_consumer_variables_that_do_not_parse_use_the_constructors_wording() -> None:
    assert message(
        lambda: ConsumerSettings.from_env(
            {"PUBSUB_TOOLKIT_CONSUMER_ID": "c", "PUBSUB_TOOLKIT_FIFO_MAX_ATTEMPTS": "x"}
        )
    ) == ("max_attempts (PUBSUB_TOOLKIT_FIFO_MAX_ATTEMPTS) must be an integer >= 1, not 'x'")
    assert message(
        lambda: ConsumerSettings.from_env(
            {"PUBSUB_TOOLKIT_CONSUMER_ID": "c", "PUBSUB_TOOLKIT_FIFO_LEASE_SECONDS": "soon"}
        )
    ) == ("lease (PUBSUB_TOOLKIT_FIFO_LEASE_SECONDS) 'soon' is not a number of seconds")


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (
            {"dedup_ttl": 90},
            "dedup_ttl (PUBSUB_TOOLKIT_DEDUP_TTL_SECONDS) must be a positive timedelta, not int 90",
        ),
        (
            {"stats_flush": 5.0},
            "stats_flush (PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS) must be a positive timedelta or None "
            "(never), "
            "not float 5.0",
        ),
        ({"project": None}, "project (GOOGLE_CLOUD_PROJECT) must be a string, not NoneType"),
        (
            {"redis_url": b"redis://h"},
            "redis_url (PUBSUB_TOOLKIT_REDIS_URL) must be a string, not bytes",
        ),
        ({"delay": "q"}, "delay must be a DelaySettings or None, not str"),
        (
            {"dedup_collection": ""},
            "dedup_collection (PUBSUB_TOOLKIT_DEDUP_COLLECTION) must not be empty",
        ),
    ],
)
def test_a_wrong_type_in_code_is_refused_by_name(arguments: dict[str, Any], expected: str) -> None:
    assert message(lambda: Settings(**{**CODE, **arguments})) == expected


def test_max_attempts_must_be_an_int_not_a_bool() -> None:
    assert message(lambda: ConsumerSettings(consumer_id="c", max_attempts=True)) == (
        "max_attempts (PUBSUB_TOOLKIT_FIFO_MAX_ATTEMPTS) must be an integer >= 1, not True"
    )


def test_settings_stay_frozen() -> None:
    settings = Settings(**CODE)
    with pytest.raises(AttributeError):
        settings.project = "q"  # type: ignore[misc]


def test_redis_backend_with_a_url() -> None:
    s = Settings.from_env(
        {
            **BASE,
            "PUBSUB_TOOLKIT_STORE_BACKEND": "redis",
            "PUBSUB_TOOLKIT_REDIS_URL": "redis://h:1/0",
        }
    )
    assert (s.store_backend, s.redis_url) == ("redis", "redis://h:1/0")


def test_store_backend_is_read_case_blind_and_defaults_to_firestore() -> None:
    """One backend holds dedup records, FIFO state and counters: PUBSUB_TOOLKIT_STORE_BACKEND."""
    env = {**BASE, "PUBSUB_TOOLKIT_STORE_BACKEND": "Memory "}
    assert Settings.from_env(env).store_backend == "memory"
    env = {**BASE, "PUBSUB_TOOLKIT_STORE_BACKEND": ""}
    assert Settings.from_env(env).store_backend == "firestore"


def test_topic_path_accepts_full_paths() -> None:
    assert topic_path("p", "projects/q/topics/t") == "projects/q/topics/t"
    assert Settings(**{**CODE, "final_topic": "projects/q/topics/t"}).final_topic == (
        "projects/q/topics/t"
    )
    with pytest.raises(ConfigurationError):
        topic_path("p", "projects/q/subscriptions/t")


def test_stats_flush_interval() -> None:
    assert Settings.from_env(BASE).stats_flush == timedelta(seconds=5)
    assert Settings.from_env(
        {**BASE, "PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS": "0.5"}
    ).stats_flush == timedelta(seconds=0.5)
    assert (
        Settings.from_env({**BASE, "PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS": "0"}).stats_flush is None
    )
    assert Settings(**CODE, stats_flush=None).stats_flush is None


@pytest.mark.parametrize("raw", ["yes", "1", "True", "ON"])
def test_settings_from_env_refuses_a_tracing_value_that_is_neither_on_nor_off(raw: str) -> None:
    # Only the entry points read PUBSUB_TOOLKIT_TRACING (tracing_setup), but settings.md says a
    # boolean other than its two values stops the start: a library user's Settings.from_env
    # must not take "yes" silently and run untraced (found trying the library as a new user).
    env = {**BASE, "PUBSUB_TOOLKIT_TRACING": raw}
    assert message(lambda: Settings.from_env(env)) == (
        f"PUBSUB_TOOLKIT_TRACING must be on or off, not {raw!r}"
    )


def test_settings_from_env_takes_tracing_on_and_off() -> None:
    for raw in ("on", "off", ""):
        assert Settings.from_env({**BASE, "PUBSUB_TOOLKIT_TRACING": raw}) == Settings.from_env(BASE)
