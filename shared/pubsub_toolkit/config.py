"""Settings: the same values, checked the same way, from code or from the environment.

Every setting is a constructor argument of a frozen dataclass, and the dataclass checks it in
``__post_init__``: that is the one validation path. :meth:`Settings.from_env` (and
:meth:`ConsumerSettings.from_env`, :meth:`DelaySettings.from_env`) only turn the environment's
strings into those values and call the constructor, so a bad value is refused with the same
message either way. Messages name the setting by both of its names, the argument and the
variable (``dedup_lease (PUBSUB_TOOLKIT_DEDUP_LEASE_SECONDS)``), so one string serves both.

Nothing in the library reads ``os.environ`` at import time; entry points call ``from_env`` once
and pass the frozen value down. Every variable is a ``PUBSUB_TOOLKIT_*`` name of the one table in
:mod:`pubsub_toolkit.environment`, which ``from_env`` checks the environment against first (an
unknown ``PUBSUB_TOOLKIT_*`` name is refused with the closest known one).

(About 520 lines: the three settings classes, each check beside the parsing of the variable it
names, so that one module shows that both paths meet in the constructor.)
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Literal

from pubsub_toolkit.environment import check_environment, flag
from pubsub_toolkit.errors import ConfigurationError

StoreBackend = Literal["firestore", "redis", "memory"]
TasksTarget = Literal["http", "appengine"]
RelayAuth = Literal["oidc", "appengine"]
PoisonPolicy = Literal["skip", "block"]
GapPolicy = Literal["wait", "skip"]
_BACKENDS: tuple[StoreBackend, ...] = ("firestore", "redis", "memory")
_TARGETS: tuple[TasksTarget, ...] = ("http", "appengine")
_RELAY_AUTHS: tuple[RelayAuth, ...] = ("oidc", "appengine")
_POISON_POLICIES: tuple[PoisonPolicy, ...] = ("skip", "block")
_GAP_POLICIES: tuple[GapPolicy, ...] = ("wait", "skip")

# Pub/Sub retains unacked messages for up to 7 days, so a key must outlive that window or a
# late redelivery would look new: a shorter TTL is refused (as Terraform's variable does).
# Default: 8 days.
REDELIVERY_WINDOW = timedelta(days=7)
DEFAULT_TTL_SECONDS = 8 * 24 * 3600
# A consumer's id travels as the ``retry_consumer`` attribute of its RetryLater copies.
MAX_CONSUMER_ID_BYTES = 1024
DEFAULT_LEASE_SECONDS = 90
DEFAULT_DEDUP_COLLECTION = "pubsub_toolkit_dedup"
DEFAULT_FIRESTORE_DATABASE = "(default)"

# Each setting by its two names: the constructor argument and the environment variable.
SETTING_NAMES: Mapping[str, str] = {
    # Settings
    "project": "project (GOOGLE_CLOUD_PROJECT)",
    "final_topic": "final_topic (PUBSUB_TOOLKIT_FINAL_TOPIC)",
    "dead_letter_topic": "dead_letter_topic (PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC)",
    "store_backend": "store_backend (PUBSUB_TOOLKIT_STORE_BACKEND)",
    "redis_url": "redis_url (PUBSUB_TOOLKIT_REDIS_URL)",
    "redis_url_secret": "redis_url_secret (PUBSUB_TOOLKIT_REDIS_URL_SECRET)",
    "redis_ca_cert_secret": "redis_ca_cert_secret (PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET)",
    "dedup_ttl": "dedup_ttl (PUBSUB_TOOLKIT_DEDUP_TTL_SECONDS)",
    "dedup_lease": "dedup_lease (PUBSUB_TOOLKIT_DEDUP_LEASE_SECONDS)",
    "dedup_collection": "dedup_collection (PUBSUB_TOOLKIT_DEDUP_COLLECTION)",
    "firestore_database": "firestore_database (PUBSUB_TOOLKIT_FIRESTORE_DATABASE)",
    "publish_timeout": "publish_timeout (PUBSUB_TOOLKIT_PUBLISH_TIMEOUT_SECONDS)",
    "stats_flush": "stats_flush (PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS)",
    # DelaySettings
    "queue": "queue (PUBSUB_TOOLKIT_TASKS_QUEUE)",
    "location": "location (PUBSUB_TOOLKIT_TASKS_LOCATION)",
    "target": "target (PUBSUB_TOOLKIT_TASKS_TARGET)",
    "relay_url": "relay_url (PUBSUB_TOOLKIT_RELAY_URL)",
    "invoker_email": "invoker_email (PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT)",
    "audience": "audience (PUBSUB_TOOLKIT_RELAY_AUDIENCE)",
    "appengine_service": "appengine_service (PUBSUB_TOOLKIT_RELAY_SERVICE)",
    "tasks_emulator_host": "tasks_emulator_host (CLOUD_TASKS_EMULATOR_HOST)",
    "relay_auth": "relay_auth (PUBSUB_TOOLKIT_RELAY_AUTH)",
    "oidc_certs_url": "oidc_certs_url (PUBSUB_TOOLKIT_OIDC_CERTS_URL)",
    # ConsumerSettings
    "consumer_id": "consumer_id (PUBSUB_TOOLKIT_CONSUMER_ID)",
    "max_attempts": "max_attempts (PUBSUB_TOOLKIT_FIFO_MAX_ATTEMPTS)",
    "poison_policy": "poison_policy (PUBSUB_TOOLKIT_FIFO_POISON_POLICY)",
    "gap_timeout": "gap_timeout (PUBSUB_TOOLKIT_FIFO_GAP_TIMEOUT_SECONDS)",
    "gap_policy": "gap_policy (PUBSUB_TOOLKIT_FIFO_GAP_POLICY)",
    "lease": "lease (PUBSUB_TOOLKIT_FIFO_LEASE_SECONDS)",
    "lease_hold": "lease_hold (PUBSUB_TOOLKIT_FIFO_LEASE_HOLD_SECONDS)",
    "park": "park (PUBSUB_TOOLKIT_FIFO_PARK)",
    "retry_backoff": "retry_backoff (PUBSUB_TOOLKIT_FIFO_RETRY_BACKOFF_SECONDS)",
}


@dataclass(frozen=True)
class DelaySettings:
    """Where due-later messages wait (Cloud Tasks) and how the relay is reached and trusts it.

    ``queue`` is ``projects/P/locations/L/queues/Q``, or a short name with ``location``: a
    :class:`Settings` holding this resolves it against its project. ``relay_auth`` defaults to
    ``"oidc"`` for an HTTP target and ``"appengine"`` for App Engine; ``audience`` to
    ``relay_url``.
    """

    queue: str
    target: TasksTarget = "http"
    relay_url: str | None = None  # HTTP target: the relay's base URL
    invoker_email: str | None = None  # the service account Cloud Tasks signs OIDC tokens as
    audience: str | None = None  # OIDC audience; defaults to relay_url
    appengine_service: str = "default"
    tasks_emulator_host: str | None = None  # host:port of the local Cloud Tasks emulator
    relay_auth: RelayAuth | None = None  # None: oidc for target http, appengine for appengine
    oidc_certs_url: str | None = None  # local stack only: the emulator's signing certificates
    location: str | None = None  # for a short queue name

    def __post_init__(self) -> None:
        for name in ("relay_url", "invoker_email", "audience", "tasks_emulator_host"):
            _set(self, name, _optional_text(self, name))
        _set(self, "oidc_certs_url", _optional_text(self, "oidc_certs_url"))
        _set(self, "location", _optional_text(self, "location"))
        _set(self, "target", _one_of(self, "target", _TARGETS))
        if self.relay_auth is None:
            _set(self, "relay_auth", "oidc" if self.target == "http" else "appengine")
        _set(self, "relay_auth", _one_of(self, "relay_auth", _RELAY_AUTHS))
        if self.relay_url is not None:
            _set(self, "relay_url", self.relay_url.rstrip("/"))
        if self.audience is None:
            _set(self, "audience", self.relay_url)
        if not isinstance(self.appengine_service, str) or not self.appengine_service.strip():
            raise ConfigurationError(f"{SETTING_NAMES['appengine_service']} must not be empty")
        queue = _text(self, "queue")
        if queue.startswith("projects/"):
            parts = queue.split("/")
            if len(parts) != 6 or parts[2] != "locations" or parts[4] != "queues" or not parts[5]:
                raise ConfigurationError(
                    f"{SETTING_NAMES['queue']} {queue!r} is not projects/P/locations/L/queues/Q "
                    "(or a short queue name with location (PUBSUB_TOOLKIT_TASKS_LOCATION))"
                )
        elif not queue or "/" in queue:
            raise ConfigurationError(
                f"{SETTING_NAMES['queue']} {queue!r} is not projects/P/locations/L/queues/Q "
                "(or a short queue name with location (PUBSUB_TOOLKIT_TASKS_LOCATION))"
            )
        elif self.location is None:
            raise ConfigurationError(
                f"{SETTING_NAMES['location']} is required when {SETTING_NAMES['queue']} is a "
                "short name"
            )
        _set(self, "queue", queue)
        if self.target == "http" and self.relay_url is None:
            raise ConfigurationError(
                f"{SETTING_NAMES['relay_url']} is required when {SETTING_NAMES['target']} is 'http'"
            )
        if self.relay_auth == "oidc" and self.invoker_email is None:
            raise ConfigurationError(
                f"{SETTING_NAMES['invoker_email']} is required when {SETTING_NAMES['relay_auth']}"
                " is 'oidc'"
            )

    def resolved(self, project: str) -> DelaySettings:
        """This, with a short ``queue`` made the full path in ``project``."""
        if self.queue.startswith("projects/"):
            return self
        return replace(self, queue=queue_path(project, self.location or "", self.queue))

    @classmethod
    def from_env(cls, env: Mapping[str, str], project: str) -> DelaySettings | None:
        """None when PUBSUB_TOOLKIT_TASKS_QUEUE is unset (delayed delivery off)."""
        queue = env.get("PUBSUB_TOOLKIT_TASKS_QUEUE", "").strip()
        if not queue:
            return None
        target = env.get("PUBSUB_TOOLKIT_TASKS_TARGET", "").strip().lower() or "http"
        relay_auth = env.get("PUBSUB_TOOLKIT_RELAY_AUTH", "").strip().lower() or None
        return cls(
            queue=queue,
            location=env.get("PUBSUB_TOOLKIT_TASKS_LOCATION", ""),
            target=target,  # type: ignore[arg-type]  # __post_init__ checks it
            relay_url=env.get("PUBSUB_TOOLKIT_RELAY_URL"),
            invoker_email=env.get("PUBSUB_TOOLKIT_TASKS_SERVICE_ACCOUNT"),
            audience=env.get("PUBSUB_TOOLKIT_RELAY_AUDIENCE"),
            appengine_service=env.get("PUBSUB_TOOLKIT_RELAY_SERVICE", "").strip() or "default",
            tasks_emulator_host=env.get("CLOUD_TASKS_EMULATOR_HOST"),
            relay_auth=relay_auth,  # type: ignore[arg-type]  # __post_init__ checks it
            oidc_certs_url=env.get("PUBSUB_TOOLKIT_OIDC_CERTS_URL"),
        ).resolved(project)


@dataclass(frozen=True)
class Settings:
    """Everything the deployed parts need to know: build it in code, or with :meth:`from_env`.

    Topics are short names (resolved against ``project``) or ``projects/P/topics/T`` paths;
    durations are :class:`~datetime.timedelta`. A bad value is a ConfigurationError naming the
    setting by argument and variable, the same from code as from the environment.
    """

    project: str
    final_topic: str
    dead_letter_topic: str
    # One backend for every store: dedup records, FIFO state, sequence counters, stats.
    store_backend: StoreBackend = "firestore"
    redis_url: str | None = None
    # Deployed parts keep the URL (it carries the AUTH string) and the server CA in Secret
    # Manager: version names, read once when the first Redis client is made (stores/factory).
    # ``projects/P/secrets/S`` means its latest version.
    redis_url_secret: str | None = None
    redis_ca_cert_secret: str | None = None
    dedup_ttl: timedelta = timedelta(seconds=DEFAULT_TTL_SECONDS)
    dedup_lease: timedelta = timedelta(seconds=DEFAULT_LEASE_SECONDS)
    dedup_collection: str = DEFAULT_DEDUP_COLLECTION
    firestore_database: str = DEFAULT_FIRESTORE_DATABASE
    publish_timeout: timedelta = timedelta(seconds=30)
    delay: DelaySettings | None = None
    # How often ingress adds its counters to the stats store (the status page); None: never.
    stats_flush: timedelta | None = timedelta(seconds=5)

    def __post_init__(self) -> None:
        project = _text(self, "project")
        if not project or "/" in project:
            raise ConfigurationError(
                f"{SETTING_NAMES['project']} is required"
                if not project
                else f"{SETTING_NAMES['project']} {project!r} is not a project id"
            )
        _set(self, "project", project)
        for name in ("final_topic", "dead_letter_topic"):
            _set(self, name, topic_path(project, _text(self, name), setting=name))
        _set(self, "store_backend", _one_of(self, "store_backend", _BACKENDS))
        for name in ("redis_url", "redis_url_secret", "redis_ca_cert_secret"):
            _set(self, name, _optional_text(self, name))
        _set(self, "redis_url_secret", _secret_version(self, "redis_url_secret"))
        _set(self, "redis_ca_cert_secret", _secret_version(self, "redis_ca_cert_secret"))
        if self.redis_url is not None and self.redis_url_secret is not None:
            raise ConfigurationError(
                f"set {SETTING_NAMES['redis_url']} or {SETTING_NAMES['redis_url_secret']}, not both"
            )
        if (
            self.store_backend == "redis"
            and self.redis_url is None
            and self.redis_url_secret is None
        ):
            raise ConfigurationError(
                "redis_url or redis_url_secret (PUBSUB_TOOLKIT_REDIS_URL or "
                "PUBSUB_TOOLKIT_REDIS_URL_SECRET) is required when "
                f"{SETTING_NAMES['store_backend']} is 'redis'"
            )
        for name in ("dedup_ttl", "dedup_lease", "publish_timeout"):
            _positive_duration(self, name)
        if self.dedup_ttl <= REDELIVERY_WINDOW:
            raise ConfigurationError(
                f"{SETTING_NAMES['dedup_ttl']} is {_secs(self.dedup_ttl)}: it must exceed "
                f"{_secs(REDELIVERY_WINDOW)} (7 days, how long Pub/Sub redelivers an unacked "
                "message), or a late redelivery would run again; the default is 8 days"
            )
        if self.stats_flush is not None:
            _positive_duration(self, "stats_flush", none_means="never")
        for name in ("dedup_collection", "firestore_database"):
            if not _text(self, name):
                raise ConfigurationError(f"{SETTING_NAMES[name]} must not be empty")
        if self.dedup_lease < 2 * self.publish_timeout:
            # A claim's work is a publish plus, at worst, a dead-letter publish: the lease must
            # outlast both, or another worker could take over while the first still publishes.
            raise ConfigurationError(
                f"{SETTING_NAMES['dedup_lease']} is {_secs(self.dedup_lease)}: it must be at "
                f"least twice {SETTING_NAMES['publish_timeout']}, {_secs(self.publish_timeout)}"
            )
        if self.delay is not None:
            if not isinstance(self.delay, DelaySettings):
                raise ConfigurationError(
                    f"delay must be a DelaySettings or None, not {type(self.delay).__name__}"
                )
            _set(self, "delay", self.delay.resolved(project))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read settings from ``env`` (default ``os.environ``): the same checks and messages as
        the constructor's, each naming the variable."""
        env = os.environ if env is None else env
        check_environment(env)
        project = env.get("GOOGLE_CLOUD_PROJECT", "").strip()
        return cls(
            project=project,
            final_topic=env.get("PUBSUB_TOOLKIT_FINAL_TOPIC", "").strip(),
            dead_letter_topic=env.get("PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC", "").strip(),
            store_backend=store_backend_from_env(env),
            redis_url=env.get("PUBSUB_TOOLKIT_REDIS_URL"),
            redis_url_secret=env.get("PUBSUB_TOOLKIT_REDIS_URL_SECRET"),
            redis_ca_cert_secret=env.get("PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET"),
            dedup_ttl=_seconds(
                env, "PUBSUB_TOOLKIT_DEDUP_TTL_SECONDS", "dedup_ttl", DEFAULT_TTL_SECONDS
            ),
            dedup_lease=_seconds(
                env, "PUBSUB_TOOLKIT_DEDUP_LEASE_SECONDS", "dedup_lease", DEFAULT_LEASE_SECONDS
            ),
            dedup_collection=env.get("PUBSUB_TOOLKIT_DEDUP_COLLECTION", "").strip()
            or DEFAULT_DEDUP_COLLECTION,
            firestore_database=env.get("PUBSUB_TOOLKIT_FIRESTORE_DATABASE", "").strip()
            or DEFAULT_FIRESTORE_DATABASE,
            publish_timeout=_seconds(
                env, "PUBSUB_TOOLKIT_PUBLISH_TIMEOUT_SECONDS", "publish_timeout", 30
            ),
            # With no project the constructor's "project is required" is the one to see.
            delay=DelaySettings.from_env(env, project) if project else None,
            stats_flush=None
            if env.get("PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS", "").strip() == "0"
            else _seconds(env, "PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS", "stats_flush", 5),
        )


