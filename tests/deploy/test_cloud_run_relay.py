"""The relay's Cloud Run entry point, started as its Dockerfile starts it, judged by its answers.

Behind Cloud Run's IAM invoker check the relay receives the task's OIDC token with its signature
replaced by ``SIGNATURE_REMOVED_BY_GOOGLE``. These tests build the bundle (scripts/build-bundles
plus the Dockerfile the deploy scripts copy in), run the Dockerfile's own CMD - gunicorn loading
``cloud_run:create_app()`` - with the environment the Terraform module renders, and send it requests
as Cloud Run would forward them: a stripped token with the right claims releases the message to the
final topic of a real Pub/Sub emulator; a stripped token with any claim wrong, a stripped token
without PUBSUB_TOOLKIT_RELAY_TRUST_CLOUD_RUN_IAM, or one beside X-Serverless-Authorization is
refused; a token that arrives signed is verified against a certificate endpoint, signature included.
Settings that would open the relay (PUBSUB_TOOLKIT_RELAY_AUTH=appengine off App Engine) stop it from
starting. Cloud Run's own IAM check cannot run here: what it does is in the README.

Over ~300 lines because it brings its own token signer and certificate server instead of the
local stack's OIDC issuer: it needs nothing but the relay bundle, gunicorn and the emulator.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from google.auth import crypt, jwt
from google.cloud import pubsub_v1

from pubsub_toolkit.delay.payload import DelayedMessage
from pubsub_toolkit.message import OutboundMessage
from tests.conftest import repo_root
from tests.support.waiting import wait_until

ROOT = repo_root()
DOCKERFILE = ROOT / "appengine/relay/Dockerfile"
AUDIENCE = "https://pubsub-toolkit-relay-123456789012.europe-west1.run.app"
INVOKER = "ptk-tasks-invoker@relay-test.iam.gserviceaccount.com"
STRIPPED = "SIGNATURE_REMOVED_BY_GOOGLE"

pytestmark = pytest.mark.usefixtures("pubsub_emulator")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def dockerfile_cmd(path: Path = DOCKERFILE) -> str:
    """The shell command of the Dockerfile's (single-line, shell-form) CMD."""
    (cmd,) = [line for line in path.read_text().splitlines() if line.startswith("CMD ")]
    return cmd.removeprefix("CMD ").strip()


# --- tokens ----------------------------------------------------------------------------------


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def claims(**override: Any) -> dict[str, Any]:
    """Claims of a Cloud Tasks OIDC token for the relay (each test overrides one)."""
    now = int(datetime.datetime.now(datetime.UTC).timestamp())
    base = {
        "iss": "https://accounts.google.com",
        "aud": AUDIENCE,
        "email": INVOKER,
        "email_verified": True,
        "iat": now,
        "exp": now + 600,
        "sub": "1234567890",
    }
    return {k: v for k, v in (base | override).items() if v is not None}


def stripped(payload: dict[str, Any]) -> str:
    """A token as Cloud Run forwards it after its IAM check: the signature replaced."""
    return f"{_b64({'alg': 'RS256', 'kid': 'k1', 'typ': 'JWT'})}.{_b64(payload)}.{STRIPPED}"


@dataclass
class Signer:
    """An RSA key and its certificate, served the way Google serves its signing certificates."""

    key: rsa.RSAPrivateKey
    cert_pem: str

    @classmethod
    def new(cls) -> Signer:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        now = datetime.datetime.now(datetime.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "relay-test")])
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(1)
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .sign(key, hashes.SHA256())
        )
        return cls(key, cert.public_bytes(serialization.Encoding.PEM).decode())

    def sign(self, payload: dict[str, Any]) -> str:
        pem = self.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return jwt.encode(crypt.RSASigner.from_string(pem, key_id="k1"), payload).decode()


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.new()


