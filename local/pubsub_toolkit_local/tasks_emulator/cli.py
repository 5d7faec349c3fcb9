"""Run the emulator as its own process.

``python -m pubsub_toolkit_local.tasks_emulator --port 8123 [--app-engine-host URL]
[--oidc-port 8124]`` prints one JSON readiness line on stdout once it serves, logs to stderr, and
stops cleanly (exit status 0) on SIGTERM or SIGINT. The local stack starts it in its own process
group and stops it by signalling that group.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from datetime import timedelta
from types import FrameType

from pubsub_toolkit_local.oidc import LocalOidcIssuer

from .server import DEFAULT_NAME_RESERVATION, CloudTasksEmulator

logger = logging.getLogger(__name__)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m pubsub_toolkit_local.tasks_emulator",
        description="Local Cloud Tasks (v2) emulator for the official client.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8123, help="gRPC port; 0 picks a free one")
    parser.add_argument("--app-engine-host", help="base URL App Engine tasks are sent to")
    parser.add_argument(
        "--oidc-port",
        type=int,
        help="serve the OIDC signing certificates on this port (0: any free port)",
    )
    parser.add_argument(
        "--name-reservation-seconds",
        type=float,
        default=DEFAULT_NAME_RESERVATION.total_seconds(),
        help="how long a task name stays reserved after the task ran or was deleted",
    )
    parser.add_argument(
        "--allow-remote-targets",
        action="store_true",
        help="also dispatch to non-loopback hosts (off: such attempts fail)",
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING...")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run until SIGTERM/SIGINT; return the process exit status."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    stop_requested = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        logger.info("%s received; stopping", signal.Signals(signum).name)
        stop_requested.set()

    # Handlers first: a signal that arrives during start-up must still stop us cleanly.
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)

    issuer = None
    if args.oidc_port is not None:
        issuer = LocalOidcIssuer(host=args.host, port=args.oidc_port)
        issuer.start()
    emulator = CloudTasksEmulator(
        host=args.host,
        port=args.port,
        app_engine_host=args.app_engine_host,
        name_reservation=timedelta(seconds=args.name_reservation_seconds),
        oidc_issuer=issuer,
        allow_remote_targets=args.allow_remote_targets,
    )
    try:
        try:
            address = emulator.start()
        except OSError as err:
            logger.error("%s", err)  # typically the port is taken: say so without a traceback
            return 1
        ready = {
            "ready": "cloud-tasks-emulator",
            "address": address,
            "app_engine_host": args.app_engine_host,
            "oidc_certs_url": issuer.certs_url if issuer else None,
            "oidc_jwks_url": issuer.jwks_url if issuer else None,
        }
        print(json.dumps(ready), flush=True)
        stop_requested.wait()
    finally:
        emulator.stop()
        if issuer is not None:
            issuer.stop()
    return 0
