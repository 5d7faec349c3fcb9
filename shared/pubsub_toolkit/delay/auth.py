"""Authenticating the requests that reach the relay: only Cloud Tasks may release messages.

* :class:`OidcAuthenticator` - HTTP targets. Cloud Tasks sends ``Authorization: Bearer <JWT>``
  signed by Google for the tasks service account; the relay checks the signature against
  Google's certificates (the local stack's issuer, locally), the audience, the issuer, expiry,
  and that the email is the configured invoker and verified.
* :class:`AppEngineQueueAuthenticator` - App Engine targets. App Engine strips
  ``X-AppEngine-QueueName`` from external requests, so its presence proves Cloud Tasks sent it.
  Only safe *on App Engine*; anywhere else the header can be forged.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

import requests

from pubsub_toolkit.config import DelaySettings
from pubsub_toolkit.errors import ConfigurationError, ToolkitError, TransientError

GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
GOOGLE_ISSUERS = frozenset({"https://accounts.google.com", "accounts.google.com"})
_CERT_CACHE_SECONDS = 300.0
_MIN_REFRESH = 30.0
_CLOCK_SKEW_SECONDS = 10


class AuthError(ToolkitError):
    """The request is not from Cloud Tasks: 401 without credentials, 403 with bad ones."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class RequestAuthenticator(Protocol):
    def authenticate(self, headers: Mapping[str, str]) -> str:
        """Return who sent the request, or raise AuthError."""
        ...


class _CertCache:
    """Google's signing certificates, fetched at most every few minutes (not per request)."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._lock = threading.Lock()
        self._certs: dict[str, str] = {}
        self._fetched_at = float("-inf")

    def get(self, *, refresh: bool = False) -> dict[str, str]:
        """The certificates; ``refresh`` refetches, but at most once per refresh interval, so
        tokens with made-up key ids cannot make every request fetch."""
        with self._lock:
            age = time.monotonic() - self._fetched_at
            if age > _CERT_CACHE_SECONDS or not self._certs or (refresh and age > _MIN_REFRESH):
                try:
                    response = requests.get(self._url, timeout=10)
                    response.raise_for_status()
                    self._certs = dict(response.json())
                except (requests.RequestException, ValueError) as exc:
                    # Not the caller's fault: answer 5xx so Cloud Tasks retries later.
                    raise TransientError(f"cannot fetch signing certificates: {exc}") from exc
                self._fetched_at = time.monotonic()
            return self._certs


class OidcAuthenticator:
    """Verifies Cloud Tasks' OIDC tokens with google-auth."""

    def __init__(
        self, *, audience: str, invoker_email: str, certs_url: str = GOOGLE_CERTS_URL
    ) -> None:
        self.audience = audience
        self.invoker_email = invoker_email
        self._certs = _CertCache(certs_url)

    def authenticate(self, headers: Mapping[str, str]) -> str:
        from google.auth import exceptions as auth_exceptions
        from google.auth import jwt

        header = headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise AuthError(401, "missing bearer token")
        try:
            claims = self._decode(jwt, token)
        except (ValueError, auth_exceptions.GoogleAuthError) as exc:
            raise AuthError(403, f"invalid token: {exc}") from exc
        if claims.get("iss") not in GOOGLE_ISSUERS:
            raise AuthError(403, f"unexpected issuer {claims.get('iss')!r}")
        if claims.get("email") != self.invoker_email or claims.get("email_verified") is not True:
            raise AuthError(403, f"token is for {claims.get('email')!r}, not the tasks invoker")
        return str(claims["email"])

    def _decode(self, jwt: Any, token: str) -> dict[str, Any]:
        try:
            return dict(
                jwt.decode(
                    token,
                    certs=self._certs.get(),
                    audience=self.audience,
                    clock_skew_in_seconds=_CLOCK_SKEW_SECONDS,
                )
            )
        except ValueError as exc:
            if "Certificate for key id" not in str(exc):
                raise
            # Google rotated its keys since we cached them: fetch once more, then decide.
            return dict(
                jwt.decode(
                    token,
                    certs=self._certs.get(refresh=True),
                    audience=self.audience,
                    clock_skew_in_seconds=_CLOCK_SKEW_SECONDS,
                )
            )


class AppEngineQueueAuthenticator:
    """Trusts ``X-AppEngine-QueueName`` (App Engine removes it from outside requests)."""

    def __init__(self, queue_id: str | None = None) -> None:
        self.queue_id = queue_id

    def authenticate(self, headers: Mapping[str, str]) -> str:
        queue = headers.get("X-AppEngine-QueueName")
        if not queue:
            raise AuthError(403, "missing X-AppEngine-QueueName: not a Cloud Tasks request")
        if self.queue_id is not None and queue != self.queue_id:
            raise AuthError(403, f"request from queue {queue!r}, expected {self.queue_id!r}")
        return f"queue:{queue}"


def authenticator_from_settings(delay: DelaySettings) -> RequestAuthenticator:
    if delay.relay_auth == "appengine":
        return AppEngineQueueAuthenticator(delay.queue.rsplit("/", 1)[-1])
    if delay.audience is None or delay.invoker_email is None:
        raise ConfigurationError(
            "PUBSUB_TOOLKIT_RELAY_AUDIENCE (or PUBSUB_TOOLKIT_RELAY_URL) and "
            "PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT are required"
        )
    return OidcAuthenticator(
        audience=delay.audience,
        invoker_email=delay.invoker_email,
        certs_url=delay.oidc_certs_url or GOOGLE_CERTS_URL,
    )