_SECRET_VERSION = re.compile(r"projects/[^/]+/secrets/[^/]+(/versions/[^/]+)?")


def _secret_version(settings: object, name: str) -> str | None:
    """A Secret Manager version name (``projects/P/secrets/S`` means its latest version), or
    None; a malformed one is a ConfigurationError."""
    value: str | None = getattr(settings, name)
    if value is None:
        return None
    if not _SECRET_VERSION.fullmatch(value):
        raise ConfigurationError(
            f"{SETTING_NAMES[name]} {value!r} is not a Secret Manager secret "
            "(projects/PROJECT/secrets/NAME[/versions/VERSION])"
        )
    return value if "/versions/" in value else f"{value}/versions/latest"


def store_backend_from_env(env: Mapping[str, str]) -> StoreBackend:
    """PUBSUB_TOOLKIT_STORE_BACKEND, lower-cased (default firestore); :class:`Settings` checks
    it. Its former names (STORE_BACKEND, DEDUP_BACKEND) are not read (the start-up WARNING of
    :func:`~pubsub_toolkit.environment.check_environment` names the new one)."""
    raw = env.get("PUBSUB_TOOLKIT_STORE_BACKEND", "").strip().lower() or "firestore"
    return raw  # type: ignore[return-value]  # Settings checks it


