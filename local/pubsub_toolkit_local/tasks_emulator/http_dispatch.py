"""One dispatch attempt: the HTTP request Cloud Tasks would send, and a call that can be aborted.

Requests go out with ``http.client`` rather than a higher-level client because the emulator must
be able to cut an in-flight call from another thread (``stop()`` with a slow target in flight
returns at once): :meth:`HttpCall.abort` shuts the socket down, which wakes the blocked read.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from google.rpc import code_pb2

logger = logging.getLogger(__name__)

# HttpMethod enum of google.cloud.tasks.v2 -> verb (0, unspecified, means POST).
HTTP_METHODS = {
    0: "POST",
    1: "POST",
    2: "GET",
    3: "HEAD",
    4: "PUT",
    5: "DELETE",
    6: "PATCH",
    7: "OPTIONS",
}
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
HTTP_USER_AGENT = "Google-Cloud-Tasks"
APP_ENGINE_USER_AGENT = "AppEngine-Google; (+http://code.google.com/appengine)"
_MAX_RESPONSE_BYTES = 1 << 20  # the response body is ignored; read a bounded amount of it
# Headers a task cannot set: computed by Cloud Tasks or reserved for Google.
_RESERVED = frozenset({"host", "content-length", "user-agent"})
_RESERVED_PREFIXES = ("x-google-", "x-appengine-", "x-cloudtasks-")
# HTTP status -> google.rpc.Code, following the mapping documented in google/rpc/code.proto.
_HTTP_TO_RPC = {
    400: code_pb2.INVALID_ARGUMENT,
    401: code_pb2.UNAUTHENTICATED,
    403: code_pb2.PERMISSION_DENIED,
    404: code_pb2.NOT_FOUND,
    409: code_pb2.ABORTED,
    429: code_pb2.RESOURCE_EXHAUSTED,
    499: code_pb2.CANCELLED,
    501: code_pb2.UNIMPLEMENTED,
    503: code_pb2.UNAVAILABLE,
    504: code_pb2.DEADLINE_EXCEEDED,
}


@dataclass(frozen=True)
class AttemptInfo:
    """What the task headers report about one attempt."""

    queue_id: str
    task_id: str
    retry_count: int  # attempts made before this one
    execution_count: int  # earlier attempts answered with a non-5xx response
    eta: datetime  # the schedule time this attempt was due at
    previous_response: int | None  # HTTP status of the previous attempt, if it got one


@dataclass(frozen=True)
class OutgoingRequest:
    """A fully built dispatch request."""

    url: str
    method: str
    headers: Mapping[str, str]
    body: bytes
    timeout: float  # the task's dispatch_deadline, in seconds


@dataclass(frozen=True)
class Outcome:
    """How an attempt ended. ``status`` is None when no HTTP response arrived."""

    status: int | None
    code: int  # google.rpc.Code, for Attempt.response_status
    message: str
    aborted: bool = False  # cut short by the emulator stopping: not a real attempt result

    @property
    def succeeded(self) -> bool:
        """A 2xx response, the only thing Cloud Tasks counts as success."""
        return self.status is not None and 200 <= self.status < 300

    @classmethod
    def from_status(cls, status: int) -> Outcome:
        """The outcome of an attempt answered with HTTP ``status``."""
        if 200 <= status < 300:
            code = code_pb2.OK
        else:
            fallback = code_pb2.INTERNAL if status >= 500 else code_pb2.FAILED_PRECONDITION
            code = _HTTP_TO_RPC.get(status, fallback)
        return cls(status, code, f"HTTP {status}")


def http_target_request(
    request: Any, info: AttemptInfo, timeout: float, sign: Callable[[str, str], str]
) -> OutgoingRequest:
    """The request for an ``HttpRequest`` target, with the ``X-CloudTasks-*`` headers.

    ``sign(audience, email)`` makes the OIDC token when the task asks for one.
    """
    headers = _user_headers(request.headers)
    headers["User-Agent"] = HTTP_USER_AGENT
    headers.update(_task_headers("X-CloudTasks-", info))
    if request.HasField("oidc_token"):
        # Cloud Tasks' default audience is the target URL itself.
        audience = request.oidc_token.audience or request.url
        token = sign(audience, request.oidc_token.service_account_email)
        headers["Authorization"] = f"Bearer {token}"
    elif request.HasField("oauth_token"):
        logger.warning("task %s: OAuth tokens are not emulated; sent without one", info.task_id)
    method = HTTP_METHODS.get(request.http_method, "POST")
    return OutgoingRequest(request.url, method, headers, request.body, timeout)


def app_engine_request(
    request: Any, info: AttemptInfo, timeout: float, base_url: str
) -> OutgoingRequest:
    """The request for an ``AppEngineHttpRequest``, sent to ``base_url + relative_uri``."""
    headers = _user_headers(request.headers)
    # Cloud Tasks appends its own agent to a task-supplied User-Agent.
    user_agent = next((v for k, v in request.headers.items() if k.lower() == "user-agent"), "")
    headers["User-Agent"] = f"{user_agent} {APP_ENGINE_USER_AGENT}".strip()
    if request.body and not any(k.lower() == "content-type" for k in headers):
        headers["Content-Type"] = "application/octet-stream"
    headers.update(_task_headers("X-AppEngine-", info))
    url = base_url.rstrip("/") + (request.relative_uri or "/")
    method = HTTP_METHODS.get(request.http_method, "POST")
    return OutgoingRequest(url, method, headers, request.body, timeout)


def _user_headers(headers: Mapping[str, str]) -> dict[str, str]:
    kept = {}
    for name, value in headers.items():
        lower = name.lower()
        if lower in _RESERVED or lower.startswith(_RESERVED_PREFIXES):
            continue
        kept[name] = value
    return kept


def _task_headers(prefix: str, info: AttemptInfo) -> dict[str, str]:
    headers = {
        f"{prefix}QueueName": info.queue_id,
        f"{prefix}TaskName": info.task_id,
        f"{prefix}TaskRetryCount": str(info.retry_count),
        f"{prefix}TaskExecutionCount": str(info.execution_count),
        f"{prefix}TaskETA": f"{info.eta.timestamp():.6f}",  # seconds since the epoch
    }
    if info.previous_response is not None:
        headers[f"{prefix}TaskPreviousResponse"] = str(info.previous_response)
    return headers


class HttpCall:
    """One HTTP request, run by a dispatch thread and abortable from any other thread."""

    def __init__(self, request: OutgoingRequest, *, allow_remote: bool) -> None:
        self.request = request
        self._allow_remote = allow_remote
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self._aborted = False

    def abort(self) -> None:
        """Cut the call short: a blocked connect/read returns at once with an aborted outcome."""
        with self._lock:
            self._aborted = True
            conn = self._conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed by the dispatch thread
                sock.shutdown(socket.SHUT_RDWR)

    def run(self) -> Outcome:
        """Send the request and wait for the response, within the dispatch deadline."""
        request = self.request
        parts = urlsplit(request.url)
        host = parts.hostname or ""
        if not self._allow_remote and not _is_loopback(host):
            # A local emulator must never reach a real service by accident.
            return Outcome(None, code_pb2.PERMISSION_DENIED, f"refused non-loopback host {host}")
        deadline = time.monotonic() + request.timeout
        connection_class: type[http.client.HTTPConnection] = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        conn = connection_class(host, parts.port, timeout=request.timeout)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        body = request.body if request.method in BODY_METHODS else None
        try:
            conn.connect()
            with self._lock:
                if self._aborted:
                    return _aborted()
                self._conn = conn
            conn.request(request.method, target, body=body, headers=dict(request.headers))
            _limit(conn, deadline)
            response = conn.getresponse()
            _limit(conn, deadline)
            response.read(_MAX_RESPONSE_BYTES)
            return Outcome.from_status(response.status)
        except TimeoutError:
            if self._is_aborted():
                return _aborted()
            return Outcome(None, code_pb2.DEADLINE_EXCEEDED, "dispatch deadline exceeded")
        except (OSError, http.client.HTTPException) as err:
            if self._is_aborted():
                return _aborted()
            return Outcome(None, code_pb2.UNAVAILABLE, f"{type(err).__name__}: {err}")
        finally:
            conn.close()

    def _is_aborted(self) -> bool:
        with self._lock:
            return self._aborted


def _limit(conn: http.client.HTTPConnection, deadline: float) -> None:
    """Give the next socket operations only what is left of the dispatch deadline."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("dispatch deadline exceeded")
    if conn.sock is not None:
        conn.sock.settimeout(remaining)


def _aborted() -> Outcome:
    return Outcome(None, code_pb2.CANCELLED, "emulator stopping", aborted=True)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
