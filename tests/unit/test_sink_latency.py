"""PubSubSink's own publisher client: no batching window on the blocking publish path.

Every ``PubSubSink.publish`` waits for its message's future, so google-cloud-pubsub's default
10 ms batching window was pure latency on ingress's immediate path (and on the relay's and the
dead-letterer's). These tests pin the settings the sink builds its client with; the effect is
measured by ``bench/latency.py``, not asserted here.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from google.cloud import pubsub_v1  # type: ignore[attr-defined]

from pubsub_toolkit.producer.sink import PubSubSink, publisher_for_sink


@pytest.fixture(autouse=True)
def _emulator_host(monkeypatch: pytest.MonkeyPatch) -> None:
    # Building a client needs credentials or an emulator host; nothing is ever sent to it.
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "127.0.0.1:9")


def test_the_sink_client_commits_each_batch_at_once_with_ordering_on() -> None:
    client = publisher_for_sink()
    try:
        assert client.batch_settings.max_latency == 0
        # The other limits stay the library's defaults: only the waiting window changes.
        defaults = pubsub_v1.types.BatchSettings()
        assert client.batch_settings.max_messages == defaults.max_messages
        assert client.batch_settings.max_bytes == defaults.max_bytes
        assert client.publisher_options.enable_message_ordering
    finally:
        client.stop()


def test_a_sink_without_a_client_builds_one_with_the_given_window() -> None:
    sink = PubSubSink(max_latency=timedelta(milliseconds=5))
    try:
        assert sink._client.batch_settings.max_latency == pytest.approx(0.005)
        assert sink._client.publisher_options.enable_message_ordering
    finally:
        sink.close()


def test_the_default_sink_has_no_batching_window() -> None:
    sink = PubSubSink()
    try:
        assert sink._client.batch_settings.max_latency == 0
    finally:
        sink.close()


def test_a_given_client_keeps_its_own_settings() -> None:
    client = pubsub_v1.PublisherClient(
        batch_settings=pubsub_v1.types.BatchSettings(max_latency=0.25)
    )
    sink = PubSubSink(client, max_latency=timedelta(0))
    try:
        assert sink._client is client
        assert client.batch_settings.max_latency == 0.25
    finally:
        sink.close()
