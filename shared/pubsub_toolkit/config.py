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

The checks the constructors share, and each setting's two names (:data:`SETTING_NAMES`), are in
:mod:`pubsub_toolkit._config_checks`.

(About 420 lines: the three settings classes, each check beside the parsing of the variable it
names, so that one module shows that both paths meet in the constructor.)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Literal

from pubsub_toolkit._config_checks import (
    SETTING_NAMES,
    env_seconds,
    one_of,
    optional_text,
    positive_duration,
    secret_version,
    secs,
    set_value,
    store_prefix,
    text,
    unused_settings,
)
from pubsub_toolkit.environment import check_environment, flag
from pubsub_toolkit.errors import ConfigurationError

__all__ = [  # with SETTING_NAMES from _config_checks: imported from here before the split
    "DEFAULT_DEDUP_COLLECTION",
    "DEFAULT_FIRESTORE_DATABASE",
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_TTL_SECONDS",
    "MAX_CONSUMER_ID_BYTES",
    "REDELIVERY_WINDOW",
    "SETTING_NAMES",
    "ConsumerSettings",
    "DelaySettings",
    "GapPolicy",
    "PoisonPolicy",
    "RelayAuth",
    "Settings",
    "StoreBackend",
    "TasksTarget",
    "queue_path",
    "store_backend_from_env",
    "topic_path",
]

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
            set_value(self, name, optional_text(self, name))
        set_value(self, "oidc_certs_url", optional_text(self, "oidc_certs_url"))
        set_value(self, "location", optional_text(self, "location"))
        set_value(self, "target", one_of(self, "target", _TARGETS))
        if self.relay_auth is None:
            set_value(self, "relay_auth", "oidc" if self.target == "http" else "appengine")
        set_value(self, "relay_auth", one_of(self, "relay_auth", _RELAY_AUTHS))
        if self.relay_url is not None:
            set_value(self, "relay_url", self.relay_url.rstrip("/"))
        if self.audience is None:
            set_value(self, "audience", self.relay_url)
        if not isinstance(self.appengine_service, str) or not self.appengine_service.strip():
            raise ConfigurationError(f"{SETTING_NAMES['appengine_service']} must not be empty")
        queue = text(self, "queue")
        if not queue.startswith("projects/") and (not queue or "/" in queue):
            raise _not_a_queue(queue)
        # A path's shape, or a short name's location: the project comes later (resolved).
        queue_path("", self.location or "", queue)
        set_value(self, "queue", queue)
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
    # In front of every collection and Redis key prefix of the stores (stores/factory builds
    # the names), so deployments sharing a database or a Redis keep their counters, FIFO state,
    # stats and dedup records apart; "" keeps the unprefixed names.
    store_prefix: str = ""
    publish_timeout: timedelta = timedelta(seconds=30)
    delay: DelaySettings | None = None
    # How often ingress adds its counters to the stats store (the status page); None: never.
    stats_flush: timedelta | None = timedelta(seconds=5)

    def __post_init__(self) -> None:
        project = text(self, "project")
        if not project or "/" in project:
            raise ConfigurationError(
                f"{SETTING_NAMES['project']} is required"
                if not project
                else f"{SETTING_NAMES['project']} {project!r} is not a project id"
            )
        set_value(self, "project", project)
        for name in ("final_topic", "dead_letter_topic"):
            set_value(self, name, topic_path(project, text(self, name), setting=name))
        set_value(self, "store_backend", one_of(self, "store_backend", _BACKENDS))
        for name in ("redis_url", "redis_url_secret", "redis_ca_cert_secret"):
            set_value(self, name, optional_text(self, name))
        set_value(self, "redis_url_secret", secret_version(self, "redis_url_secret"))
        set_value(self, "redis_ca_cert_secret", secret_version(self, "redis_ca_cert_secret"))
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
        if self.store_backend != "redis":
            unused_settings(
                self,
                ("redis_url", "redis_url_secret", "redis_ca_cert_secret"),
                because=f"{SETTING_NAMES['store_backend']} is {self.store_backend!r} "
                "(set it to 'redis' to use Redis)",
            )
        for name in ("dedup_ttl", "dedup_lease", "publish_timeout"):
            positive_duration(self, name)
        if self.dedup_ttl <= REDELIVERY_WINDOW:
            raise ConfigurationError(
                f"{SETTING_NAMES['dedup_ttl']} is {secs(self.dedup_ttl)}: it must exceed "
                f"{secs(REDELIVERY_WINDOW)} (7 days, how long Pub/Sub redelivers an unacked "
                "message), or a late redelivery would run again; the default is 8 days"
            )
        if self.stats_flush is not None:
            positive_duration(self, "stats_flush", none_means="never")
        for name in ("dedup_collection", "firestore_database"):
            if not text(self, name):
                raise ConfigurationError(f"{SETTING_NAMES[name]} must not be empty")
        set_value(self, "store_prefix", store_prefix(self, "store_prefix"))
        if self.dedup_lease < 2 * self.publish_timeout:
            # A claim's work is a publish plus, at worst, a dead-letter publish: the lease must
            # outlast both, or another worker could take over while the first still publishes.
            raise ConfigurationError(
                f"{SETTING_NAMES['dedup_lease']} is {secs(self.dedup_lease)}: it must be at "
                f"least twice {SETTING_NAMES['publish_timeout']}, {secs(self.publish_timeout)}"
            )
        if self.delay is not None:
            if not isinstance(self.delay, DelaySettings):
                raise ConfigurationError(
                    f"delay must be a DelaySettings or None, not {type(self.delay).__name__}"
                )
            set_value(self, "delay", self.delay.resolved(project))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read settings from ``env`` (default ``os.environ``): the same checks and messages as
        the constructor's, each naming the variable."""
        env = os.environ if env is None else env
        check_environment(env)
        # Read by the entry points (tracing_setup), checked here too: a value other than on or
        # off stops every start the same way, not only the deployed parts'.
        flag(env, "PUBSUB_TOOLKIT_TRACING")
        project = env.get("GOOGLE_CLOUD_PROJECT", "").strip()
        return cls(
            project=project,
            final_topic=env.get("PUBSUB_TOOLKIT_FINAL_TOPIC", "").strip(),
            dead_letter_topic=env.get("PUBSUB_TOOLKIT_DEAD_LETTER_TOPIC", "").strip(),
            store_backend=store_backend_from_env(env),
            redis_url=env.get("PUBSUB_TOOLKIT_REDIS_URL"),
            redis_url_secret=env.get("PUBSUB_TOOLKIT_REDIS_URL_SECRET"),
            redis_ca_cert_secret=env.get("PUBSUB_TOOLKIT_REDIS_CA_CERT_SECRET"),
            dedup_ttl=env_seconds(
                env, "PUBSUB_TOOLKIT_DEDUP_TTL_SECONDS", "dedup_ttl", DEFAULT_TTL_SECONDS
            ),
            dedup_lease=env_seconds(
                env, "PUBSUB_TOOLKIT_DEDUP_LEASE_SECONDS", "dedup_lease", DEFAULT_LEASE_SECONDS
            ),
            dedup_collection=env.get("PUBSUB_TOOLKIT_DEDUP_COLLECTION", "").strip()
            or DEFAULT_DEDUP_COLLECTION,
            firestore_database=env.get("PUBSUB_TOOLKIT_FIRESTORE_DATABASE", "").strip()
            or DEFAULT_FIRESTORE_DATABASE,
            store_prefix=env.get("PUBSUB_TOOLKIT_STORE_PREFIX", ""),
            publish_timeout=env_seconds(
                env, "PUBSUB_TOOLKIT_PUBLISH_TIMEOUT_SECONDS", "publish_timeout", 30
            ),
            # With no project the constructor's "project is required" is the one to see.
            delay=DelaySettings.from_env(env, project) if project else None,
            stats_flush=None
            if env.get("PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS", "").strip() == "0"
            else env_seconds(env, "PUBSUB_TOOLKIT_STATS_FLUSH_SECONDS", "stats_flush", 5),
        )


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
        consumer_id = text(self, "consumer_id")
        if not consumer_id:
            raise ConfigurationError(f"{SETTING_NAMES['consumer_id']} is required")
        if len(consumer_id.encode()) > MAX_CONSUMER_ID_BYTES:
            raise ConfigurationError(
                f"{SETTING_NAMES['consumer_id']} is {len(consumer_id.encode())} bytes: at most "
                f"{MAX_CONSUMER_ID_BYTES} (it is a message attribute's value on RetryLater copies)"
            )
        set_value(self, "consumer_id", consumer_id)
        attempts = self.max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ConfigurationError(
                f"{SETTING_NAMES['max_attempts']} must be an integer >= 1, not {attempts!r}"
            )
        set_value(self, "poison_policy", one_of(self, "poison_policy", _POISON_POLICIES))
        set_value(self, "gap_policy", one_of(self, "gap_policy", _GAP_POLICIES))
        for name in ("gap_timeout", "lease", "retry_backoff"):
            positive_duration(self, name)
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
            gap_timeout=env_seconds(
                env, "PUBSUB_TOOLKIT_FIFO_GAP_TIMEOUT_SECONDS", "gap_timeout", 300
            ),
            gap_policy=env.get("PUBSUB_TOOLKIT_FIFO_GAP_POLICY", "").strip().lower()  # type: ignore[arg-type]
            or "wait",
            lease=env_seconds(env, "PUBSUB_TOOLKIT_FIFO_LEASE_SECONDS", "lease", 60),
            park=flag(env, "PUBSUB_TOOLKIT_FIFO_PARK", label=SETTING_NAMES["park"]),
            retry_backoff=env_seconds(
                env, "PUBSUB_TOOLKIT_FIFO_RETRY_BACKOFF_SECONDS", "retry_backoff", 5
            ),
            lease_hold=(
                env_seconds(env, "PUBSUB_TOOLKIT_FIFO_LEASE_HOLD_SECONDS", "lease_hold", 0)
                if env.get("PUBSUB_TOOLKIT_FIFO_LEASE_HOLD_SECONDS", "").strip()
                else None
            ),
        )


def queue_path(project: str, location: str, queue: str) -> str:
    """Accept ``projects/P/locations/L/queues/Q``, or a short name with a location."""
    if queue.startswith("projects/"):
        parts = queue.split("/")
        if len(parts) != 6 or parts[2] != "locations" or parts[4] != "queues" or not parts[5]:
            raise _not_a_queue(queue)
        return queue
    if not location.strip():
        raise ConfigurationError(
            f"{SETTING_NAMES['location']} is required when {SETTING_NAMES['queue']} is a short name"
        )
    return f"projects/{project}/locations/{location.strip()}/queues/{queue}"


def _not_a_queue(queue: str) -> ConfigurationError:
    return ConfigurationError(
        f"{SETTING_NAMES['queue']} {queue!r} is not projects/P/locations/L/queues/Q "
        "(or a short queue name with location (PUBSUB_TOOLKIT_TASKS_LOCATION))"
    )
