"""Every error the toolkit raises, and what each means for the message in hand.

The retry meaning is explicit, because a Pub/Sub handler only has two answers:

* **ack** - the message is finished: it was handled, it is a duplicate, or it is permanently bad
  and has been written to the dead-letter topic with a reason (:class:`PermanentError`).
* **raise** - the message should come again: something transient failed
  (:class:`TransientError`); Pub/Sub redelivers it, or a push endpoint answers 5xx.
  :class:`RetryLater` says *when*: the consumer re-schedules the message for then and acks.

Anything else is a bug or a misconfiguration and should surface loudly.
"""

from __future__ import annotations

from datetime import timedelta


class ToolkitError(Exception):
    """Base class of every error raised by pubsub_toolkit."""


class ConfigurationError(ToolkitError):
    """A setting is missing or invalid; the message names the environment variable."""


class MissingDependencyError(ConfigurationError, ImportError):
    """An optional part was used but its extra is not installed; the message names the extra
    (``pip install 'pubsub-toolkit[redis]'``). Also an ImportError, as code that probes for an
    optional feature expects."""


class PermanentError(ToolkitError):
    """The message can never succeed as it is: dead-letter it with ``reason`` and ack.

    ``reason`` is a short machine-readable code (it becomes the ``error_reason`` attribute);
    ``detail`` is one human-readable sentence (``error_detail``).
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class ContractViolation(PermanentError):
    """The message breaks the attribute contract (see :mod:`pubsub_toolkit.attributes`)."""


class TransientError(ToolkitError):
    """A temporary failure: do not ack, let Pub/Sub (or Cloud Tasks) deliver again."""


class ClaimInProgressError(TransientError):
    """Another worker holds a live claim on this dedup key; retry after its lease."""


class StoreUnavailableError(TransientError):
    """The store could not be reached, or answered that it cannot take the command now (a
    Redis READONLY or OOM reply, ...). Stores fail closed: never "assume new"."""


class StaleClaimError(TransientError):
    """A claim's fencing token is no longer current: another worker took the key over.

    Raised when a holder whose lease expired tries to complete; its result is refused so that
    the newer holder's outcome is the one recorded. Transient: the redelivery finds the newer
    holder's record (a duplicate) and is acked.
    """


class RedeliveryRequested(TransientError):
    """The handler asked for a redelivery itself (``message.nack()`` under ``@idempotent``).

    Delivered again like any transient error, but - unlike a failure the toolkit knows to be
    temporary - it **counts** as an attempt toward poison, as Pub/Sub counts a nack as a
    delivery attempt: a callback that ``nack()``s every failure would otherwise keep a FIFO
    group retrying a poison message for ever, with no ALERT.
    """


# Far beyond any real retry; keeps ``now + delay`` well inside datetime's range.
MAX_RETRY_DELAY = timedelta(days=3650)


class RetryLater(TransientError):
    """Raised by a handler: "deliver this message again in ``delay``" (any length, also far
    beyond Pub/Sub's 600-s maximum backoff).

    Unlike other transient errors it is the handler's own decision, so it **counts** as an
    attempt: after the consumer's ``max_attempts`` the message is poison, as for any failure.

    * In a FIFO group the gate parks the head and its next attempt is exactly ``delay`` from
      now (instead of the exponential backoff); later numbers wait parked behind it.
    * Any other message is re-scheduled through the delay path (Cloud Tasks and the relay) with
      its attempt count, acked now, and delivered again at the due time (its dedup claim is
      released). Where no delay path is configured it is nacked with a WARNING, as a plain
      :class:`TransientError` would be: the delay cannot be honoured, Pub/Sub's backoff applies.

    A TransientError subclass, so any path that does not know it still delivers again.
    ``reason`` is an optional short text for the logs and the dead-letter detail.
    """

    def __init__(self, delay: timedelta, reason: str = "") -> None:
        if not isinstance(delay, timedelta):
            raise TypeError(f"RetryLater needs a timedelta, not {type(delay).__name__}")
        if delay < timedelta(0) or delay > MAX_RETRY_DELAY:
            raise ValueError(f"RetryLater delay {delay} is not between 0 and {MAX_RETRY_DELAY}")
        super().__init__(f"retry in {delay}" + (f": {reason}" if reason else ""))
        self.delay = delay
        self.reason = reason
