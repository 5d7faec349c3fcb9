"""Settings, read from the environment only at the edges (functions, relay, CLI).

Nothing in the library reads ``os.environ`` at import time; entry points call
:meth:`Settings.from_env` once and pass the frozen value down.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from pubsub_toolkit.errors import ConfigurationError

StoreBackend = Literal["firestore", "redis", "memory"]
TasksTarget = Literal["http", "appengine"]
RelayAuth = Literal["oidc", "appengine"]
_BACKENDS: tuple[StoreBackend, ...] = ("firestore", "redis", "memory")

# Pub/Sub retains unacked messages for up to 7 days, so a key must outlive that window or a
# late redelivery would look new. Default: 8 days.
DEFAULT_TTL_SECONDS = 8 * 24 * 3600
DEFAULT_LEASE_SECONDS = 90


@dataclass(frozen=True)
class DelaySettings:
    """Where due-later messages wait (Cloud Tasks) and how the relay is reached and trusts it."""

    queue: str  # projects/P/locations/L/queues/Q
    target: TasksTarget = "http"
    relay_url: str | None = None  # HTTP target: the relay's base URL
    invoker_email: str | None = None  # the service account Cloud Tasks signs OIDC tokens as
    audience: str | None = None  # OIDC audience; defaults to relay_url
    appengine_service: str = "default"
    tasks_emulator_host: str | None = None  # host:port of the local Cloud Tasks emulator
    relay_auth: RelayAuth = "oidc"
    oidc_certs_url: str | None = None  # local stack only: the emulator's signing certificates

    @classmethod
    def from_env(cls, env: Mapping[str, str], project: str) -> DelaySettings | None:
        """None when TASKS_QUEUE is unset (delayed delivery off)."""
        raw_queue = env.get("TASKS_QUEUE", "").strip()
        if not raw_queue:
            return None
        target = env.get("TASKS_TARGET", "http").strip().lower()
        if target not in ("http", "appengine"):
            raise ConfigurationError(f"TASKS_TARGET={target!r} is not one of http, appengine")
        relay_auth = env.get("RELAY_AUTH", "oidc" if target == "http" else "appengine")
        if relay_auth not in ("oidc", "appengine"):
            raise ConfigurationError(f"RELAY_AUTH={relay_auth!r} is not one of oidc, appengine")
        relay_url = env.get("RELAY_URL", "").strip().rstrip("/") or None
        invoker = env.get("TASKS_SERVICE_ACCOUNT", "").strip() or None
        if target == "http" and relay_url is None:
            raise ConfigurationError("RELAY_URL is required when TASKS_TARGET=http")
        if relay_auth == "oidc" and invoker is None:
            raise ConfigurationError("TASKS_SERVICE_ACCOUNT is required for OIDC (RELAY_AUTH=oidc)")
        return cls(
            queue=queue_path(project, env.get("TASKS_LOCATION", ""), raw_queue),
            target=target,  # type: ignore[arg-type]  # checked above
            relay_url=relay_url,
            invoker_email=invoker,
            audience=env.get("RELAY_AUDIENCE", "").strip() or relay_url,
            appengine_service=env.get("RELAY_SERVICE", "default"),
            tasks_emulator_host=env.get("CLOUD_TASKS_EMULATOR_HOST", "").strip() or None,
            relay_auth=relay_auth,  # type: ignore[arg-type]  # checked above
            oidc_certs_url=env.get("OIDC_CERTS_URL", "").strip() or None,
        )


@dataclass(frozen=True)
class Settings:
    """Everything the deployed parts need to know. Build with :meth:`from_env`."""

    project: str
    final_topic: str
    dead_letter_topic: str
    # One backend for every store: dedup records, FIFO state, sequence counters, stats.
    store_backend: StoreBackend = "firestore"
    redis_url: str | None = None
    # Deployed parts keep the URL (it carries the AUTH string) and the server CA in Secret
    # Manager: version names, read once when the first Redis client is made (stores/factory).
    redis_url_secret: str | None = None
    redis_ca_cert_secret: str | None = None
    dedup_ttl: timedelta = timedelta(seconds=DEFAULT_TTL_SECONDS)
    dedup_lease: timedelta = timedelta(seconds=DEFAULT_LEASE_SECONDS)
    dedup_collection: str = "pubsub_toolkit_dedup"
    firestore_database: str = "(default)"
    publish_timeout: timedelta = timedelta(seconds=30)
    delay: DelaySettings | None = None
    # How often ingress adds its counters to the stats store (the status page); None: never.
    stats_flush: timedelta | None = timedelta(seconds=5)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read settings from ``env`` (default ``os.environ``); name any missing variable."""
        env = os.environ if env is None else env
        project = _required(env, "GOOGLE_CLOUD_PROJECT")
        name, backend = store_backend_from_env(env)
        redis_url = env.get("REDIS_URL") or None
        url_secret = _secret_version(env, "REDIS_URL_SECRET")
        ca_secret = _secret_version(env, "REDIS_CA_CERT_SECRET")
        if redis_url and url_secret:
            raise ConfigurationError("set REDIS_URL or REDIS_URL_SECRET, not both")
        if backend == "redis" and redis_url is None and url_secret is None:
            raise ConfigurationError(
                f"REDIS_URL (or REDIS_URL_SECRET) is required when {name}=redis"
            )
        lease = _seconds(env, "DEDUP_LEASE_SECONDS", DEFAULT_LEASE_SECONDS)
        publish_timeout = _seconds(env, "PUBLISH_TIMEOUT_SECONDS", 30)
        if lease < 2 * publish_timeout:
            # A claim's work is a publish plus, at worst, a dead-letter publish: the lease must
            # outlast both, or another worker could take over while the first still publishes.
            raise ConfigurationError(
                f"DEDUP_LEASE_SECONDS ({lease.total_seconds():g}) must be at least twice "
                f"PUBLISH_TIMEOUT_SECONDS ({publish_timeout.total_seconds():g})"
            )
        return cls(
            project=project,
            final_topic=topic_path(project, _required(env, "FINAL_TOPIC")),
            dead_letter_topic=topic_path(project, _required(env, "DEAD_LETTER_TOPIC")),
            store_backend=backend,
            redis_url=redis_url,
            redis_url_secret=url_secret,
            redis_ca_cert_secret=ca_secret,
            dedup_ttl=_seconds(env, "DEDUP_TTL_SECONDS", DEFAULT_TTL_SECONDS),
            dedup_lease=lease,
            dedup_collection=env.get("DEDUP_COLLECTION", "pubsub_toolkit_dedup"),
            firestore_database=env.get("FIRESTORE_DATABASE", "(default)"),
            publish_timeout=publish_timeout,
            delay=DelaySettings.from_env(env, project),
            stats_flush=None
            if env.get("STATS_FLUSH_SECONDS", "").strip() == "0"
            else _seconds(env, "STATS_FLUSH_SECONDS", 5),
        )


