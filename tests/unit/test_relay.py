"""The relay's decisions and its HTTP surface, with real JWTs from the local OIDC issuer.

The relay logic runs on the in-memory store and a recording sink (our own protocols); tokens are
real RS256 JWTs signed by :class:`LocalOidcIssuer` and verified by google-auth.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from flask.testing import FlaskClient

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.delay.auth import AppEngineQueueAuthenticator, OidcAuthenticator
from pubsub_toolkit.delay.cancel import cancel
from pubsub_toolkit.delay.payload import DelayedMessage
from pubsub_toolkit.delay.relay import Relay, RelayOutcome
from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from pubsub_toolkit_local.oidc import LocalOidcIssuer
from tests.conftest import repo_root
from tests.support.sinks import RecordingSink

FINAL, DLQ = "projects/p/topics/final", "projects/p/topics/dlq"
AUDIENCE = "http://127.0.0.1:9/release"
INVOKER = "tasks-invoker@p.iam.gserviceaccount.com"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime.now(UTC))


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def store(clock: ManualClock) -> MemoryDedupStore:
    return MemoryDedupStore(clock)


@pytest.fixture
def relay(store: MemoryDedupStore, sink: RecordingSink, clock: ManualClock) -> Relay:
    return Relay(
        store=store,
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(days=8),
        clock=clock,
    )


def body(key: str = "k", data: bytes = b"payload", due: datetime | None = None) -> bytes:
    message = OutboundMessage(data, {"dedup_key": key, "x": "y"}, ordering_key="g")
    return DelayedMessage(message, key, due or datetime(2020, 1, 1, tzinfo=UTC)).to_json()


def test_due_message_is_published_with_attributes_and_ordering_key(
    relay: Relay, sink: RecordingSink
) -> None:
    assert relay.release(body()).outcome is RelayOutcome.PUBLISHED
    [out] = sink.on(FINAL)
    assert (out.data, dict(out.attributes), out.ordering_key) == (
        b"payload",
        {"dedup_key": "k", "x": "y"},
        "g",
    )


def test_task_executed_twice_publishes_once(relay: Relay, sink: RecordingSink) -> None:
    relay.release(body())
    assert relay.release(body()).outcome is RelayOutcome.DUPLICATE
    assert len(sink.on(FINAL)) == 1


def test_cancelled_message_is_not_published(
    relay: Relay, sink: RecordingSink, store: MemoryDedupStore
) -> None:
    result = cancel("k", store=store, scheduler=NoTasks())
    assert result.cancelled and not result.task_deleted
    assert relay.release(body()).outcome is RelayOutcome.CANCELLED
    assert sink.on(FINAL) == []
    assert cancel("k", store=store, scheduler=NoTasks()).cancelled  # idempotent


class NoTasks:
    """Our own TaskDeleter protocol: no task to delete (it already ran, or never existed)."""

    def delete(self, dedup_key: str, hop: int = 0) -> bool:
        return False


def test_cancel_after_release_says_delivered(
    relay: Relay, sink: RecordingSink, store: MemoryDedupStore
) -> None:
    assert relay.release(body()).outcome is RelayOutcome.PUBLISHED
    assert cancel("k", store=store, scheduler=NoTasks()).already_delivered


def test_a_cancel_landing_between_the_check_and_the_publish_wins_or_is_told_delivered(
    clock: ManualClock, sink: RecordingSink
) -> None:
    """The race of defect 5: cancel() runs right after the relay's tombstone check."""

    answers: list[bool] = []

    class CancelDuringClaim(MemoryDedupStore):
        def claim(self, namespace: str, key: str, fingerprint: str, **kw: Any) -> Any:
            if namespace == "relay" and fingerprint != "cancelled" and not answers:
                answers.append(cancel(key, store=self, scheduler=NoTasks()).cancelled)
            return super().claim(namespace, key, fingerprint, **kw)

    store = CancelDuringClaim(clock)
    relay = Relay(
        store=store,
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(days=1),
        clock=clock,
    )
    outcome = relay.release(body()).outcome
    assert answers == [True]  # cancel said "not delivered" ...
    assert outcome is RelayOutcome.CANCELLED and sink.on(FINAL) == []  # ... and it was not
    assert sink.on(DLQ) == []  # and no false "mismatch" dead letter


def test_malformed_body_is_dead_lettered_once(relay: Relay, sink: RecordingSink) -> None:
    assert relay.release(b"{broken").outcome is RelayOutcome.DEAD_LETTERED
    assert relay.release(b"{broken").outcome is RelayOutcome.DEAD_LETTERED
    [dead] = sink.on(DLQ)
    assert dead.data == b"{broken"
    assert dead.attributes["error_reason"] == "malformed_task"
    assert sink.on(FINAL) == []


