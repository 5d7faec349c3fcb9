"""Every error the toolkit raises, and what each means for the message in hand.

The retry meaning is explicit, because a Pub/Sub handler only has two answers:

* **ack** - the message is finished: it was handled, it is a duplicate, or it is permanently bad
  and has been written to the dead-letter topic with a reason (:class:`PermanentError`).
* **raise** - the message should come again: something transient failed
  (:class:`TransientError`); Pub/Sub redelivers it, or a push endpoint answers 5xx.

Anything else is a bug or a misconfiguration and should surface loudly.
"""

from __future__ import annotations


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
    """The dedup/counter store could not be reached. Stores fail closed: never "assume new"."""


class StaleClaimError(TransientError):
    """A claim's fencing token is no longer current: another worker took the key over.

    Raised when a holder whose lease expired tries to complete; its result is refused so that
    the newer holder's outcome is the one recorded. Transient: the redelivery finds the newer
    holder's record (a duplicate) and is acked.
    """