_SECRET_VERSION = re.compile(r"projects/[^/]+/secrets/[^/]+(/versions/[^/]+)?")


def _secret_version(env: Mapping[str, str], name: str) -> str | None:
    """A Secret Manager version name from ``env[name]`` (``projects/P/secrets/S`` means its
    latest version), or None when unset; a malformed one is a ConfigurationError."""
    value = env.get(name, "").strip()
    if not value:
        return None
    if not _SECRET_VERSION.fullmatch(value):
        raise ConfigurationError(
            f"{name}={value!r} is not a Secret Manager secret "
            "(projects/PROJECT/secrets/NAME[/versions/VERSION])"
        )
    return value if "/versions/" in value else f"{value}/versions/latest"


def store_backend_from_env(env: Mapping[str, str]) -> tuple[str, StoreBackend]:
    """``(variable, backend)`` from STORE_BACKEND, or its older name DEDUP_BACKEND.

    The one backend holds every store (not only dedup records), hence the new name; the old one
    is still read so existing deployments keep working. Both set to different values is an
    error rather than a silent choice.
    """
    values = {
        name: env[name].strip().lower()
        for name in ("STORE_BACKEND", "DEDUP_BACKEND")
        if env.get(name, "").strip()
    }
    if len(set(values.values())) > 1:
        raise ConfigurationError(
            f"STORE_BACKEND={values['STORE_BACKEND']!r} and DEDUP_BACKEND="
            f"{values['DEDUP_BACKEND']!r} disagree; set STORE_BACKEND only (DEDUP_BACKEND is "
            "its older name)"
        )
    name = next(iter(values), "STORE_BACKEND")
    backend = values.get(name, "firestore")
    for candidate in _BACKENDS:
        if backend == candidate:
            return name, candidate
    raise ConfigurationError(f"{name}={backend!r} is not one of {', '.join(_BACKENDS)}")


