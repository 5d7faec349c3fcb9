"""LocalOidcIssuer: google-auth accepts its tokens against its own certs URL, and only those.

The verifier is google-auth's production path (``id_token.verify_token``) pointed at the
issuer's loopback certificate server, in both formats Google publishes (PEM and JWK Set).
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import jwt
import pytest
from google.auth.transport.requests import Request
from google.oauth2 import id_token

from pubsub_toolkit_local.oidc import GOOGLE_ISSUER, PEM_CERTS_PATH, LocalOidcIssuer

AUDIENCE = "http://127.0.0.1:8081/tasks/release"
EMAIL = "relay-invoker@demo-project.iam.gserviceaccount.com"
# google-auth raises ValueError subclasses on the PEM path and PyJWT errors on the JWKS path.
REJECTED = (ValueError, jwt.PyJWTError)


@pytest.fixture(scope="module")
def issuer() -> Iterator[LocalOidcIssuer]:
    with LocalOidcIssuer() as running:
        yield running


@pytest.fixture(params=["pem", "jwks"])
def certs_url(request: pytest.FixtureRequest, issuer: LocalOidcIssuer) -> str:
    return str(issuer.certs_url if request.param == "pem" else issuer.jwks_url)


def verify(token: str, certs_url: str, audience: str = AUDIENCE) -> dict[str, object]:
    return dict(id_token.verify_token(token, Request(), audience=audience, certs_url=certs_url))


def test_token_verifies_with_google_auth(issuer: LocalOidcIssuer, certs_url: str) -> None:
    claims = verify(issuer.sign(AUDIENCE, EMAIL), certs_url)
    assert claims["iss"] == GOOGLE_ISSUER
    assert claims["aud"] == AUDIENCE
    assert claims["email"] == EMAIL
    assert claims["email_verified"] is True
    assert claims["exp"] == claims["iat"] + 3600  # type: ignore[operator]
    assert str(claims["sub"]).isdigit()
    assert claims["sub"] == verify(issuer.sign(AUDIENCE, EMAIL), certs_url)["sub"]  # stable


def test_header_names_the_published_key(issuer: LocalOidcIssuer) -> None:
    header = jwt.get_unverified_header(issuer.sign(AUDIENCE, EMAIL))
    assert header["alg"] == "RS256"
    assert header["kid"] == issuer.kid
    assert list(issuer.pem_certs()) == [issuer.kid]
    assert [key["kid"] for key in issuer.jwks()["keys"]] == [issuer.kid]


def test_wrong_audience_is_rejected(issuer: LocalOidcIssuer, certs_url: str) -> None:
    token = issuer.sign(AUDIENCE, EMAIL)
    with pytest.raises(REJECTED):
        verify(token, certs_url, audience="http://127.0.0.1:8081/other")


def test_expired_token_is_rejected(issuer: LocalOidcIssuer, certs_url: str) -> None:
    two_hours_ago = datetime.now(UTC) - timedelta(hours=2)
    token = issuer.sign(AUDIENCE, EMAIL, now=two_hours_ago)
    with pytest.raises(REJECTED):
        verify(token, certs_url)


def test_tampered_token_is_rejected(issuer: LocalOidcIssuer, certs_url: str) -> None:
    header, payload, signature = issuer.sign(AUDIENCE, EMAIL).split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["email"] = "attacker@example.com"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    with pytest.raises(REJECTED):
        verify(f"{header}.{forged}.{signature}", certs_url)


def test_token_from_another_key_is_rejected(certs_url: str) -> None:
    stranger = LocalOidcIssuer()  # its own key; never started
    with pytest.raises(REJECTED):
        verify(stranger.sign(AUDIENCE, EMAIL), certs_url)


def test_sign_refuses_bad_arguments(issuer: LocalOidcIssuer) -> None:
    with pytest.raises(ValueError):
        issuer.sign("", EMAIL)
    with pytest.raises(ValueError):
        issuer.sign(AUDIENCE, EMAIL, now=datetime(2030, 1, 1))  # noqa: DTZ001 - naive on purpose
    with pytest.raises(ValueError):
        issuer.sign(AUDIENCE, EMAIL, lifetime=timedelta(0))


def test_server_lifecycle() -> None:
    issuer = LocalOidcIssuer()
    with pytest.raises(RuntimeError):
        _ = issuer.certs_url  # not serving yet
    before = set(threading.enumerate())
    base = issuer.start()
    assert issuer.start() == base  # idempotent
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(base + "/nothing-here", timeout=5)
    assert missing.value.code == 404
    missing.value.close()
    issuer.stop()
    issuer.stop()  # idempotent
    assert not [t for t in set(threading.enumerate()) - before if t.is_alive()]
    with pytest.raises(urllib.error.URLError):  # nothing listens there any more
        urllib.request.urlopen(base + PEM_CERTS_PATH, timeout=2)
