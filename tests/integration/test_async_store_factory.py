"""An ``async def`` handler gets its stores from the same factory, configured the same way, as
a sync one: the deployed settings (``PUBSUB_TOOLKIT_REDIS_URL_SECRET`` with
``PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET``, a TLS Memorystore behind AUTH) work for both, and Redis
Cluster is refused for both at configuration (the FIFO gate store's script writes two keys) instead
of failing every FIFO delivery with CROSSSLOT, redelivered forever.

The secrets come through our own SecretReader protocol (see test_redis_secrets), the TLS
redis-server and the one-node Redis Cluster are real.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from pubsub_toolkit import ConsumerSettings, MessageProcessor
from pubsub_toolkit.consumer.processor_async import AsyncMessageProcessor
from pubsub_toolkit.errors import ConfigurationError
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores import factory
from tests.integration.test_redis_secrets import (
    CA_SECRET,
    URL_SECRET,
    DictSecrets,
    TlsRedis,
    fresh_resolution_cache,
    settings,
    tls_redis,
)
from tests.support.redis_servers import PrivateRedis, private_redis

__all__ = ["fresh_resolution_cache", "tls_redis"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    with private_redis(tmp_path_factory.mktemp("async-factory-cluster"), cluster=True) as running:
        yield running


def consumer() -> ConsumerSettings:
    return ConsumerSettings(consumer_id=f"consumer-{uuid.uuid4().hex[:8]}")


def test_an_async_handler_reads_the_url_and_the_ca_from_secrets_as_a_sync_one_does(
    tls_redis: TlsRedis, pubsub_emulator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    secrets = DictSecrets({URL_SECRET: tls_redis.url.encode(), CA_SECRET: tls_redis.ca_pem})
    monkeypatch.setattr(factory, "read_secret_manager", secrets)
    configured = settings(
        PUBSUB_TOOLKIT_REDIS_URL_SECRET=URL_SECRET, PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET=CA_SECRET
    )
    ran: list[bytes] = []

    async def handler(message: Message) -> str:
        ran.append(message.data)
        return "done"

    processor = MessageProcessor.from_settings(configured, consumer(), handler)
    assert isinstance(processor, AsyncMessageProcessor)
    blocking = processor.blocking()
    try:
        blocking.process(Message(b"solo", {"dedup_key": "k1"}))
        blocking.process(Message(b"solo", {"dedup_key": "k1"}))  # a duplicate: not run again
        blocking.process(Message(b"g:1", {"fifo_group": "g", "fifo_seq": "1"}))
        blocking.process(Message(b"g:1", {"fifo_group": "g", "fifo_seq": "1"}))
    finally:
        blocking.close()
    assert ran == [b"solo", b"g:1"]  # on the TLS server behind AUTH, deduplicated there
    assert secrets.reads == [URL_SECRET, CA_SECRET]  # one read of each, as the sync path


def test_redis_cluster_is_refused_at_configuration_for_async_handlers_as_for_sync_ones(
    cluster: PrivateRedis, pubsub_emulator: str
) -> None:
    configured = settings(PUBSUB_TOOLKIT_REDIS_URL=cluster.url)

    def sync_handler(message: Message) -> None:
        raise AssertionError("never delivered")

    async def async_handler(message: Message) -> None:
        raise AssertionError("never delivered")

    with pytest.raises(ConfigurationError, match="cannot run on Redis Cluster") as sync_refusal:
        MessageProcessor.from_settings(configured, consumer(), sync_handler)
    with pytest.raises(ConfigurationError, match="cannot run on Redis Cluster") as async_refusal:
        MessageProcessor.from_settings(configured, consumer(), async_handler)
    assert str(async_refusal.value) == str(sync_refusal.value)