@pytest.fixture(scope="module")
def certs_url(signer: Signer) -> Iterator[str]:
    """A loopback HTTP server answering like https://www.googleapis.com/oauth2/v1/certs."""
    body = json.dumps({"k1": signer.cert_pem}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the relay's own log is the one that matters

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/oauth2/v1/certs"
    server.shutdown()
    thread.join(timeout=10)
    server.server_close()


# --- the relay under gunicorn ----------------------------------------------------------------


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """build/appengine/relay as the deploy scripts leave it before a Cloud Run build."""
    out = tmp_path_factory.mktemp("bundles") / "build"
    subprocess.run([str(ROOT / "scripts/build-bundles"), str(out)], check=True, capture_output=True)
    relay = out / "appengine/relay"
    shutil.copy(DOCKERFILE, relay / "Dockerfile")
    assert (relay / "cloud_run.py").is_file(), "build-bundles no longer copies cloud_run.py"
    return relay


@dataclass
class Topics:
    project: str
    final: str
    subscription: str


@pytest.fixture(scope="module")
def topics() -> Topics:
    project = f"cloudrun-{os.urandom(4).hex()}"
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    for name in ("final", "dead-letter"):
        publisher.create_topic(name=publisher.topic_path(project, name), timeout=10)
    subscription = subscriber.subscription_path(project, "final-sub")
    subscriber.create_subscription(
        name=subscription, topic=publisher.topic_path(project, "final"), timeout=10
    )
    return Topics(project, publisher.topic_path(project, "final"), subscription)


def relay_env(topics: Topics, certs_url: str, port: int, **extra: str) -> dict[str, str]:
    """What the Terraform module renders for the Cloud Run relay (cloudrun.tf, main.tf)."""
    venv_bin = Path(sys.executable).parent  # gunicorn comes with the dev extra
    env = {
        "PATH": f"{venv_bin}:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        "PORT": str(port),
        "GOOGLE_CLOUD_PROJECT": topics.project,
        "PUBSUB_EMULATOR_HOST": os.environ["PUBSUB_EMULATOR_HOST"],
        # Hops (delays over 30 days) would create tasks: none here, the client is never used.
        "CLOUD_TASKS_EMULATOR_HOST": "127.0.0.1:9",
        "PUBSUB_TOOLKIT_FINAL_TOPIC": "final",
        "PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC": "dead-letter",
        # One gunicorn worker: the process's own memory suffices here.
        "PUBSUB_TOOLKIT_STORE_BACKEND": "memory",
        "PUBSUB_TOOLKIT_TASKS_QUEUE": (
            f"projects/{topics.project}/locations/europe-west1/queues/delay"
        ),
        "PUBSUB_TOOLKIT_TASKS_TARGET": "http",
        "PUBSUB_TOOLKIT_RELAY_URL": AUDIENCE,
        "PUBSUB_TOOLKIT_RELAY_AUDIENCE": AUDIENCE,
        "PUBSUB_TOOLKIT_RELAY_AUTH": "oidc",
        "PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT": INVOKER,
        "PUBSUB_TOOLKIT_RELAY_TRUST_CLOUD_RUN_IAM": "true",
        "PUBSUB_TOOLKIT_OIDC_CERTS_URL": certs_url,
    }
    return {k: v for k, v in (env | extra).items() if v}


@dataclass
class Relay:
    url: str
    proc: subprocess.Popen[str]


def start_relay(bundle: Path, env: dict[str, str]) -> Relay:
    proc = subprocess.Popen(
        ["/bin/sh", "-c", dockerfile_cmd()],
        cwd=bundle,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: stopped by pgid, gunicorn and workers
    )
    return Relay(f"http://127.0.0.1:{env['PORT']}", proc)


def stop_relay(relay: Relay) -> str:
    """Stop the relay's process group; return what it logged."""
    if relay.proc.poll() is None:
        os.killpg(relay.proc.pid, signal.SIGTERM)
        try:
            relay.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(relay.proc.pid, signal.SIGKILL)
            relay.proc.wait(timeout=10)
    assert relay.proc.stderr is not None
    log = relay.proc.stderr.read()
    relay.proc.stderr.close()
    return log


def healthy(relay: Relay) -> bool:
    if relay.proc.poll() is not None:
        raise AssertionError(f"the relay exited with {relay.proc.returncode}")
    try:
        with urllib.request.urlopen(f"{relay.url}/healthz", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def relay(bundle: Path, topics: Topics, certs_url: str) -> Iterator[Relay]:
    running = start_relay(bundle, relay_env(topics, certs_url, free_port()))
    try:
        wait_until(lambda: healthy(running), timeout=60, what="the Cloud Run relay's /healthz")
        yield running
    finally:
        stop_relay(running)


def task_body(key: str) -> bytes:
    message = OutboundMessage(f"body of {key}".encode(), {"dedup_key": key}, ordering_key="")
    due = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)
    return DelayedMessage(message, key, due).to_json()


def post(relay: Relay, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(f"{relay.url}/release", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def pulled(topics: Topics, key: str) -> list[Any]:
    subscriber = pubsub_v1.SubscriberClient()
    response = subscriber.pull(
        subscription=topics.subscription, max_messages=50, return_immediately=True, timeout=10
    )
    if response.received_messages:
        subscriber.acknowledge(
            subscription=topics.subscription,
            ack_ids=[m.ack_id for m in response.received_messages],
            timeout=10,
        )
    return [
        m.message for m in response.received_messages if m.message.attributes["dedup_key"] == key
    ]


# --- accepted --------------------------------------------------------------------------------


def test_stripped_token_with_the_right_claims_releases_the_message(
    relay: Relay, topics: Topics
) -> None:
    status, answer = post(
        relay, task_body("stripped-ok"), {"Authorization": f"Bearer {stripped(claims())}"}
    )
    assert (status, answer["outcome"], answer["caller"]) == (200, "published", INVOKER)
    [message] = wait_until(lambda: pulled(topics, "stripped-ok"), what="the released message")
    assert message.data == b"body of stripped-ok"


def test_signed_token_is_verified_with_its_signature(
    relay: Relay, topics: Topics, signer: Signer
) -> None:
    token = signer.sign(claims())
    status, answer = post(relay, task_body("signed-ok"), {"Authorization": f"Bearer {token}"})
    assert (status, answer["outcome"]) == (200, "published")
    assert wait_until(lambda: pulled(topics, "signed-ok"), what="the released message")


# --- refused ---------------------------------------------------------------------------------


def _refused_cases(signer: Signer) -> dict[str, tuple[dict[str, str], int, str]]:
    now = int(datetime.datetime.now(datetime.UTC).timestamp())
    bearer = lambda token: {"Authorization": f"Bearer {token}"}  # noqa: E731
    return {
        "no token": ({}, 401, "missing bearer token"),
        "wrong audience": (bearer(stripped(claims(aud="https://other.run.app"))), 403, "audience"),
        "wrong email": (bearer(stripped(claims(email="intruder@x.iam"))), 403, "not the tasks"),
        "email unverified": (bearer(stripped(claims(email_verified=False))), 403, "not the tasks"),
        "wrong issuer": (bearer(stripped(claims(iss="https://evil.example"))), 403, "issuer"),
        "expired": (bearer(stripped(claims(iat=now - 7200, exp=now - 3600))), 403, "expired"),
        "from the future": (bearer(stripped(claims(iat=now + 3600))), 403, "future"),
        "no expiry": (bearer(stripped(claims(exp=None))), 403, "numeric exp"),
        "payload not json": (bearer(f"e30.bm90IGpzb24.{STRIPPED}"), 403, "invalid token"),
        "beside X-Serverless-Authorization": (
            bearer(stripped(claims())) | {"X-Serverless-Authorization": f"Bearer {'x' * 20}"},
            403,
            "X-Serverless-Authorization",
        ),
        "signed by another key": (bearer(Signer.new().sign(claims())), 403, "invalid token"),
        "signed, wrong email": (bearer(signer.sign(claims(email="intruder@x.iam"))), 403, "not"),
    }


REFUSED = [
    "no token",
    "wrong audience",
    "wrong email",
    "email unverified",
    "wrong issuer",
    "expired",
    "from the future",
    "no expiry",
    "payload not json",
    "beside X-Serverless-Authorization",
    "signed by another key",
    "signed, wrong email",
]


@pytest.mark.parametrize("case", REFUSED)
def test_refused_and_nothing_is_released(
    relay: Relay, topics: Topics, signer: Signer, case: str
) -> None:
    headers, expected_status, reason = _refused_cases(signer)[case]
    key = f"refused-{REFUSED.index(case)}"
    status, answer = post(relay, task_body(key), headers)
    assert status == expected_status, answer
    assert reason in answer["error"], answer
    assert pulled(topics, key) == []


def test_cases_cover_the_list() -> None:
    assert set(_refused_cases(Signer.new())) == set(REFUSED)


def test_stripped_token_is_refused_without_the_trust_setting(
    bundle: Path, topics: Topics, certs_url: str
) -> None:
    running = start_relay(
        bundle,
        relay_env(topics, certs_url, free_port(), PUBSUB_TOOLKIT_RELAY_TRUST_CLOUD_RUN_IAM=""),
    )
    try:
        wait_until(lambda: healthy(running), timeout=60, what="the relay's /healthz")
        status, answer = post(
            running, task_body("untrusted"), {"Authorization": f"Bearer {stripped(claims())}"}
        )
    finally:
        stop_relay(running)
    assert (
        status == 403 and "PUBSUB_TOOLKIT_RELAY_TRUST_CLOUD_RUN_IAM is not set" in answer["error"]
    )
    assert pulled(topics, "untrusted") == []


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        (
            {"PUBSUB_TOOLKIT_RELAY_AUTH": "appengine", "PUBSUB_TOOLKIT_TASKS_TARGET": "appengine"},
            "PUBSUB_TOOLKIT_RELAY_AUTH=appengine",
        ),
        (
            {"PUBSUB_TOOLKIT_RELAY_TRUST_CLOUD_RUN_IAM": "maybe"},
            "PUBSUB_TOOLKIT_RELAY_TRUST_CLOUD_RUN_IAM must be true or false, not 'maybe'",
        ),
    ],
)
def test_settings_that_would_open_the_relay_stop_it_from_starting(
    bundle: Path, topics: Topics, certs_url: str, setting: dict[str, str], message: str
) -> None:
    running = start_relay(bundle, relay_env(topics, certs_url, free_port(), **setting))
    try:
        wait_until(lambda: running.proc.poll() is not None, timeout=60, what="gunicorn to give up")
    finally:
        log = stop_relay(running)
    assert running.proc.returncode != 0
    assert message in log, log[-2000:]


def test_dockerfile_runs_the_app_yaml_gunicorn_with_the_cloud_run_app() -> None:
    """Same workers, threads and timeout as App Engine; only the app spec differs."""
    app_yaml = (ROOT / "appengine/relay/app.yaml").read_text()
    (entrypoint,) = [
        line.split(":", 1)[1].strip()
        for line in app_yaml.splitlines()
        if line.startswith("entrypoint:")
    ]
    docker = shlex.split(dockerfile_cmd())
    assert docker[0] == "exec"
    assert docker[1:-1] == shlex.split(entrypoint)[:-1]
    assert (shlex.split(entrypoint)[-1], docker[-1]) == (
        "main:create_app()",
        "cloud_run:create_app()",
    )
