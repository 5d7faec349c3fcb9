"""Every environment variable the toolkit reads, in one table, and the check made at start.

The toolkit's own variables all begin with ``PUBSUB_TOOLKIT_``, so they never collide with an
application's (``REDIS_URL``, ``CONSUMER_ID`` and ``TRACING`` are common names of their own).
Google's variables (``GOOGLE_CLOUD_PROJECT``, the emulator hosts such as
``PUBSUB_EMULATOR_HOST``, ``FIRESTORE_EMULATOR_HOST`` and ``CLOUD_TASKS_EMULATOR_HOST``) and
OpenTelemetry's ``OTEL_*`` keep their own names.

:func:`check_environment` runs in every ``from_env`` (and in each entry point's tracing set-up):

* a ``PUBSUB_TOOLKIT_*`` name that is not in :data:`VARIABLES` is a misspelling or a variable of
  another version: a ConfigurationError names it and the closest known name, rather than the
  setting being silently left at its default;
* a bare name of an earlier version (``FIFO_MAX_ATTEMPTS``) set without its new name is no
  longer read: one WARNING per name and process names the new one (its value is not read, it
  may be the application's own).

Booleans accept exactly the two values the settings page documents for each (:func:`flag`).
"""

from __future__ import annotations

import difflib
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from pubsub_toolkit.errors import ConfigurationError

logger = logging.getLogger(__name__)

PREFIX = "PUBSUB_TOOLKIT_"


@dataclass(frozen=True)
class Variable:
    """One variable: what it is for (``where``), and for a boolean its two accepted values."""

    where: str
    # A boolean's exact spellings (on, off) and its value when unset or empty.
    flag: tuple[str, str] | None = None
    default: bool = False


def _p(name: str) -> str:
    return PREFIX + name


_ON_OFF = ("on", "off")
_TRUE_FALSE = ("true", "false")

# name -> Variable. Settings (config.py), the entry points, the CLI and the local stack read
# these and only these; docs/reference/settings.md documents each.
VARIABLES: Mapping[str, Variable] = {
    # Settings (every part)
    _p("FINAL_TOPIC"): Variable("settings"),
    _p("DEAD_LETTER_TOPIC"): Variable("settings"),
    _p("STORE_BACKEND"): Variable("settings"),
    _p("REDIS_URL"): Variable("settings"),
    _p("REDIS_URL_SECRET"): Variable("settings"),
    _p("REDIS_CA_CERT_SECRET"): Variable("settings"),
    _p("DEDUP_TTL_SECONDS"): Variable("settings"),
    _p("DEDUP_LEASE_SECONDS"): Variable("settings"),
    _p("DEDUP_COLLECTION"): Variable("settings"),
    _p("FIRESTORE_DATABASE"): Variable("settings"),
    _p("STORE_PREFIX"): Variable("settings"),
    _p("PUBLISH_TIMEOUT_SECONDS"): Variable("settings"),
    _p("STATS_FLUSH_SECONDS"): Variable("settings"),
    _p("METRICS_EXPORTER"): Variable("metrics"),
    _p("METRICS_EXPORT_SECONDS"): Variable("metrics"),
    _p("TRACING"): Variable("tracing", flag=_ON_OFF, default=False),
    _p("TRACE_FILE"): Variable("tracing"),
    # Delayed delivery (ingress, relay)
    _p("TASKS_QUEUE"): Variable("delay"),
    _p("TASKS_LOCATION"): Variable("delay"),
    _p("TASKS_TARGET"): Variable("delay"),
    _p("RELAY_URL"): Variable("delay"),
    _p("TASKS_SERVICE_ACCOUNT"): Variable("delay"),
    _p("RELAY_AUDIENCE"): Variable("delay"),
    _p("RELAY_AUTH"): Variable("delay"),
    _p("TASKS_MAX_ATTEMPTS"): Variable("relay"),
    _p("RELAY_SERVICE"): Variable("delay"),
    _p("RELAY_TRUST_CLOUD_RUN_IAM"): Variable("relay", flag=_TRUE_FALSE, default=False),
    _p("OIDC_CERTS_URL"): Variable("relay (local stack)"),
    # Consumers
    _p("CONSUMER_ID"): Variable("consumer"),
    _p("HANDLER"): Variable("functions/consumer"),
    _p("FIFO_MAX_ATTEMPTS"): Variable("consumer"),
    _p("FIFO_POISON_POLICY"): Variable("consumer"),
    _p("FIFO_GAP_TIMEOUT_SECONDS"): Variable("consumer"),
    _p("FIFO_GAP_POLICY"): Variable("consumer"),
    _p("FIFO_LEASE_SECONDS"): Variable("consumer"),
    _p("FIFO_LEASE_HOLD_SECONDS"): Variable("consumer"),
    _p("FIFO_RETRY_BACKOFF_SECONDS"): Variable("consumer"),
    _p("FIFO_PARK"): Variable("consumer", flag=_TRUE_FALSE, default=True),
    _p("FINAL_SUBSCRIPTION"): Variable("CLI, status page"),
    _p("ORIGIN_SUBSCRIPTION"): Variable("status page"),
    # The local stack
    _p("STATE_DIR"): Variable("local stack"),
    _p("SDK_ROOT"): Variable("local stack"),
    # Internal: the test suite's mutation runs (tests/conftest.py). Listed so that a function or
    # relay started inside such a run is not refused; the library itself never reads it.
    _p("TEST_MUTATION"): Variable("internal: tests"),
}

