"""The relay's HTTP surface on junk bodies, with valid auth: never a 5xx, nothing published.

Through Flask's test client on ``appengine/relay/main.py``'s ``create_app`` (App Engine queue
header auth; in-memory store; recording sink and scheduler): for random bytes, random JSON and
near-miss task bodies, the answer is never 5xx and never an exception. A body that is not a
valid task publishes nothing to the final topic; per the relay's contract it is dead-lettered
once with ``malformed_task`` and answered 2xx (a 4xx would only make Cloud Tasks retry a body
that can never succeed).
"""

from __future__ import annotations

import base64
import importlib.util
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from pubsub_toolkit.clock import ManualClock
from pubsub_toolkit.delay.auth import AppEngineQueueAuthenticator
from pubsub_toolkit.delay.payload import REASON_MALFORMED_TASK, DelayedMessage
from pubsub_toolkit.delay.relay import Relay
from pubsub_toolkit.errors import PermanentError
from pubsub_toolkit.message import OutboundMessage
from pubsub_toolkit.stores.dedup.memory import MemoryDedupStore
from tests.conftest import repo_root
from tests.property.strategies import hostile_text, timeish
from tests.property.test_cloudevent_properties import json_values
from tests.support.sinks import RecordingSink

FINAL, DLQ = "projects/p/topics/final", "projects/p/topics/dlq"
NOW = datetime(2030, 1, 1, tzinfo=UTC)
HEADERS = {"X-AppEngine-QueueName": "delay-queue"}

_spec = importlib.util.spec_from_file_location(
    "relay_main", repo_root() / "appengine/relay/main.py"
)
assert _spec is not None and _spec.loader is not None
relay_main: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(relay_main)


class RecordingScheduler:
    def __init__(self) -> None:
        self.hops: list[tuple[str, int]] = []

    def schedule(
        self, message: OutboundMessage, deliver_at: datetime, dedup_key: str, hop: int = 0
    ) -> str:
        self.hops.append((dedup_key, hop))
        return f"task-{dedup_key}-{hop}"


near_miss_tasks = st.fixed_dictionaries(
    {},
    optional={
        "v": st.one_of(st.just(1), json_values),
        "data": st.one_of(
            st.binary(max_size=16).map(lambda b: base64.b64encode(b).decode()), json_values
        ),
        "attributes": st.one_of(
            st.dictionaries(hostile_text, hostile_text, max_size=3), json_values
        ),
        "ordering_key": st.one_of(hostile_text, json_values),
        "dedup_key": st.one_of(hostile_text, json_values),
        "deliver_at": st.one_of(timeish, json_values),
        "hop": st.one_of(st.integers(-5, 2000), json_values),
    },
).map(lambda doc: json.dumps(doc).encode())

bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda v: json.dumps(v).encode()),
    near_miss_tasks,
    st.text(max_size=100).map(str.encode),
)


@given(body=bodies)
def test_junk_bodies_never_answer_5xx_and_publish_nothing_invalid(body: bytes) -> None:
    sink, scheduler = RecordingSink(), RecordingScheduler()
    relay = Relay(
        store=MemoryDedupStore(ManualClock(NOW)),
        sink=sink,
        final_topic=FINAL,
        dead_letter_topic=DLQ,
        lease=timedelta(seconds=30),
        ttl=timedelta(days=1),
        scheduler=scheduler,  # type: ignore[arg-type]
        clock=ManualClock(NOW),
    )
    app = relay_main.create_app(
        relay=relay, authenticator=AppEngineQueueAuthenticator("delay-queue")
    )
    client = app.test_client()
    try:
        task = DelayedMessage.from_json(body)
    except PermanentError as exc:
        assert exc.reason == REASON_MALFORMED_TASK
        task = None

    answers = [client.post("/release", data=body, headers=HEADERS) for _ in range(2)]

    assert all(a.status_code < 500 for a in answers), [a.status_code for a in answers]
    if task is None:
        assert sink.on(FINAL) == [] and scheduler.hops == [], "an invalid task was released"
        assert all(a.status_code == 200 for a in answers)
        assert all(a.json is not None and a.json["outcome"] == "dead_lettered" for a in answers)
        [dead] = sink.on(DLQ)  # dead-lettered once, although the task ran twice
        assert dead.attributes["error_reason"] == REASON_MALFORMED_TASK
    else:
        # A well-formed task: released once (or hopped once if not yet due), never twice.
        assert len(sink.on(FINAL)) + len(scheduler.hops) <= 1
