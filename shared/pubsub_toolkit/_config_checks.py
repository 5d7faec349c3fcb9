"""Each setting's two names, and the checks every settings constructor runs on its values.

The settings classes of :mod:`pubsub_toolkit.config` validate in ``__post_init__``, the one
validation path for values from code and from the environment. These are the pieces they
share: :data:`SETTING_NAMES` (a setting by its argument and its variable, so one message serves
both), the checks of a string, a choice, a positive duration and a Secret Manager version name
(each a ConfigurationError naming the setting), and :func:`env_seconds`, the one parse of a
variable's string that ``from_env`` does itself (a string that is no number).

Standard library only: this is the contract layer (``[tool.importlinter]``), which must import
with no third-party package installed.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from datetime import timedelta

from pubsub_toolkit.errors import ConfigurationError

logger = logging.getLogger("pubsub_toolkit.config")

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
    "store_prefix": "store_prefix (PUBSUB_TOOLKIT_STORE_PREFIX)",
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

_SECRET_VERSION = re.compile(r"projects/[^/]+/secrets/[^/]+(/versions/[^/]+)?")
# A store prefix begins Firestore collection ids and Redis key prefixes: only characters both
# take as they are (no "/" of a document path, no "-" that Terraform's name_prefix turns into
# "_", no ":" that separates the parts of a Redis key), short enough to leave the name readable.
_STORE_PREFIX = re.compile(r"[A-Za-z0-9_]{0,30}")


def set_value(settings: object, name: str, value: object) -> None:
    """Set field ``name`` of a frozen ``settings`` (its ``__post_init__`` normalises in place)."""
    object.__setattr__(settings, name, value)


def text(settings: object, name: str) -> str:
    """String setting ``name``, stripped; anything but a string is a ConfigurationError."""
    value = getattr(settings, name)
    if not isinstance(value, str):
        raise ConfigurationError(
            f"{SETTING_NAMES[name]} must be a string, not {type(value).__name__}"
        )
    return value.strip()


def optional_text(settings: object, name: str) -> str | None:
    """A string setting that may be absent: None, or blank (an empty variable), is absent."""
    if getattr(settings, name) is None:
        return None
    return text(settings, name) or None


def one_of(settings: object, name: str, choices: tuple[str, ...]) -> str:
    """Setting ``name``, which must be one of ``choices``."""
    value = getattr(settings, name)
    if value not in choices:
        raise ConfigurationError(
            f"{SETTING_NAMES[name]} {value!r} is not one of {', '.join(choices)}"
        )
    return str(value)


def positive_duration(settings: object, name: str, *, none_means: str | None = None) -> None:
    """Refuse setting ``name`` unless it is a positive timedelta (``none_means``: what None
    means, for a setting that may be None - named in the message, checked by the caller)."""
    value = getattr(settings, name)
    kind = "a positive timedelta" + (f" or None ({none_means})" if none_means else "")
    if not isinstance(value, timedelta):
        raise ConfigurationError(
            f"{SETTING_NAMES[name]} must be {kind}, not {type(value).__name__} {value!r}"
        )
    if value <= timedelta(0):
        raise ConfigurationError(f"{SETTING_NAMES[name]} must be {kind}, not {secs(value)}")


def secret_version(settings: object, name: str) -> str | None:
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


def store_prefix(settings: object, name: str) -> str:
    """Setting ``name`` as a store prefix, stripped: "" or up to 30 ASCII letters, digits and
    underscores (e.g. ``blue_``), else a ConfigurationError."""
    value = text(settings, name)
    if not _STORE_PREFIX.fullmatch(value):
        raise ConfigurationError(
            f"{SETTING_NAMES[name]} {value!r} must be empty or up to 30 ASCII letters, digits "
            "and underscores (e.g. 'blue_'): it begins Firestore collection ids and Redis keys"
        )
    return value


def unused_settings(settings: object, names: tuple[str, ...], *, because: str) -> None:
    """Log one WARNING naming each of ``names`` that is set although ``because`` (a setting and
    its value) means it is not used: set but ignored is how a forgotten backend hides. Only
    names are said, never values (a Redis URL carries its AUTH string)."""
    unused = [SETTING_NAMES[name] for name in names if getattr(settings, name) is not None]
    if unused:
        logger.warning(
            "%s %s set but not used: %s",
            " and ".join(unused),
            "is" if len(unused) == 1 else "are",
            because,
        )


def secs(value: timedelta) -> str:
    """A duration as messages show it (``"30 s"``)."""
    return f"{value.total_seconds():g} s"


def env_seconds(env: Mapping[str, str], variable: str, name: str, default: float) -> timedelta:
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
