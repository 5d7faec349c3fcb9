"""Memorystore as deployed: the URL (with its AUTH string) and the server CA come from secrets.

A real redis-server with ``requirepass`` and TLS only (a private CA made here, as Memorystore's
in-transit encryption has its own server CA). The secrets are read through our own
:data:`~pubsub_toolkit._secrets.SecretReader` protocol - a dict here, Secret Manager when
deployed - so what is proven is everything around the one Secret Manager call: the settings,
the CA handed to the TLS connection, one read per process, and errors that never echo the URL.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
import redis
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pubsub_toolkit.config import Settings
from pubsub_toolkit.errors import ConfigurationError
from pubsub_toolkit.stores import factory
from pubsub_toolkit.stores.dedup.base import ClaimStatus
from pubsub_toolkit.stores.dedup.redis import RedisDedupStore
from pubsub_toolkit_local.processes import LOOPBACK, ServiceSpec, free_port, start_service

PASSWORD = "s3cret-auth-string"
URL_SECRET = "projects/p/secrets/redis-url/versions/latest"
CA_SECRET = "projects/p/secrets/redis-ca/versions/latest"


def _pem(obj: x509.Certificate) -> bytes:
    return obj.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _certificate(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name | None, signer: object
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
    )
    if issuer is None:  # the CA
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=0), True)
    else:
        san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(LOOPBACK))])
        builder = builder.add_extension(san, False)
    return builder.sign(signer, hashes.SHA256())  # type: ignore[arg-type]


@dataclass(frozen=True)
class TlsRedis:
    port: int
    ca_pem: bytes

    @property
    def url(self) -> str:
        return f"rediss://:{PASSWORD}@{LOOPBACK}:{self.port}/0"


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRedis]:
    work = tmp_path_factory.mktemp("tls-redis")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("test redis CA", ca_key, None, ca_key)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _certificate(LOOPBACK, server_key, ca.subject, ca_key)
    for name, data in {
        "ca.pem": _pem(ca),
        "server.pem": _pem(server),
        "server.key": _key_pem(server_key),
    }.items():
        (work / name).write_bytes(data)
    binary = shutil.which("redis-server")
    assert binary, "redis-server is required (apt-get install redis-server)"
    port = free_port()

    def ready() -> bool:
        client = redis.Redis(
            host=LOOPBACK,
            port=port,
            password=PASSWORD,
            ssl=True,
            ssl_ca_certs=str(work / "ca.pem"),
            socket_timeout=1,
        )
        try:
            return bool(client.ping())
        finally:
            client.close()

    spec = ServiceSpec(
        name="redis-tls",
        argv=(
            binary,
            "--port",
            "0",
            "--tls-port",
            str(port),
            "--bind",
            LOOPBACK,
            "--tls-cert-file",
            str(work / "server.pem"),
            "--tls-key-file",
            str(work / "server.key"),
            "--tls-ca-cert-file",
            str(work / "ca.pem"),
            "--tls-auth-clients",
            "no",
            "--requirepass",
            PASSWORD,
            "--save",
            "",
            "--appendonly",
            "no",
        ),
        port=port,
        ready=ready,
        startup_timeout=20,
    )
    service = start_service(spec, work)
    yield TlsRedis(port, _pem(ca))
    service.stop()


class DictSecrets:
    """Our SecretReader protocol over a dict, counting reads."""

    def __init__(self, payloads: dict[str, bytes]) -> None:
        self.payloads = payloads
        self.reads: list[str] = []

    def __call__(self, version: str) -> bytes:
        self.reads.append(version)
        return self.payloads[version]


ENV = {
    "GOOGLE_CLOUD_PROJECT": "p",
    "PUBSUB_TOOLKIT_FINAL_TOPIC": "f",
    "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "d",
}


def settings(**env: str) -> Settings:
    return Settings.from_env({**ENV, "PUBSUB_TOOLKIT_STORE_BACKEND": "redis", **env})


@pytest.fixture(autouse=True)
def fresh_resolution_cache() -> Iterator[None]:
    factory._resolved_urls.clear()
    yield
    factory._resolved_urls.clear()


def test_url_and_ca_from_secrets_reach_a_tls_redis_with_auth(tls_redis: TlsRedis) -> None:
    secrets = DictSecrets({URL_SECRET: tls_redis.url.encode() + b"\n", CA_SECRET: tls_redis.ca_pem})
    configured = settings(
        # No version: the latest is meant.
        PUBSUB_TOOLKIT_REDIS_URL_SECRET="projects/p/secrets/redis-url",
        PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET=CA_SECRET,
    )
    url = factory.redis_url_from_settings(configured, read_secret=secrets)
    store = RedisDedupStore.from_url(url)
    claim = store.claim("ns", "k", "fp", lease=timedelta(seconds=30), ttl=timedelta(seconds=60))
    assert claim.status is ClaimStatus.ACQUIRED
    again = store.claim("ns", "k", "fp", lease=timedelta(seconds=30), ttl=timedelta(seconds=60))
    assert again.status is ClaimStatus.IN_PROGRESS  # a real record on the TLS server, behind AUTH
    # Every store of the process shares one read of each secret.
    assert factory.redis_url_from_settings(configured, read_secret=secrets) == url
    assert secrets.reads == [URL_SECRET, CA_SECRET]


def test_without_the_ca_the_tls_connection_is_refused(tls_redis: TlsRedis) -> None:
    secrets = DictSecrets({URL_SECRET: tls_redis.url.encode()})
    url = factory.redis_url_from_settings(
        settings(PUBSUB_TOOLKIT_REDIS_URL_SECRET=URL_SECRET), read_secret=secrets
    )
    client = redis.Redis.from_url(url, socket_timeout=2)
    with pytest.raises(redis.ConnectionError):
        client.ping()  # the private CA is not trusted: the CA secret is what makes it work


def test_settings_name_what_is_wrong_and_never_echo_the_url() -> None:
    with pytest.raises(
        ConfigurationError,
        match="\\(PUBSUB_TOOLKIT_REDIS_URL or PUBSUB_TOOLKIT_REDIS_URL_SECRET\\) is required",
    ):
        settings()
    with pytest.raises(ConfigurationError, match="not both"):
        settings(PUBSUB_TOOLKIT_REDIS_URL="redis://x", PUBSUB_TOOLKIT_REDIS_URL_SECRET=URL_SECRET)
    with pytest.raises(
        ConfigurationError,
        match="\\(PUBSUB_TOOLKIT_REDIS_URL_SECRET\\) 'redis-url' is not a Secret",
    ):
        settings(PUBSUB_TOOLKIT_REDIS_URL_SECRET="redis-url")
    configured = settings(
        PUBSUB_TOOLKIT_REDIS_URL_SECRET=URL_SECRET, PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET=CA_SECRET
    )
    not_a_url = DictSecrets({URL_SECRET: f"{PASSWORD}".encode()})
    with pytest.raises(ConfigurationError) as refused:
        factory.redis_url_from_settings(configured, read_secret=not_a_url)
    assert "PUBSUB_TOOLKIT_REDIS_URL_SECRET does not hold" in str(refused.value)
    assert PASSWORD not in str(refused.value)
    plain = DictSecrets({URL_SECRET: b"redis://:pw@10.0.0.3:6379/0", CA_SECRET: b"x"})
    with pytest.raises(ConfigurationError, match="not a rediss:// \\(TLS\\) URL"):
        factory.redis_url_from_settings(configured, read_secret=plain)
    no_pem = DictSecrets({URL_SECRET: b"rediss://:pw@10.0.0.3:6378/0", CA_SECRET: b"junk"})
    with pytest.raises(ConfigurationError, match="holds no PEM certificate"):
        factory.redis_url_from_settings(configured, read_secret=no_pem)


def test_the_deployed_function_path_reads_the_secret(
    tls_redis: TlsRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The factories the functions and the relay use go through the same resolution.
    secrets = DictSecrets({URL_SECRET: tls_redis.url.encode(), CA_SECRET: tls_redis.ca_pem})
    monkeypatch.setattr(factory, "read_secret_manager", secrets)
    configured = settings(
        PUBSUB_TOOLKIT_REDIS_URL_SECRET=URL_SECRET, PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET=CA_SECRET
    )
    counter = factory.counter_from_settings(configured)
    assert list(counter.reserve("group-a", 2).numbers()) == [1, 2]
    assert list(counter.reserve("group-a").numbers()) == [3]
    assert secrets.reads == [URL_SECRET, CA_SECRET]
