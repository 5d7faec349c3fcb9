"""A Redis setting beside another store backend is said, not silently ignored.

Found trying the library as a new user: the README names ``PUBSUB_TOOLKIT_STORE_BACKEND`` and
``PUBSUB_TOOLKIT_REDIS_URL`` together; setting only the URL left the backend at its default,
Firestore, and nothing said that the URL was not used (in production the consumer then writes
its records to Firestore, or fails on Firestore's credentials, never mentioning Redis).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from pubsub_toolkit.config import Settings

ENV = {
    "GOOGLE_CLOUD_PROJECT": "p",
    "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
    "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dlq",
}


def settings(**given: Any) -> Settings:
    return Settings(project="p", final_topic="final", dead_letter_topic="dlq", **given)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_redis_url_beside_the_default_backend_is_said_in_code_and_from_the_environment(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="pubsub_toolkit"):
        in_code = settings(redis_url="redis://10.0.0.3:6379/0")
    [said] = warnings_of(caplog)
    assert "redis_url (PUBSUB_TOOLKIT_REDIS_URL) is set" in said
    assert "store_backend (PUBSUB_TOOLKIT_STORE_BACKEND) is 'firestore'" in said
    assert "10.0.0.3" not in said  # a URL may carry an AUTH string: never echoed
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pubsub_toolkit"):
        from_env = Settings.from_env({**ENV, "PUBSUB_TOOLKIT_REDIS_URL": "redis://10.0.0.3/0"})
    assert warnings_of(caplog) == [said]  # the same words either way
    assert (in_code.store_backend, from_env.store_backend) == ("firestore", "firestore")


def test_each_redis_setting_is_named_beside_the_memory_backend(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="pubsub_toolkit"):
        settings(
            store_backend="memory",
            redis_url_secret="projects/p/secrets/url",
            redis_ca_cert_secret="projects/p/secrets/ca",
        )
    [said] = warnings_of(caplog)
    assert "PUBSUB_TOOLKIT_REDIS_URL_SECRET" in said
    assert "PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET" in said
    assert "is 'memory'" in said


def test_nothing_is_said_when_the_backend_is_redis(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="pubsub_toolkit"):
        settings(store_backend="redis", redis_url="redis://10.0.0.3:6379/0")
        settings()
    assert warnings_of(caplog) == []
