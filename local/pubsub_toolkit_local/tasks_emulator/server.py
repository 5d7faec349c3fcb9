"""``CloudTasksEmulator``: the gRPC server, the dispatcher and the OIDC signer, started together."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from types import TracebackType
from typing import Self

import grpc

from pubsub_toolkit.clock import SYSTEM_CLOCK, Clock
from pubsub_toolkit_local.oidc import LocalOidcIssuer

from .dispatcher import Dispatcher
from .servicer import build_handler
from .state import EmulatorState

logger = logging.getLogger(__name__)

DEFAULT_NAME_RESERVATION = timedelta(hours=1)
_RPC_WORKERS = 8


class CloudTasksEmulator:
    """A local Cloud Tasks (v2) service for the official client, dispatching to local targets.

    Args:
        host: interface to listen on (keep it on loopback).
        port: gRPC port; 0 picks a free one (read it back from :attr:`address`).
        app_engine_host: base URL (``http://127.0.0.1:8081``) that App Engine tasks are sent to;
            without it, CreateTask refuses App Engine tasks with FAILED_PRECONDITION.
        name_reservation: how long a task name stays taken after the task ran or was deleted.
        oidc_issuer: signs the OIDC tokens of HTTP tasks. The caller keeps ownership (starts and
            stops its certificate server). Without one the emulator makes a private issuer,
            reachable as :attr:`oidc_issuer`, and stops it in :meth:`stop`.
        clock: times name reservations (tests move it instead of waiting). Dispatch always runs
            on the real clock.
        allow_remote_targets: dispatch to non-loopback hosts too. Off by default, so a task with
            a production URL fails its attempts instead of reaching a real service.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        app_engine_host: str | None = None,
        name_reservation: timedelta = DEFAULT_NAME_RESERVATION,
        oidc_issuer: LocalOidcIssuer | None = None,
        clock: Clock = SYSTEM_CLOCK,
        allow_remote_targets: bool = False,
    ) -> None:
        if name_reservation < timedelta(0):
            raise ValueError("name_reservation must not be negative")
        if app_engine_host is not None and not app_engine_host.startswith(("http://", "https://")):
            raise ValueError(
                f"app_engine_host must be an http(s) base URL, not {app_engine_host!r}"
            )
        self._host = host
        self._port = port
        self._owns_issuer = oidc_issuer is None
        self._issuer = oidc_issuer or LocalOidcIssuer(host=host)
        self._state = EmulatorState(
            clock=clock, name_reservation=name_reservation, app_engine_host=app_engine_host
        )
        self._dispatcher = Dispatcher(
            self._state,
            sign=self._issuer.sign,
            app_engine_host=app_engine_host,
            allow_remote_targets=allow_remote_targets,
        )
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._address: str | None = None
        self._stopped = False

    @property
    def address(self) -> str:
        """``host:port`` the gRPC server is bound to."""
        if self._address is None:
            raise RuntimeError("the emulator is not started")
        return self._address

    @property
    def oidc_issuer(self) -> LocalOidcIssuer:
        """The issuer signing OIDC tokens (its ``certs_url`` needs ``start()`` on it)."""
        return self._issuer

    def start(self) -> str:
        """Bind, serve and start dispatching; return the address (``127.0.0.1:PORT``)."""
        with self._lock:
            if self._server is not None or self._stopped:
                raise RuntimeError("an emulator starts once; create a new one to restart")
            executor = ThreadPoolExecutor(_RPC_WORKERS, thread_name_prefix="tasks-emulator-rpc")
            # so_reuseport=0: a second server on a busy port must fail, not share it silently.
            server = grpc.server(executor, options=[("grpc.so_reuseport", 0)])
            server.add_generic_rpc_handlers((build_handler(self._state, self._dispatcher),))
            try:
                port = server.add_insecure_port(f"{self._host}:{self._port}")
            except RuntimeError as err:
                executor.shutdown(wait=False)
                raise OSError(f"cannot bind {self._host}:{self._port}: {err}") from err
            server.start()
            self._dispatcher.start()
            self._server, self._executor = server, executor
            self._address = f"{self._host}:{port}"
            logger.info("Cloud Tasks emulator serving on %s", self._address)
            return self._address

    def stop(self, grace: float = 1.0) -> None:
        """Stop serving and dispatching, and join every thread; idempotent.

        RPCs in progress get ``grace`` seconds; in-flight dispatches are aborted at once (their
        tasks are not marked attempted), so a slow target cannot hold this up.
        """
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            server, executor = self._server, self._executor
        if self._owns_issuer:
            self._issuer.stop()
        if server is None:  # never started
            return
        server.stop(grace).wait(grace + 1.0)
        # Server first: once it is down no RPC (RunTask) can start another dispatch.
        clean = self._dispatcher.stop(timeout=max(grace, 1.0))
        if executor is not None:
            executor.shutdown(wait=True)
        logger.info(
            "Cloud Tasks emulator on %s stopped%s",
            self._address,
            "" if clean else " (threads left)",
        )

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
