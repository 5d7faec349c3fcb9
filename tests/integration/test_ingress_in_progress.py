"""A delivery that finds its dedup key claimed by a live worker elsewhere, at the ingress function.

It is an expected race between redeliveries, not an error: the function answers 503 (Pub/Sub
delivers again later, by which time the key is done and the copy is a duplicate), and the log
has one INFO line for it - no ERROR, no traceback (there were hundreds per acceptance run).
"""

from __future__ import annotations

import base64
import logging
from datetime import UTC, datetime, timedelta

import functions_framework
import pytest

from pubsub_toolkit.config import Settings
from pubsub_toolkit.envelope import parse_envelope
from pubsub_toolkit.ingress.pipeline import INGRESS_NAMESPACE
from pubsub_toolkit.message import Message
from pubsub_toolkit.stores.factory import dedup_store_from_settings
from pubsub_toolkit_local.topology import create_topology
from tests.conftest import repo_root


def test_a_claim_in_progress_elsewhere_is_one_info_line_and_a_503(
    pubsub_emulator: str,
    redis_url: str,
    project_id: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topology = create_topology(project_id)
    env = {
        "GOOGLE_CLOUD_PROJECT": project_id,
        "PUBSUB_TOOLKIT_FINAL_TOPIC": topology.final,
        "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
        "PUBSUB_TOOLKIT_STORE_BACKEND": "redis",
        "PUBSUB_TOOLKIT_REDIS_URL": redis_url,
        "PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS": "0",  # no flusher thread outliving the test's Redis
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    data, attributes = b"hello", {"dedup_key": f"busy-{project_id}"}
    envelope = parse_envelope(Message(data, attributes, message_id="7"), now=datetime.now(UTC))
    # Another ingress instance is half-way through this key: its claim is live.
    store = dedup_store_from_settings(Settings.from_env(env))
    store.claim(
        INGRESS_NAMESPACE,
        envelope.dedup_key,
        envelope.fingerprint,
        lease=timedelta(minutes=5),
        ttl=timedelta(hours=1),
    )

    app = functions_framework.create_app(
        target="ingress",
        source=str(repo_root() / "functions/ingress/main.py"),
        signature_type="http",
    )
    # The function logs through the toolkit's logger, which does not propagate to the root.
    toolkit = logging.getLogger("pubsub_toolkit")
    toolkit.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.DEBUG):
            answer = app.test_client().post(
                "/",
                json={
                    "message": {
                        "data": base64.b64encode(data).decode(),
                        "attributes": attributes,
                        "messageId": "7",
                        "publishTime": "2030-01-01T00:00:00Z",
                    },
                    "subscription": "projects/p/subscriptions/origin-push",
                },
            )
    finally:
        toolkit.removeHandler(caplog.handler)

    assert answer.status_code == 503  # not 2xx: Pub/Sub delivers it again
    visible = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert [r.levelname for r in visible] == ["INFO"], [r.getMessage() for r in visible]
    assert "being processed elsewhere" in visible[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)
