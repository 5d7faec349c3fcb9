"""Cloud Run entry point of the relay: ``main.create_app`` with an authenticator for Cloud Run.

On Cloud Run the relay sits behind Cloud Run's IAM invoker check (``--no-allow-unauthenticated``,
run.invoker for the Cloud Tasks invoker account only). That check verifies the task's OIDC token
- Google's signature, expiry, audience = the service's URL - and then Cloud Run forwards the
token with its signature replaced by ``SIGNATURE_REMOVED_BY_GOOGLE``, so the relay's own check
(:class:`pubsub_toolkit.delay.auth.OidcAuthenticator`, which verifies the signature) would refuse
every task. :class:`CloudRunAuthenticator` keeps the relay's checks as defence in depth:

* a token whose signature Cloud Run stripped: issuer, audience (PUBSUB_TOOLKIT_RELAY_AUDIENCE),
  email (PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT, verified), expiry and issue time are checked exactly
  as before; only the signature is taken as verified by Cloud Run, and only when
  PUBSUB_TOOLKIT_RELAY_TRUST_CLOUD_RUN_IAM=true says the invoker check is on (the deploys set it
  with that check; never set it on a service that allows unauthenticated calls, where anyone who
  reaches it could send such a token);
* a token that arrives signed (the invoker check off, or a local run): fully verified, signature
  included, by the library's OidcAuthenticator;
* a request that also carries X-Serverless-Authorization: Cloud Run checked that header, not
  Authorization, so a stripped-looking Authorization token proves nothing and is refused.

PUBSUB_TOOLKIT_RELAY_AUTH=appengine is refused at start: only App Engine strips
X-AppEngine-QueueName from outside requests. Start with ``gunicorn ... 'cloud_run:create_app()'``
(see the Dockerfile).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from flask import Flask
from main import create_app as create_relay_app

from pubsub_toolkit.config import Settings
from pubsub_toolkit.delay.auth import (
    GOOGLE_CERTS_URL,
    GOOGLE_ISSUERS,
    AuthError,
    OidcAuthenticator,
    RequestAuthenticator,
)
from pubsub_toolkit.environment import flag
from pubsub_toolkit.errors import ConfigurationError

STRIPPED_SIGNATURE = "SIGNATURE_REMOVED_BY_GOOGLE"
TRUST_ENV = "PUBSUB_TOOLKIT_RELAY_TRUST_CLOUD_RUN_IAM"
# The same leeway the library's OIDC check gives google-auth for clock differences.
CLOCK_SKEW_SECONDS = 10


def _payload(segment: str) -> dict[str, Any]:
    """The claims of a JWT's middle segment (base64url JSON); AuthError(403) if it is not."""
    try:
        decoded = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
        claims = json.loads(decoded)
    except (binascii.Error, ValueError) as exc:
        raise AuthError(403, f"invalid token payload: {exc}") from exc
    if not isinstance(claims, dict):
        raise AuthError(403, "invalid token payload: not a JSON object")
    return claims


def _time(claims: Mapping[str, Any], name: str) -> float:
    """A JWT NumericDate claim (seconds; JSON's true/false is not one); AuthError if absent."""
    value = claims.get(name)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise AuthError(403, f"token has no numeric {name}")
    return float(value)


class CloudRunAuthenticator:
    """The relay's OIDC check for a token Cloud Run's IAM check has already verified."""

    def __init__(
        self,
        *,
        audience: str,
        invoker_email: str,
        signed: RequestAuthenticator,
        trust_stripped: bool,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.audience = audience
        self.invoker_email = invoker_email
        self._signed = signed
        self._trust_stripped = trust_stripped
        self._clock = clock

    def authenticate(self, headers: Mapping[str, str]) -> str:
        """Return the invoker's email, or raise AuthError (401 without a token, 403 otherwise)."""
        scheme, _, token = headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise AuthError(401, "missing bearer token")
        parts = token.split(".")
        if len(parts) != 3 or parts[2] != STRIPPED_SIGNATURE:
            return self._signed.authenticate(headers)
        if not self._trust_stripped:
            raise AuthError(
                403, f"token signature was removed and {TRUST_ENV} is not set: cannot verify it"
            )
        if headers.get("X-Serverless-Authorization"):
            raise AuthError(
                403, "Cloud Run checked X-Serverless-Authorization, not this unsigned token"
            )
        return self._check_claims(_payload(parts[1]))

    def _check_claims(self, claims: dict[str, Any]) -> str:
        """What OidcAuthenticator checks besides the signature, on the claims alone."""
        if claims.get("iss") not in GOOGLE_ISSUERS:
            raise AuthError(403, f"unexpected issuer {claims.get('iss')!r}")
        if claims.get("aud") != self.audience:
            raise AuthError(403, f"token is for audience {claims.get('aud')!r}, not this relay")
        now = self._clock()
        expires, issued = _time(claims, "exp"), _time(claims, "iat")
        if now > expires + CLOCK_SKEW_SECONDS:
            raise AuthError(403, "token expired")
        if now < issued - CLOCK_SKEW_SECONDS:
            raise AuthError(403, "token issued in the future")
        if claims.get("email") != self.invoker_email or claims.get("email_verified") is not True:
            raise AuthError(403, f"token is for {claims.get('email')!r}, not the tasks invoker")
        return str(claims["email"])


def trust_from_env(env: Mapping[str, str]) -> bool:
    """PUBSUB_TOOLKIT_RELAY_TRUST_CLOUD_RUN_IAM: true or false (default false); any other value
    is a ConfigurationError."""
    return flag(env, TRUST_ENV)


def authenticator_for_cloud_run(
    settings: Settings, env: Mapping[str, str]
) -> CloudRunAuthenticator:
    """The Cloud Run authenticator for these settings; ConfigurationError names what is wrong."""
    delay = settings.delay
    if delay is None:
        raise ConfigurationError("PUBSUB_TOOLKIT_TASKS_QUEUE is required by the relay")
    if delay.relay_auth != "oidc":
        raise ConfigurationError(
            "PUBSUB_TOOLKIT_RELAY_AUTH=appengine trusts X-AppEngine-QueueName, which only App "
            "Engine removes "
            "from outside requests: on Cloud Run use PUBSUB_TOOLKIT_RELAY_AUTH=oidc "
            "(PUBSUB_TOOLKIT_TASKS_TARGET=http)"
        )
    if delay.audience is None or delay.invoker_email is None:
        raise ConfigurationError(
            "PUBSUB_TOOLKIT_RELAY_AUDIENCE (or PUBSUB_TOOLKIT_RELAY_URL) and "
            "PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT are required"
        )
    signed = OidcAuthenticator(
        audience=delay.audience,
        invoker_email=delay.invoker_email,
        certs_url=delay.oidc_certs_url or GOOGLE_CERTS_URL,
    )
    return CloudRunAuthenticator(
        audience=delay.audience,
        invoker_email=delay.invoker_email,
        signed=signed,
        trust_stripped=trust_from_env(env),
    )


def create_app() -> Flask:
    """The relay's Flask app for Cloud Run, configured from the environment."""
    settings = Settings.from_env()
    return create_relay_app(
        settings, authenticator=authenticator_for_cloud_run(settings, os.environ)
    )
