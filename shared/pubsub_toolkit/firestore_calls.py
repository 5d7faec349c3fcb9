"""How every Firestore call of the toolkit retries and fails: bounded, and closed.

The client's default retry keeps trying an unreachable server for 60 s (commits) to 300 s
(reads), whatever per-call ``timeout`` is given. A dedup or sequencing decision should fail
sooner and clearly, so calls pass :func:`bounded_retry` and :func:`fail_closed` turns
unavailability into :class:`~pubsub_toolkit.errors.StoreUnavailableError` (transient: the
message is delivered again later; never "assume new").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from google.api_core import exceptions as gexc
from google.api_core import retry as retries

from pubsub_toolkit.errors import StoreUnavailableError

T = TypeVar("T")

TIMEOUT = 10.0
RETRYABLE = (gexc.ServiceUnavailable, gexc.ResourceExhausted)
UNAVAILABLE = (*RETRYABLE, gexc.DeadlineExceeded, gexc.InternalServerError, gexc.RetryError)


def bounded_retry(timeout: float = TIMEOUT) -> retries.Retry:
    """Retry transient errors with backoff for at most ``timeout`` seconds in all."""
    return retries.Retry(
        predicate=retries.if_exception_type(*RETRYABLE), initial=0.1, maximum=1.0, timeout=timeout
    )


def fail_closed(operation: Callable[[], T]) -> T:
    """Run ``operation``; an unreachable Firestore becomes StoreUnavailableError."""
    try:
        return operation()
    except UNAVAILABLE as exc:
        raise StoreUnavailableError(f"Firestore is unavailable: {exc}") from exc


def run_transaction(operation: Callable[[], T]) -> T:
    """Run a ``@firestore.transactional`` call, failing closed.

    The client reports "failed to commit in N attempts" as a ValueError caused by Aborted:
    that is contention, so it becomes StoreUnavailableError (deliver again later). Any other
    ValueError is the handler's own and is raised as it is.
    """
    try:
        return fail_closed(operation)
    except ValueError as exc:
        if not isinstance(exc.__cause__, gexc.Aborted):
            raise
        raise StoreUnavailableError(f"transaction kept aborting: {exc}") from exc
