"""A Redis URL whose TLS does not match the server says so at start, rather than only "Redis is
unavailable" on every message afterwards.

Memorystore's in-transit encryption is a choice made when the instance is created: its URL is
then ``rediss://`` (with ``PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET``), and a plain instance's is
``redis://``. The wrong scheme never connects - a TLS handshake to a plain server times out, a
plain connection to a TLS one is cut - and since a Redis that is down at start must not stop a
process (it fails closed per message and heals when Redis is back), the start goes on. It says
why, with the fix, in a WARNING: here a real redis-server without TLS, reached by rediss://.
"""

from __future__ import annotations

import logging

import pytest

from pubsub_toolkit.stores._redis_calls import connect


def test_rediss_to_a_plain_server_warns_at_start_with_the_tls_hint(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    tls_url = redis_url.replace("redis://", "rediss://", 1)
    with caplog.at_level(logging.WARNING, logger="pubsub_toolkit"):
        client = connect(tls_url, needed_by="a test")
    client.close()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("rediss://" in text and "redis://" in text for text in warned), warned
    assert any("PUBSUB_TOOLKIT_REDIS_URL" in text for text in warned), warned


def test_a_server_that_answers_gets_no_warning(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="pubsub_toolkit"):
        client = connect(redis_url, needed_by="a test")
    assert client.ping() is True
    client.close()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
