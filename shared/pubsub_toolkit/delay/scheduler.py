"""Scheduling due-later messages as Cloud Tasks tasks (the ingress side of delayed delivery).

* The task **name derives from the dedup key** (a hash, which also spreads names evenly as Cloud
  Tasks recommends), so a redelivered ingress message schedules once: AlreadyExists means
  "already scheduled" and is acked.
* Cloud Tasks accepts schedule times at most **30 days** ahead. A later message is parked at the
  horizon and the relay re-schedules it (a *hop*, with its own task name) until it is due.
* A task is at most **1 MB**; a message too large for one is a permanent error
  (``task_too_large``) and is dead-lettered by the caller.
* A create that failed is **not known to have failed** unless Cloud Tasks refused the request
  itself (:func:`create_refused`): one that timed out or found the service unavailable may have
  been applied, which a create of the same name again learns (AlreadyExists).
* HTTP targets carry an **OIDC token** for the relay's audience; App Engine targets rely on the
  ``X-AppEngine-QueueName`` header that only Cloud Tasks can set.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from google.api_core import exceptions as gexc

from pubsub_toolkit._extras import import_optional
from pubsub_toolkit.attributes import FIFO_SEQ
from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit.config import DelaySettings
from pubsub_toolkit.delay.cancel import fate_key
from pubsub_toolkit.delay.payload import DelayedMessage
from pubsub_toolkit.errors import ConfigurationError, PermanentError, TransientError
from pubsub_toolkit.message import OutboundMessage

if TYPE_CHECKING:
    from google.cloud import tasks_v2

logger = logging.getLogger(__name__)

RELEASE_PATH = "/release"
MAX_TASK_BYTES = 1_000_000 - 16_384  # Cloud Tasks' 1 MB, less room for headers and metadata
HORIZON = timedelta(days=30) - timedelta(hours=1)  # the furthest we park a task
MAX_DELAY = timedelta(days=365)
REASON_TASK_TOO_LARGE = "task_too_large"
REASON_DELAY_TOO_LONG = "delay_too_long"
_RPC_TIMEOUT = 30.0


@dataclass(frozen=True)
class HttpTarget:
    """Cloud Tasks calls ``url`` with an OIDC token for ``audience`` signed as ``invoker_email``."""

    url: str
    invoker_email: str
    audience: str


@dataclass(frozen=True)
class AppEngineTarget:
    """Cloud Tasks calls the App Engine service ``service`` at ``RELEASE_PATH``."""

    service: str = "default"


TaskTarget = HttpTarget | AppEngineTarget


def _require_tasks() -> None:
    # google-cloud-tasks is the [tasks] extra: imported when a delay is first scheduled, and
    # its absence is a MissingDependencyError naming the extra (then the typed import below).
    import_optional("google.cloud.tasks_v2", extra="tasks", needed_by="delayed delivery")


def tasks_client(emulator_host: str | None = None) -> tasks_v2.CloudTasksClient:
    """The official client; pointed at the local emulator over plaintext gRPC when given."""
    _require_tasks()
    from google.cloud import tasks_v2

    if emulator_host is None:
        return tasks_v2.CloudTasksClient()
    import grpc
    from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport

    # ClientOptions(api_endpoint=...) alone would still use TLS; the emulator speaks plaintext.
    # No 4 MB receive limit (-1: none, as against Google Cloud): listing tasks returns their
    # bodies (up to 1 MB each).
    unlimited = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    channel = grpc.insecure_channel(emulator_host, options=unlimited)
    return tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=channel))


@dataclass(frozen=True)
class TaskPlan:
    """What one task of a delayed message is: its id, its body and when it runs."""

    task_id: str
    body: bytes
    schedule_time: datetime


def plan_task(
    message: OutboundMessage, deliver_at: datetime, dedup_key: str, hop: int, *, now: datetime
) -> TaskPlan:
    """The task for ``message`` (PermanentError when Cloud Tasks cannot hold it).

    Pure, so the simulation's Cloud Tasks model plans tasks exactly as production does.
    """
    if deliver_at - now > MAX_DELAY:
        raise PermanentError(
            REASON_DELAY_TOO_LONG, f"deliver_at is more than {MAX_DELAY.days} days ahead"
        )
    body = DelayedMessage(message, dedup_key, deliver_at, hop).to_json()
    if len(body) > MAX_TASK_BYTES:
        raise PermanentError(
            REASON_TASK_TOO_LARGE,
            f"the task body would be {len(body)} bytes; Cloud Tasks accepts about 1 MB",
        )
    task_key = fate_key(dedup_key, message.attributes)  # a replay: a task of its own
    return TaskPlan(
        task_id(task_key, hop, message.attributes.get(FIFO_SEQ)),
        body,
        min(deliver_at, now + HORIZON),
    )


def task_id(dedup_key: str, hop: int = 0, fifo_seq: str | None = None) -> str:
    """A task id for a key (a hash, which also spreads names evenly as Cloud Tasks asks)."""
    name = dedup_key if fifo_seq is None else f"{dedup_key}\x00fifo_seq={fifo_seq}"
    return hashlib.sha256(f"{name}\x00{hop}".encode()).hexdigest()


def create_refused(error: BaseException) -> bool:
    """True when ``error``, raised by a ``schedule``, means no task of that name was made.

    Only a :class:`PermanentError` says so: the request itself was refused (InvalidArgument,
    FailedPrecondition) or never sent (too large, too far ahead), and every create of that name
    - the same body - is refused the same. A transient error may have been applied (a timeout,
    UNAVAILABLE); and even a refusal of *this* call (quota, permission) says nothing about an
    earlier create of the same name - on an earlier attempt, or a duplicate run - that may
    have been applied.
    """
    return isinstance(error, PermanentError)


class CloudTasksScheduler:
    """Creates (and deletes) the tasks that release delayed messages through the relay."""

    def __init__(
        self,
        client: tasks_v2.CloudTasksClient,
        *,
        queue: str,
        target: TaskTarget,
        clock: Clock = SYSTEM_CLOCK,
        dispatch_deadline: timedelta = timedelta(seconds=60),
    ) -> None:
        self._client = client
        self.queue = queue
        self._target = target
        self._clock = clock
        self._dispatch_deadline = dispatch_deadline

    @classmethod
    def from_settings(cls, delay: DelaySettings) -> CloudTasksScheduler:
        target: TaskTarget
        if delay.target == "http":
            if delay.relay_url is None or delay.invoker_email is None:
                raise ConfigurationError(
                    "PUBSUB_TOOLKIT_RELAY_URL and PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT are required"
                )
            target = HttpTarget(
                url=delay.relay_url + RELEASE_PATH,
                invoker_email=delay.invoker_email,
                audience=delay.audience or delay.relay_url,
            )
        else:
            target = AppEngineTarget(service=delay.appengine_service)
        return cls(tasks_client(delay.tasks_emulator_host), queue=delay.queue, target=target)

    def task_name(self, dedup_key: str, hop: int = 0, fifo_seq: str | None = None) -> str:
        """The task's full name: a hash of the dedup key, the FIFO number if any, and the hop.

        The number is part of it because a producer's retry renumbered by the counter is a
        second copy at another number, which must be released too (the consumer's gate runs
        the lowest one and fills the other); with the key alone, its task would be taken for
        the first copy's and its number would never arrive.
        """
        return f"{self.queue}/tasks/{task_id(dedup_key, hop, fifo_seq)}"

    def schedule(
        self, message: OutboundMessage, deliver_at: datetime, dedup_key: str, hop: int = 0
    ) -> str:
        """Park ``message`` until ``deliver_at`` (or the horizon); return the task name."""
        plan = plan_task(message, deliver_at, dedup_key, hop, now=self._clock.now())
        name = f"{self.queue}/tasks/{plan.task_id}"
        task = self._task(name, plan.body, plan.schedule_time)
        try:
            created = self._client.create_task(parent=self.queue, task=task, timeout=_RPC_TIMEOUT)
        except gexc.AlreadyExists:
            # Same key and hop: this message was scheduled before (a redelivery). Not an error.
            logger.info("task %s already exists; message already scheduled", name)
            return name
        except (gexc.InvalidArgument, gexc.FailedPrecondition) as exc:
            raise PermanentError(
                "schedule_rejected", f"Cloud Tasks rejected the task: {exc}"
            ) from exc
        except gexc.GoogleAPICallError as exc:
            raise TransientError(f"could not create task {name}: {exc}") from exc
        return str(created.name)

    def delete(self, dedup_key: str, hop: int = 0) -> bool:
        """Delete the task for ``dedup_key``; False if there was none (ran, or never made)."""
        try:
            self._client.delete_task(name=self.task_name(dedup_key, hop), timeout=_RPC_TIMEOUT)
        except gexc.NotFound:
            return False
        except gexc.GoogleAPICallError as exc:
            raise TransientError(f"could not delete task for {dedup_key!r}: {exc}") from exc
        return True

    def _task(self, name: str, body: bytes, schedule_time: datetime) -> tasks_v2.Task:
        _require_tasks()
        from google.cloud import tasks_v2

        headers = {"Content-Type": "application/json"}
        if isinstance(self._target, HttpTarget):
            return tasks_v2.Task(
                name=name,
                schedule_time=schedule_time,
                dispatch_deadline=self._dispatch_deadline,
                http_request=tasks_v2.HttpRequest(
                    url=self._target.url,
                    http_method=tasks_v2.HttpMethod.POST,
                    headers=headers,
                    body=body,
                    oidc_token=tasks_v2.OidcToken(
                        service_account_email=self._target.invoker_email,
                        audience=self._target.audience,
                    ),
                ),
            )
        return tasks_v2.Task(
            name=name,
            schedule_time=schedule_time,
            dispatch_deadline=self._dispatch_deadline,
            app_engine_http_request=tasks_v2.AppEngineHttpRequest(
                relative_uri=RELEASE_PATH,
                http_method=tasks_v2.HttpMethod.POST,
                app_engine_routing=tasks_v2.AppEngineRouting(service=self._target.service),
                headers=headers,
                body=body,
            ),
        )
