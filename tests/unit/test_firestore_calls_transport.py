"""A Firestore call cut off by its transport fails closed, as an unreachable Firestore does.

Seen on the emulator under load (5,000 messages of one group): a ``get`` ended with gRPC
``UNKNOWN`` (no details) or ``CANCELLED`` ("Stream removed (RST_STREAM ...)"), which
google-api-core raises as ``Unknown`` and ``Cancelled``. Neither says anything about the data,
yet both escaped the stores unchanged: the consumer logged them as *handler* errors, and after
a handler ran the FIFO advance and the ``done`` record - retried on StoreUnavailableError - were
not retried. Both must be StoreUnavailableError, as DeadlineExceeded already is.
"""

from __future__ import annotations

import asyncio

import pytest
from google.api_core import exceptions as gexc

from pubsub_toolkit.errors import StoreUnavailableError
from pubsub_toolkit.stores._firestore_calls import fail_closed, fail_closed_async

CUT_OFF = [
    gexc.Unknown(""),
    gexc.Cancelled("Stream removed (RST_STREAM (Received RST_STREAM with error code 8))"),
]


@pytest.mark.parametrize("error", CUT_OFF, ids=lambda e: type(e).__name__)
def test_a_call_cut_off_by_its_transport_fails_closed(error: Exception) -> None:
    def call() -> None:
        raise error

    with pytest.raises(StoreUnavailableError):
        fail_closed(call)


@pytest.mark.parametrize("error", CUT_OFF, ids=lambda e: type(e).__name__)
def test_an_async_call_cut_off_by_its_transport_fails_closed(error: Exception) -> None:
    async def call() -> None:
        raise error

    with pytest.raises(StoreUnavailableError):
        asyncio.run(fail_closed_async(call()))
