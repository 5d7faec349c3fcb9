"""A local stand-in for Google's OIDC token issuer.

Cloud Tasks attaches ``Authorization: Bearer <ID token>`` to HTTP tasks that carry an
``oidc_token``; the receiver (our App Engine relay) verifies the token against Google's public
certificates. Locally there is no Google, so :class:`LocalOidcIssuer` holds its own RSA key,
signs RS256 ID tokens with the claims Google puts in them, and serves the matching public keys
over HTTP in both formats Google publishes:

* ``/oauth2/v1/certs`` - ``{kid: PEM X.509 certificate}``, the format google-auth uses by default;
* ``/oauth2/v3/certs`` - a JWK Set (``{"keys": [...]}``).

A verifier then runs the production code path unchanged, only pointed at another URL::

    google.oauth2.id_token.verify_token(token, request, audience=url, certs_url=issuer.certs_url)

The key lives in memory only: every issuer (every emulator run) has a fresh key and ``kid``, so a
token from an earlier run cannot verify against a later one.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

__all__ = ["GOOGLE_ISSUER", "JWKS_PATH", "PEM_CERTS_PATH", "LocalOidcIssuer"]

logger = logging.getLogger(__name__)

GOOGLE_ISSUER = "https://accounts.google.com"
"""The ``iss`` claim of Google-signed ID tokens (what Cloud Tasks' tokens carry)."""
PEM_CERTS_PATH = "/oauth2/v1/certs"
JWKS_PATH = "/oauth2/v3/certs"
DEFAULT_LIFETIME = timedelta(hours=1)


class LocalOidcIssuer:
    """An RSA signing key for Google-style ID tokens, plus an HTTP server for its public key.

    Signing works without the server; :meth:`start` is only needed when something must fetch
    the certificates (a verifier in another process or thread).
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, key_size: int = 2048) -> None:
        self._host = host
        self._port = port
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=key_size)
        public_der = self._key.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        # Google's key ids are 40 hex digits; a digest of the public key gives the same shape
        # and changes whenever the key does.
        self._kid = hashlib.sha1(public_der, usedforsecurity=False).hexdigest()
        self._certificate_pem = _self_signed_certificate(self._key)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- signing -------------------------------------------------------------------------------

    @property
    def kid(self) -> str:
        """The key id written in every token header and every certificate listing."""
        return self._kid

    def sign(
        self,
        audience: str,
        email: str,
        *,
        lifetime: timedelta = DEFAULT_LIFETIME,
        now: datetime | None = None,
    ) -> str:
        """Return an RS256 ID token for service account ``email``, addressed to ``audience``.

        The claims mirror a Google-issued service-account ID token: ``iss``, ``aud``, ``azp``,
        ``sub`` (a stable numeric id derived from the email, since there is no real account),
        ``email``, ``email_verified``, ``iat`` and ``exp = iat + lifetime``.
        """
        if not audience:
            raise ValueError("an ID token needs an audience")
        if lifetime <= timedelta(0):
            raise ValueError("lifetime must be positive")
        issued = now if now is not None else datetime.now(UTC)
        if issued.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        subject = _numeric_subject(email)
        claims = {
            "iss": GOOGLE_ISSUER,
            "aud": audience,
            "azp": subject,
            "sub": subject,
            "email": email,
            "email_verified": True,
            "iat": int(issued.timestamp()),
            "exp": int((issued + lifetime).timestamp()),
        }
        return jwt.encode(claims, self._key, algorithm="RS256", headers={"kid": self._kid})

    def pem_certs(self) -> dict[str, str]:
        """The ``/oauth2/v1/certs`` document: ``{kid: PEM certificate}``."""
        return {self._kid: self._certificate_pem}

    def jwks(self) -> dict[str, Any]:
        """The ``/oauth2/v3/certs`` document: a JWK Set with the one public key."""
        numbers = self._key.public_key().public_numbers()
        return {
            "keys": [
                {
                    "kty": "RSA",
                    "alg": "RS256",
                    "use": "sig",
                    "kid": self._kid,
                    "n": _b64url_uint(numbers.n),
                    "e": _b64url_uint(numbers.e),
                }
            ]
        }

    # -- certificate server --------------------------------------------------------------------

    def start(self) -> str:
        """Serve the certificates on ``host:port``; return the base URL. Idempotent."""
        with self._lock:
            if self._server is None:
                server = _CertsServer((self._host, self._port), _CertsHandler)
                server.documents = {
                    PEM_CERTS_PATH: json.dumps(self.pem_certs()).encode(),
                    JWKS_PATH: json.dumps(self.jwks()).encode(),
                }
                thread = threading.Thread(
                    target=server.serve_forever,
                    kwargs={"poll_interval": 0.1},
                    name="local-oidc-certs",
                    daemon=True,
                )
                thread.start()
                self._server, self._thread = server, thread
                logger.info(
                    "OIDC certificates served at %s (kid %s)", self._base_url_locked(), self._kid
                )
            return self._base_url_locked()

    def stop(self) -> None:
        """Stop the certificate server and wait for its threads. Idempotent."""
        with self._lock:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()  # joins the per-request threads (block_on_close)
        if thread is not None:
            thread.join()

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the running certificate server."""
        with self._lock:
            return self._base_url_locked()

    @property
    def certs_url(self) -> str:
        """URL of the PEM certificates (google-auth's default format; needs no pyjwt)."""
        return self.base_url + PEM_CERTS_PATH

    @property
    def jwks_url(self) -> str:
        """URL of the JWK Set."""
        return self.base_url + JWKS_PATH

    def _base_url_locked(self) -> str:
        if self._server is None:
            raise RuntimeError("the OIDC certificate server is not running; call start()")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class _CertsServer(ThreadingHTTPServer):
    # Non-daemon request threads, joined by server_close(): stop() leaves no thread behind.
    daemon_threads = False
    block_on_close = True
    documents: dict[str, bytes]


class _CertsHandler(BaseHTTPRequestHandler):
    server: _CertsServer

    def do_GET(self) -> None:
        body = self.server.documents.get(self.path.split("?", 1)[0])
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        # The key never changes during a run; Google also lets verifiers cache its certs.
        self.send_header("Cache-Control", "public, max-age=3600")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("certs server: " + format, *args)


def _self_signed_certificate(key: rsa.RSAPrivateKey) -> str:
    """Wrap the public key in an X.509 certificate, as Google's v1 endpoint does."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pubsub-toolkit local OIDC")])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1))
        .not_valid_after(now + timedelta(days=365))
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def _numeric_subject(email: str) -> str:
    """A stable 21-digit id per email, shaped like a service account's unique id."""
    digest = hashlib.sha256(email.encode()).digest()
    return str(int.from_bytes(digest[:9], "big") % 10**21).rjust(21, "1")


def _b64url_uint(value: int) -> str:
    raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
