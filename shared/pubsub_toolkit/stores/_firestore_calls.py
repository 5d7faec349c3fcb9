"""How every Firestore call of the toolkit retries and fails: bounded, and closed.

The client's default retry keeps trying an unreachable server for 60 s (commits) to 300 s
(reads), whatever per-call ``timeout`` is given. A dedup or sequencing decision should fail
sooner and clearly, so calls pass :func:`bounded_retry` and :func:`fail_closed` turns
unavailability into :class:`~pubsub_toolkit.errors.StoreUnavailableError` (transient: the
message is delivered again later; never "assume new"). :func:`run_in_transaction` runs a
transaction without trusting the exception type of a failed commit (see there).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from google.api_core import exceptions as gexc
from google.api_core import retry as retries

from pubsub_toolkit.errors import StoreUnavailableError

if TYPE_CHECKING:
    from google.cloud import firestore

T = TypeVar("T")
logger = logging.getLogger(__name__)

TIMEOUT = 10.0
MAX_ATTEMPTS = 5  # the client's own default number of attempts of an aborted transaction
RETRYABLE = (gexc.ServiceUnavailable, gexc.ResourceExhausted)
# Not retried (a write may have applied), but failed closed. UNKNOWN and CANCELLED are what a
# call cut off by its transport ends with (a reset connection, "Stream removed (RST_STREAM)"):
# they say nothing about the data, exactly like DeadlineExceeded.
UNAVAILABLE = (
    *RETRYABLE,
    gexc.DeadlineExceeded,
    gexc.InternalServerError,
    gexc.Unknown,
    gexc.Cancelled,
    gexc.RetryError,
)


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


def read_all(query: Any) -> list[Any]:
    """Every document ``query`` matches, read with :func:`bounded_retry`; fail closed."""
    return fail_closed(lambda: list(query.stream(retry=bounded_retry(), timeout=TIMEOUT)))


class CommitUncertainError(StoreUnavailableError):
    """A transaction failed outside its body - at begin, commit or rollback - so the caller
    cannot tell from the exception whether its writes applied: it must read the data.

    Transient if left unhandled (deliver again later), like every StoreUnavailableError.
    """


def run_in_transaction(
    client: firestore.Client,
    body: Callable[[firestore.Transaction], T],
    *,
    max_attempts: int = MAX_ATTEMPTS,
) -> T:
    """Run ``body(transaction)`` in one Firestore transaction and commit it.

    The client's ``@transactional`` rolls back after *any* failure, and a rollback that fails
    raises its own error in place of the original: a commit's AlreadyExists or
    FailedPrecondition arrives as ServiceUnavailable (or InvalidArgument, once the server has
    closed the transaction), a lost commit reply as "cannot be rolled back" (ValueError), and
    the body's own exception as whatever the rollback raised. So the exception type says
    nothing reliable, and this separates the two cases that matter:

    * ``body`` raised: that exception is raised as it is (an unreachable Firestore behind the
      body's reads becomes StoreUnavailableError), whatever the rollback did after it;
    * anything else failed (begin, commit, contention past ``max_attempts``, rollback):
      :class:`CommitUncertainError`, chained to what the client raised. The writes may or may
      not have applied; the caller decides by reading what it wrote.
    """
    from google.cloud import firestore

    own_failure: list[BaseException] = []

    @firestore.transactional
    def run(transaction: firestore.Transaction) -> T:
        own_failure.clear()  # a retried attempt (after Aborted) starts clean
        try:
            return body(transaction)
        except BaseException as exc:
            own_failure.append(exc)
            raise

    try:
        result: T = run(client.transaction(max_attempts=max_attempts))
    except Exception as exc:
        if not own_failure:
            raise CommitUncertainError(f"Firestore transaction failed: {exc!r}") from exc
        failure = own_failure[0]
        if failure is not exc:
            logger.warning("rollback after a failed transaction body also failed: %r", exc)
    else:
        return result
    # Raised outside the except block, so the body's exception keeps its own chain.
    if isinstance(failure, UNAVAILABLE):
        raise StoreUnavailableError(f"Firestore is unavailable: {failure}") from failure
    raise failure


def bounded_async_retry(timeout: float = TIMEOUT) -> Any:
    """:func:`bounded_retry` for the AsyncClient's calls."""
    from google.api_core import retry_async

    return retry_async.AsyncRetry(
        predicate=retries.if_exception_type(*RETRYABLE), initial=0.1, maximum=1.0, timeout=timeout
    )


async def fail_closed_async(operation: Awaitable[T]) -> T:
    """Await ``operation``; an unreachable Firestore becomes StoreUnavailableError."""
    try:
        return await operation
    except UNAVAILABLE as exc:
        raise StoreUnavailableError(f"Firestore is unavailable: {exc}") from exc