def topic_path(project: str, topic: str, *, setting: str | None = None) -> str:
    """Accept a short topic name or a full ``projects/P/topics/T`` path; return the full path.

    ``setting`` (a :class:`Settings` field name) is named in the error.
    """
    what = f"{SETTING_NAMES[setting]} " if setting else ""
    if setting and not topic:
        raise ConfigurationError(f"{SETTING_NAMES[setting]} is required")
    if topic.startswith("projects/"):
        parts = topic.split("/")
        if len(parts) != 4 or parts[2] != "topics" or not parts[3]:
            raise ConfigurationError(f"{what}{topic!r} is not a topic path projects/P/topics/T")
        return topic
    if not topic or "/" in topic:
        raise ConfigurationError(
            f"{what}{topic!r} is not a topic name or a path projects/P/topics/T"
        )
    return f"projects/{project}/topics/{topic}"


@dataclass(frozen=True)
class ConsumerSettings:
    """A consumer's identity and its FIFO policies (the gate's knobs): in code, or from_env."""

    consumer_id: str
    max_attempts: int = 5
    poison_policy: PoisonPolicy = "skip"
    gap_timeout: timedelta = timedelta(minutes=5)
    gap_policy: GapPolicy = "wait"
    lease: timedelta = timedelta(seconds=60)
    park: bool = True
    # First wait after a handler failure, doubling per counted failure (capped at 5 minutes):
    # with 5 attempts a message becomes poison after about 75 s of failures, not 5 s.
    retry_backoff: timedelta = timedelta(seconds=5)
    # Keep a group's lease after an advance for the group's next delivery (one state write per
    # message instead of two); used within lease_hold of the advance it needs no write at all.
    # None lets the runner choose: the streaming Consumer holds (2 s), everything else - a push
    # function, whose next delivery may reach another instance - does not. At most half the lease.
    lease_hold: timedelta | None = None

    def __post_init__(self) -> None:
        consumer_id = _text(self, "consumer_id")
        if not consumer_id:
            raise ConfigurationError(f"{SETTING_NAMES['consumer_id']} is required")
        if len(consumer_id.encode()) > MAX_CONSUMER_ID_BYTES:
            raise ConfigurationError(
                f"{SETTING_NAMES['consumer_id']} is {len(consumer_id.encode())} bytes: at most "
                f"{MAX_CONSUMER_ID_BYTES} (it is a message attribute's value on RetryLater copies)"
            )
        _set(self, "consumer_id", consumer_id)
        attempts = self.max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ConfigurationError(
                f"{SETTING_NAMES['max_attempts']} must be an integer >= 1, not {attempts!r}"
            )
        _set(self, "poison_policy", _one_of(self, "poison_policy", _POISON_POLICIES))
        _set(self, "gap_policy", _one_of(self, "gap_policy", _GAP_POLICIES))
        for name in ("gap_timeout", "lease", "retry_backoff"):
            _positive_duration(self, name)
        hold = self.lease_hold
        if hold is not None and (
            not isinstance(hold, timedelta) or hold < timedelta(0) or hold * 2 > self.lease
        ):
            raise ConfigurationError(
                f"{SETTING_NAMES['lease_hold']} must be between 0 and half of "
                f"{SETTING_NAMES['lease']}, not {hold!r}"
            )
        if not isinstance(self.park, bool):
            raise ConfigurationError(
                f"{SETTING_NAMES['park']} must be true or false, not {self.park!r}"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ConsumerSettings:
        """Read the consumer's settings from ``env`` (default ``os.environ``)."""
        env = os.environ if env is None else env
        check_environment(env)
        raw_attempts = env.get("PUBSUB_TOOLKIT_FIFO_MAX_ATTEMPTS", "").strip() or "5"
        try:
            attempts = int(raw_attempts)
        except ValueError:
            raise ConfigurationError(
                f"{SETTING_NAMES['max_attempts']} must be an integer >= 1, not {raw_attempts!r}"
            ) from None
        return cls(
            consumer_id=env.get("PUBSUB_TOOLKIT_CONSUMER_ID", "").strip(),
            max_attempts=attempts,
            poison_policy=env.get("PUBSUB_TOOLKIT_FIFO_POISON_POLICY", "").strip().lower()  # type: ignore[arg-type]
            or "skip",
            gap_timeout=_seconds(
                env, "PUBSUB_TOOLKIT_FIFO_GAP_TIMEOUT_SECONDS", "gap_timeout", 300
            ),
            gap_policy=env.get("PUBSUB_TOOLKIT_FIFO_GAP_POLICY", "").strip().lower()  # type: ignore[arg-type]
            or "wait",
            lease=_seconds(env, "PUBSUB_TOOLKIT_FIFO_LEASE_SECONDS", "lease", 60),
            park=flag(env, "PUBSUB_TOOLKIT_FIFO_PARK", label=SETTING_NAMES["park"]),
            retry_backoff=_seconds(
                env, "PUBSUB_TOOLKIT_FIFO_RETRY_BACKOFF_SECONDS", "retry_backoff", 5
            ),
            lease_hold=(
                _seconds(env, "PUBSUB_TOOLKIT_FIFO_LEASE_HOLD_SECONDS", "lease_hold", 0)
                if env.get("PUBSUB_TOOLKIT_FIFO_LEASE_HOLD_SECONDS", "").strip()
                else None
            ),
        )


def queue_path(project: str, location: str, queue: str) -> str:
    """Accept ``projects/P/locations/L/queues/Q``, or a short name with a location."""
    if queue.startswith("projects/"):
        parts = queue.split("/")
        if len(parts) != 6 or parts[2] != "locations" or parts[4] != "queues" or not parts[5]:
            raise ConfigurationError(
                f"{SETTING_NAMES['queue']} {queue!r} is not projects/P/locations/L/queues/Q "
                "(or a short queue name with location (PUBSUB_TOOLKIT_TASKS_LOCATION))"
            )
        return queue
    if not location.strip():
        raise ConfigurationError(
            f"{SETTING_NAMES['location']} is required when {SETTING_NAMES['queue']} is a short name"
        )
    return f"projects/{project}/locations/{location.strip()}/queues/{queue}"


# --- the one validation path's pieces --------------------------------------------------------


def _set(settings: object, name: str, value: object) -> None:
    object.__setattr__(settings, name, value)  # frozen: __post_init__ normalises in place


def _text(settings: object, name: str) -> str:
    value = getattr(settings, name)
    if not isinstance(value, str):
        raise ConfigurationError(
            f"{SETTING_NAMES[name]} must be a string, not {type(value).__name__}"
        )
    return value.strip()


def _optional_text(settings: object, name: str) -> str | None:
    """A string setting that may be absent: None, or blank (an empty variable), is absent."""
    if getattr(settings, name) is None:
        return None
    return _text(settings, name) or None


def _one_of(settings: object, name: str, choices: tuple[str, ...]) -> str:
    value = getattr(settings, name)
    if value not in choices:
        raise ConfigurationError(
            f"{SETTING_NAMES[name]} {value!r} is not one of {', '.join(choices)}"
        )
    return str(value)


def _positive_duration(settings: object, name: str, *, none_means: str | None = None) -> None:
    value = getattr(settings, name)
    kind = "a positive timedelta" + (f" or None ({none_means})" if none_means else "")
    if not isinstance(value, timedelta):
        raise ConfigurationError(
            f"{SETTING_NAMES[name]} must be {kind}, not {type(value).__name__} {value!r}"
        )
    if value <= timedelta(0):
        raise ConfigurationError(f"{SETTING_NAMES[name]} must be {kind}, not {_secs(value)}")


def _secs(value: timedelta) -> str:
    return f"{value.total_seconds():g} s"


def _seconds(env: Mapping[str, str], variable: str, name: str, default: float) -> timedelta:
    """``env[variable]`` as a duration; only a string that is no number is refused here (the
    constructor checks the duration itself)."""
    raw = env.get(variable)
    if raw is None or not raw.strip():
        return timedelta(seconds=default)
    try:
        value = float(raw)
        if not math.isfinite(value):
            raise ValueError(raw)
        return timedelta(seconds=value)
    except (ValueError, OverflowError) as exc:
        raise ConfigurationError(
            f"{SETTING_NAMES[name]} {raw!r} is not a number of seconds"
        ) from exc
