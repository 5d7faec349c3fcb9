"""Component instances ("processes") and what a crash means.

Each instance of a component - the producer app, an ingress, a relay, a consumer - is a
:class:`Process` with its own skewed clock. A crash at some step marks it dead: from then on
its store calls, publishes and acks do nothing but raise :class:`ProcessCrashed`, which unwinds
the library's stack (a ``BaseException``, so ``except Exception`` blocks let it through, as a
real crash runs no handler either). Its deliveries are never acked, so the broker redelivers
them after the ack deadline. A new instance - fresh library objects over the same database -
starts after a restart delay (see :mod:`.components`).
"""

from __future__ import annotations

from collections.abc import Callable

from tests.simulation.clock import SimClock


class ProcessCrashed(BaseException):
    """The current process crashed: unwind to the driver, doing nothing on the way."""


class HandlerExit(BaseException):
    """handler_exit: the user's handler raised a BaseException that is not an Exception (a
    library's ``sys.exit()``, a ``KeyboardInterrupt`` in a worker thread). The process lives
    on: the convoy's pool thread ends its task, its future holds the exception."""


class Process:
    """One running instance of a component."""

    def __init__(
        self,
        kind: str,
        slot: int,
        generation: int,
        clock: SimClock,
        on_crash: Callable[[Process, str], None],
    ) -> None:
        self.kind = kind
        self.slot = slot
        self.name = f"{kind}{slot}#{generation}"
        self.clock = clock
        self.alive = True
        self._on_crash = on_crash

    def check(self) -> None:
        """Raise ProcessCrashed if this process is dead (a dead process does nothing)."""
        if not self.alive:
            raise ProcessCrashed(self.name)

    def crash(self, where: str) -> None:
        """Crash now, at step ``where``; never returns."""
        if self.alive:
            self.alive = False
            self._on_crash(self, where)
        raise ProcessCrashed(f"{self.name} crashed at {where}")