# The bare names of earlier versions -> their names now. Not read any more (an application's
# own REDIS_URL or CONSUMER_ID would be taken for the toolkit's); only named in a WARNING.
FORMER_NAMES: Mapping[str, str] = {
    **{
        name.removeprefix(PREFIX): name
        for name, variable in VARIABLES.items()
        if not variable.where.startswith(("local stack", "internal"))
    },
    "DEDUP_BACKEND": _p("STORE_BACKEND"),  # STORE_BACKEND's own older name
}

_warned: set[str] = set()
_warned_lock = threading.Lock()


def check_environment(env: Mapping[str, str]) -> None:
    """Refuse an unknown ``PUBSUB_TOOLKIT_*`` name in ``env`` (ConfigurationError naming it and
    the closest known one); warn once per process about each former bare name set without its
    new name."""
    unknown = sorted(n for n in env if n.startswith(PREFIX) and n not in VARIABLES)
    if unknown:
        raise ConfigurationError("; ".join(_unknown(name) for name in unknown))
    former = [(old, new) for old, new in FORMER_NAMES.items() if old in env and new not in env]
    with _warned_lock:
        fresh = [(old, new) for old, new in former if old not in _warned]
        _warned.update(old for old, _ in fresh)
    for old, new in fresh:
        logger.warning(
            "%s is set but no longer read: the toolkit's variables begin with %s, set %s instead",
            old,
            PREFIX,
            new,
        )


def _unknown(name: str) -> str:
    # Compared without the prefix they all share, which would make any name look close.
    known = [known.removeprefix(PREFIX) for known in VARIABLES]
    close = difflib.get_close_matches(name.removeprefix(PREFIX), known, n=1, cutoff=0.6)
    hint = f": did you mean {PREFIX}{close[0]}?" if close else ""
    return f"unknown variable {name}{hint} (docs/reference/settings.md lists every one)"


def flag(env: Mapping[str, str], name: str, *, label: str | None = None) -> bool:
    """The boolean ``name`` from ``env``: exactly one of its two documented values (surrounding
    blanks aside); unset or empty is its default; anything else is a ConfigurationError naming
    the variable (as ``label``, default ``name``) and both values."""
    variable = VARIABLES[name]
    if variable.flag is None:
        raise KeyError(f"{name} is not a boolean")
    on, off = variable.flag
    raw = env.get(name, "").strip()
    if not raw:
        return variable.default
    if raw not in (on, off):
        raise ConfigurationError(f"{label or name} must be {on} or {off}, not {raw!r}")
    return raw == on
