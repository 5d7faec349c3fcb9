"""A local Cloud Tasks (v2) emulator, driven by the official ``google-cloud-tasks`` client.

There is no official emulator, so this one is a gRPC server for service
``google.cloud.tasks.v2.CloudTasks`` built on the client library's own message types. Use it in
process::

    with CloudTasksEmulator(app_engine_host="http://127.0.0.1:8081") as emulator:
        channel = grpc.insecure_channel(emulator.address)
        client = tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=channel))

or as a process: ``python -m pubsub_toolkit_local.tasks_emulator --port 8123`` (see :mod:`.cli`).

What it does as Cloud Tasks does:

* queues: create/get/list/update (rate limits, retry config)/delete/purge/pause/resume, with the
  real status codes (NOT_FOUND, ALREADY_EXISTS, INVALID_ARGUMENT for malformed names/fields);
* tasks: create/get/list/delete/run; generated names; named tasks deduplicated, a name staying
  reserved for ``name_reservation`` (1 h by default) after the task ran or was deleted;
* dispatch at or after ``schedule_time``, never early; HTTP and App Engine targets with the
  ``X-CloudTasks-*`` / ``X-AppEngine-*`` headers; OIDC tokens signed by a local key whose
  certificates :class:`~pubsub_toolkit_local.oidc.LocalOidcIssuer` serves;
* retries with exponential backoff (``max_attempts``, ``min/max_backoff``, ``max_doublings``,
  ``max_retry_duration``, also per task), ``dispatch_deadline``, queue rate limits (token
  bucket) and ``max_concurrent_dispatches``; a task that exhausts its attempts is deleted.

Known differences: state is in memory only; no IAM, batch, CMEK or location methods
(UNIMPLEMENTED); queue-level ``http_target`` / ``app_engine_routing_override`` are stored but not
applied; OAuth tokens are not emulated; ListQueues filters are refused; redirects are not
followed (a 3xx is a failed attempt); no system throttling on 429/503 and no ``Retry-After``;
deleted queue names are reusable at once (Cloud Tasks: 7 days); ``dispatch_deadline`` below
15 s is accepted; RunTask on a task already in flight does not send it a second time.
"""

from .cli import main
from .server import DEFAULT_NAME_RESERVATION, CloudTasksEmulator

__all__ = ["DEFAULT_NAME_RESERVATION", "CloudTasksEmulator", "main"]
