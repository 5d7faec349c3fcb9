"""Which Cloud Tasks attempt a release request is, and how many the queue makes at most.

Cloud Tasks retries a task the relay answers 5xx, up to the queue's ``max_attempts``, then
deletes it: a message whose every attempt failed (a store outage longer than the retry budget,
about 7.7 h with the deployed 100 attempts) would reach neither the final nor the dead-letter
topic. So the relay must know its last attempt and not answer 5xx then (:mod:`.relay`) - and
the one before it, where it hands the message over already while a create in doubt can still
be settled by the last (:mod:`.last_attempt`).

Each attempt carries the number of attempts before it: ``X-CloudTasks-TaskRetryCount`` on HTTP
targets, ``X-AppEngine-TaskRetryCount`` on App Engine targets (0 on the first attempt; it counts
attempts that never reached the relay too). The relay trusts them only after the request was
authenticated as Cloud Tasks' (App Engine strips ``X-AppEngine-*`` from outside requests; an
HTTP target's request carries the invoker's OIDC token).

The queue's ``max_attempts`` is configuration: ``PUBSUB_TOOLKIT_TASKS_MAX_ATTEMPTS`` must equal the
queue's ``retry_config.max_attempts`` (Terraform's ``tasks_retry.max_attempts``, the gcloud script's
``--max-attempts``), 100 by default like both; ``-1`` (unlimited, as on the queue) means the queue
never gives up, so neither does the relay. A value *lower* than the queue's only dead-letters early;
a *higher* one loses what it was meant to save.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from pubsub_toolkit.errors import ConfigurationError

logger = logging.getLogger(__name__)

MAX_ATTEMPTS_ENV = "PUBSUB_TOOLKIT_TASKS_MAX_ATTEMPTS"
DEFAULT_MAX_ATTEMPTS = 100  # the queue's max_attempts in terraform/ and scripts/deploy-gcloud
UNLIMITED = -1
RETRY_COUNT_HEADERS = ("X-CloudTasks-TaskRetryCount", "X-AppEngine-TaskRetryCount")


def attempt_from_headers(headers: Mapping[str, str]) -> int | None:
    """The 1-based attempt number of this request, or None when no header says it.

    A malformed value is logged and treated as unknown (the relay then answers as on any
    attempt but the last: never a dead letter on a guess).
    """
    for name in RETRY_COUNT_HEADERS:
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            retries = int(raw.strip())
        except ValueError:
            retries = -1
        if retries < 0:
            logger.warning("ignoring %s=%r: not a retry count", name, raw)
            return None
        return retries + 1
    return None


def max_attempts_from_env(env: Mapping[str, str]) -> int | None:
    """``PUBSUB_TOOLKIT_TASKS_MAX_ATTEMPTS`` (default 100); None for -1, the queue's "unlimited"."""
    raw = env.get(MAX_ATTEMPTS_ENV, "").strip() or str(DEFAULT_MAX_ATTEMPTS)
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value == UNLIMITED:
        return None
    if value < 1:
        raise ConfigurationError(
            f"{MAX_ATTEMPTS_ENV}={raw!r} must be the queue's retry_config.max_attempts: an "
            "integer >= 1, or -1 for unlimited"
        )
    return value


def is_last_attempt(attempt: int | None, max_attempts: int | None) -> bool:
    """True when Cloud Tasks deletes the task if this attempt fails too."""
    return attempt is not None and max_attempts is not None and attempt >= max_attempts


def is_last_but_one_attempt(attempt: int | None, max_attempts: int | None) -> bool:
    """True on the attempt before the last: a relay that hands a message over there (see
    :mod:`.last_attempt`) still has the last attempt to learn whether a create that timed out
    was applied."""
    return (
        attempt is not None
        and max_attempts is not None
        and attempt == max_attempts - 1
        and attempt >= 1
    )
