"""What CreateTask accepts: the checks Cloud Tasks makes, and the fields it fills in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import grpc

from .errors import ApiError, invalid_argument
from .http_dispatch import BODY_METHODS, HTTP_METHODS
from .policy import Pb

MAX_TASK_BYTES = 1024 * 1024
MAX_SCHEDULE_AHEAD = timedelta(days=30)
MAX_URL_LENGTH = 2083
DEFAULT_DISPATCH_DEADLINE = timedelta(minutes=10)
MAX_HTTP_DEADLINE = timedelta(minutes=30)
MAX_APP_ENGINE_DEADLINE = timedelta(hours=24, seconds=15)


def prepare_new_task(pb: Pb, now: datetime, *, app_engine_host: str | None) -> None:
    """Refuse what Cloud Tasks refuses; fill schedule_time, deadline and create_time."""
    target = pb.WhichOneof("message_type")
    if target == "http_request":
        request = pb.http_request
        parts = urlsplit(request.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise invalid_argument("http_request.url must be an absolute http(s) URL")
        if len(request.url) > MAX_URL_LENGTH:
            raise invalid_argument(f"http_request.url is longer than {MAX_URL_LENGTH}")
        max_deadline = MAX_HTTP_DEADLINE
    elif target == "app_engine_http_request":
        if app_engine_host is None:
            raise ApiError(
                grpc.StatusCode.FAILED_PRECONDITION,
                "App Engine tasks need the emulator's app_engine_host (--app-engine-host)",
            )
        request = pb.app_engine_http_request
        request.relative_uri = request.relative_uri or "/"
        if not request.relative_uri.startswith("/") or " " in request.relative_uri:
            raise invalid_argument("relative_uri must start with '/' and contain no spaces")
        max_deadline = MAX_APP_ENGINE_DEADLINE
    else:
        raise invalid_argument("a task needs http_request or app_engine_http_request")
    method = HTTP_METHODS.get(request.http_method)
    if method is None:
        raise invalid_argument(f"unknown http_method {request.http_method}")
    if request.body and method not in BODY_METHODS:
        raise invalid_argument(f"a body is allowed only with POST, PUT or PATCH, not {method}")
    if pb.ByteSize() > MAX_TASK_BYTES:
        raise invalid_argument(f"task size {pb.ByteSize()} exceeds {MAX_TASK_BYTES} bytes")
    if pb.HasField("schedule_time"):
        if pb.schedule_time.ToDatetime(tzinfo=UTC) > now + MAX_SCHEDULE_AHEAD:
            raise invalid_argument("schedule_time is more than 30 days in the future")
        pb.schedule_time.nanos -= pb.schedule_time.nanos % 1000  # microsecond precision
    else:
        pb.schedule_time.FromDatetime(now)
    if pb.HasField("dispatch_deadline") and pb.dispatch_deadline.ToTimedelta():
        deadline = pb.dispatch_deadline.ToTimedelta()
        # Cloud Tasks' lower bound (15 s) is not enforced, so tests can use short deadlines.
        if not timedelta(0) < deadline <= max_deadline:
            raise invalid_argument(f"dispatch_deadline must be in (0, {max_deadline}]")
    else:
        pb.dispatch_deadline.FromTimedelta(DEFAULT_DISPATCH_DEADLINE)
    for output_only in ("dispatch_count", "response_count", "first_attempt", "last_attempt"):
        pb.ClearField(output_only)
    pb.create_time.FromSeconds(int(now.timestamp()))  # truncated to the second, as documented
