"""A Redis that refuses the URL's credentials is a configuration error, named as such.

Memorystore with AUTH: a wrong or missing AUTH string in ``PUBSUB_TOOLKIT_REDIS_URL`` (or the
secret holding it) never heals by redelivery. redis-py raises ``AuthenticationError``, a
subclass of its ``ConnectionError``, so without care it reads as "Redis is unavailable" and
every message is nacked forever behind a message that names neither the password nor the
setting. Here a real redis-server refuses a user's wrong password: building the stores from
settings (sync and asyncio) and from a URL fails at once with a ConfigurationError that names
the setting and never echoes the password, before any message is taken.
"""

from __future__ import annotations

import urllib.parse
import uuid
from collections.abc import Iterator

import pytest
import redis

from pubsub_toolkit import ConsumerSettings, MessageProcessor, RedisBackend, Settings
from pubsub_toolkit.errors import ConfigurationError, StoreUnavailableError
from pubsub_toolkit.stores import factory
from pubsub_toolkit.stores._redis_calls import unavailable
from pubsub_toolkit.stores.fifo_state.redis import RedisFifoStore

WRONG = "not-the-auth-string"


@pytest.fixture
def wrong_password_url(redis_url: str) -> Iterator[str]:
    """The fixture server's URL for a user of its own, with a password the server refuses."""
    user = f"u{uuid.uuid4().hex[:10]}"
    admin = redis.Redis.from_url(redis_url)
    admin.acl_setuser(user, enabled=True, passwords=["+right-password"], commands=["+@all"])
    parts = urllib.parse.urlsplit(redis_url)
    yield parts._replace(netloc=f"{user}:{WRONG}@{parts.netloc}").geturl()
    admin.acl_deluser(user)
    admin.close()


def _settings(url: str) -> Settings:
    return Settings(
        project="p",
        final_topic="projects/p/topics/final",
        dead_letter_topic="projects/p/topics/dead-letters",
        store_backend="redis",
        redis_url=url,
    )


def _assert_names_the_setting(error: BaseException) -> None:
    text = str(error)
    assert "PUBSUB_TOOLKIT_REDIS_URL" in text
    assert "refused" in text
    assert WRONG not in text


def test_wrong_password_fails_the_backend_from_settings_at_configuration(
    wrong_password_url: str,
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        factory.backend_from_settings(_settings(wrong_password_url))
    _assert_names_the_setting(caught.value)


def test_wrong_password_fails_the_processor_before_any_message(
    wrong_password_url: str, pubsub_emulator: str
) -> None:
    handled: list[object] = []
    with pytest.raises(ConfigurationError) as caught:
        MessageProcessor.from_settings(
            _settings(wrong_password_url),
            ConsumerSettings(consumer_id="c"),
            handled.append,
        )
    _assert_names_the_setting(caught.value)
    assert handled == []


def test_wrong_password_fails_the_async_stores_from_settings(wrong_password_url: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        factory.async_stores_from_settings(_settings(wrong_password_url))
    _assert_names_the_setting(caught.value)


def test_wrong_password_fails_the_from_url_constructors(wrong_password_url: str) -> None:
    with pytest.raises(ConfigurationError):
        RedisBackend.from_url(wrong_password_url)
    with pytest.raises(ConfigurationError):
        RedisFifoStore.from_url(wrong_password_url)


def test_credentials_refused_later_name_the_setting_and_stay_transient() -> None:
    """A password rotated under a running process: the call still fails closed (nothing is
    acked, the message comes back), but the error says what to fix."""
    error = unavailable(redis.exceptions.AuthenticationError("invalid username-password pair"))
    assert isinstance(error, StoreUnavailableError)
    _assert_names_the_setting(error)