def test_reused_key_with_other_content_is_dead_lettered(relay: Relay, sink: RecordingSink) -> None:
    relay.release(body(data=b"first"))
    assert relay.release(body(data=b"second")).outcome is RelayOutcome.DEAD_LETTERED
    assert [m.data for m in sink.on(FINAL)] == [b"first"]
    assert sink.on(DLQ)[0].attributes["error_reason"] == "fingerprint_mismatch"


def test_a_task_fired_a_moment_early_waits_and_is_never_early(
    store: MemoryDedupStore, sink: RecordingSink
) -> None:
    relay = Relay(
        store=store,
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(days=8),
    )
    due = datetime.now(UTC) + timedelta(milliseconds=300)
    relay.release(body(due=due))
    assert datetime.now(UTC) >= due
    assert len(sink.on(FINAL)) == 1


# --- the HTTP surface -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def issuer() -> Iterator[LocalOidcIssuer]:
    with LocalOidcIssuer() as running:
        yield running


@pytest.fixture(scope="module")
def relay_main() -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "relay_main", repo_root() / "appengine/relay/main.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def client(relay_main: object, relay: Relay, issuer: LocalOidcIssuer) -> FlaskClient:
    auth = OidcAuthenticator(audience=AUDIENCE, invoker_email=INVOKER, certs_url=issuer.certs_url)
    app = relay_main.create_app(relay=relay, authenticator=auth)  # type: ignore[attr-defined]
    return app.test_client()


def test_healthz(client: FlaskClient) -> None:
    assert client.get("/healthz").json == {"status": "ok"}


def test_valid_token_releases(
    client: FlaskClient, issuer: LocalOidcIssuer, sink: RecordingSink
) -> None:
    token = issuer.sign(AUDIENCE, INVOKER)
    response = client.post("/release", data=body(), headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    assert response.json is not None and response.json["outcome"] == "published"
    assert len(sink.on(FINAL)) == 1


def _forged_headers(issuer: LocalOidcIssuer) -> dict[str, dict[str, str]]:
    with LocalOidcIssuer() as stranger:  # another key: a bad signature
        bad_signature = stranger.sign(AUDIENCE, INVOKER)
    expired = issuer.sign(
        AUDIENCE, INVOKER, now=datetime.now(UTC) - timedelta(hours=3), lifetime=timedelta(hours=1)
    )
    good = issuer.sign(AUDIENCE, INVOKER)
    tampered = good[:-6] + ("AAAAAA" if not good.endswith("AAAAAA") else "BBBBBB")
    return {
        "no token": {},
        "not bearer": {"Authorization": f"Basic {good}"},
        "bad signature": {"Authorization": f"Bearer {bad_signature}"},
        "tampered": {"Authorization": f"Bearer {tampered}"},
        "wrong audience": {"Authorization": f"Bearer {issuer.sign('https://evil/', INVOKER)}"},
        "wrong email": {"Authorization": f"Bearer {issuer.sign(AUDIENCE, 'intruder@p.iam')}"},
        "expired": {"Authorization": f"Bearer {expired}"},
        "garbage": {"Authorization": "Bearer not.a.jwt"},
    }


def test_forged_requests_are_refused_and_publish_nothing(
    client: FlaskClient, issuer: LocalOidcIssuer, sink: RecordingSink
) -> None:
    for case, headers in _forged_headers(issuer).items():
        response = client.post("/release", data=body(key=case), headers=headers)
        expected = 401 if case in ("no token", "not bearer") else 403
        assert response.status_code == expected, case
    assert sink.published == {}


def test_app_engine_mode_requires_the_queue_header(
    relay_main: object, relay: Relay, sink: RecordingSink
) -> None:
    app = relay_main.create_app(  # type: ignore[attr-defined]
        relay=relay, authenticator=AppEngineQueueAuthenticator("delay-queue")
    )
    client = app.test_client()
    assert client.post("/release", data=body()).status_code == 403
    wrong = client.post("/release", data=body(), headers={"X-AppEngine-QueueName": "other"})
    assert wrong.status_code == 403
    assert sink.published == {}
    ok = client.post("/release", data=body(), headers={"X-AppEngine-QueueName": "delay-queue"})
    assert ok.status_code == 200
    assert len(sink.on(FINAL)) == 1


def test_transient_failure_answers_503_and_retry_succeeds(
    client: FlaskClient, issuer: LocalOidcIssuer, sink: RecordingSink
) -> None:
    headers = {"Authorization": f"Bearer {issuer.sign(AUDIENCE, INVOKER)}"}
    sink.fail_next = 1
    assert client.post("/release", data=body(), headers=headers).status_code == 503
    assert client.post("/release", data=body(), headers=headers).status_code == 200
    assert len(sink.on(FINAL)) == 1