def topic_path(project: str, topic: str) -> str:
    """Accept a short topic name or a full ``projects/P/topics/T`` path; return the full path."""
    if topic.startswith("projects/"):
        parts = topic.split("/")
        if len(parts) != 4 or parts[2] != "topics" or not parts[3]:
            raise ConfigurationError(f"{topic!r} is not a topic path projects/P/topics/T")
        return topic
    if not topic or "/" in topic:
        raise ConfigurationError(f"{topic!r} is not a valid topic name")
    return f"projects/{project}/topics/{topic}"


@dataclass(frozen=True)
class ConsumerSettings:
    """A consumer's identity and its FIFO policies (the gate's knobs)."""

    consumer_id: str
    max_attempts: int = 5
    poison_policy: Literal["skip", "block"] = "skip"
    gap_timeout: timedelta = timedelta(minutes=5)
    gap_policy: Literal["wait", "skip"] = "wait"
    lease: timedelta = timedelta(seconds=60)
    park: bool = True
    # First wait after a handler failure, doubling per counted failure (capped at 5 minutes):
    # with 5 attempts a message becomes poison after about 75 s of failures, not 5 s.
    retry_backoff: timedelta = timedelta(seconds=5)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ConsumerSettings:
        env = os.environ if env is None else env
        poison = env.get("FIFO_POISON_POLICY", "skip").strip().lower()
        if poison not in ("skip", "block"):
            raise ConfigurationError(f"FIFO_POISON_POLICY={poison!r} is not one of skip, block")
        gap = env.get("FIFO_GAP_POLICY", "wait").strip().lower()
        if gap not in ("wait", "skip"):
            raise ConfigurationError(f"FIFO_GAP_POLICY={gap!r} is not one of wait, skip")
        raw_attempts = env.get("FIFO_MAX_ATTEMPTS", "5")
        try:
            attempts = int(raw_attempts)
        except ValueError:
            attempts = 0
        if attempts < 1:
            raise ConfigurationError(f"FIFO_MAX_ATTEMPTS={raw_attempts!r} must be an integer >= 1")
        park = env.get("FIFO_PARK", "true").strip().lower()
        if park not in ("true", "false"):
            raise ConfigurationError(f"FIFO_PARK={park!r} must be true or false")
        return cls(
            consumer_id=_required(env, "CONSUMER_ID"),
            max_attempts=attempts,
            poison_policy=poison,  # type: ignore[arg-type]  # checked above
            gap_timeout=_seconds(env, "FIFO_GAP_TIMEOUT_SECONDS", 300),
            gap_policy=gap,  # type: ignore[arg-type]  # checked above
            lease=_seconds(env, "FIFO_LEASE_SECONDS", 60),
            park=park == "true",
            retry_backoff=_seconds(env, "FIFO_RETRY_BACKOFF_SECONDS", 5),
        )


def queue_path(project: str, location: str, queue: str) -> str:
    """Accept ``projects/P/locations/L/queues/Q``, or a short name with TASKS_LOCATION."""
    if queue.startswith("projects/"):
        parts = queue.split("/")
        if len(parts) != 6 or parts[2] != "locations" or parts[4] != "queues" or not parts[5]:
            raise ConfigurationError(
                f"TASKS_QUEUE={queue!r} is not projects/P/locations/L/queues/Q"
            )
        return queue
    if not location.strip():
        raise ConfigurationError("TASKS_LOCATION is required when TASKS_QUEUE is a short name")
    return f"projects/{project}/locations/{location.strip()}/queues/{queue}"


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ConfigurationError(f"environment variable {name} is required but not set")
    return value


def _seconds(env: Mapping[str, str], name: str, default: float) -> timedelta:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return timedelta(seconds=default)
    try:
        value = float(raw)
    except ValueError as exc:
        raise ConfigurationError(f"{name}={raw!r} is not a number of seconds") from exc
    if not math.isfinite(value) or value <= 0:
        raise ConfigurationError(f"{name}={raw!r} must be a positive number of seconds")
    return timedelta(seconds=value)
