"""`dashboard`: serve the read-only status page on loopback."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pubsub_toolkit.errors import ToolkitError
from pubsub_toolkit_cli.cli.common import port_number, positive_int, require_emulator_if_local

HOST = "127.0.0.1"  # loopback only: the page has no authentication


def add_dashboard_command(commands: Any) -> None:
    """The `dashboard` command."""
    dashboard = commands.add_parser(
        "dashboard",
        help="serve a read-only status page on 127.0.0.1 (store, subscriptions' backlog, "
        "consumers, FIFO groups with the next command, dead letters, scheduled deliveries, "
        "dedup hit rate, delay lateness)",
    )
    dashboard.add_argument(
        "--port",
        type=port_number,
        default=8760,
        help="port on 127.0.0.1 (default 8760; 0: any free)",
    )
    dashboard.add_argument(
        "--consumer-id", help="whose FIFO groups (default: $PUBSUB_TOOLKIT_CONSUMER_ID or cli)"
    )
    dashboard.add_argument(
        "--dead-letter-subscription",
        default="dead-letter-sub",
        metavar="NAME",
        help="where dead letters are counted (default: dead-letter-sub)",
    )
    dashboard.add_argument(
        "--refresh",
        type=positive_int,
        default=2,
        metavar="SECONDS",
        help="page refresh (default 2)",
    )
    dashboard.set_defaults(func=cmd_dashboard)


def cmd_dashboard(args: argparse.Namespace) -> int:
    """`dashboard`: serve the page until Ctrl-C."""
    from werkzeug.serving import make_server

    from pubsub_toolkit.clock import SYSTEM_CLOCK
    from pubsub_toolkit_cli.dashboard.app import create_app
    from pubsub_toolkit_cli.dashboard.snapshot import StatusSnapshot, gather
    from pubsub_toolkit_cli.dashboard.sources import LiveStatusSource

    require_emulator_if_local()
    source = LiveStatusSource.from_env(
        consumer=args.consumer_id, dead_letter_subscription=args.dead_letter_subscription
    )

    def take() -> StatusSnapshot:
        return gather(source, now=SYSTEM_CLOCK.now())

    app = create_app(take, refresh_seconds=args.refresh)
    try:
        server = make_server(HOST, args.port, app, threaded=True)
    except OSError as exc:
        source.close()
        raise ToolkitError(f"cannot listen on {HOST}:{args.port}: {exc.strerror}") from None
    print(f"status page on http://{HOST}:{server.server_port}/ (Ctrl-C stops it)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    finally:
        server.server_close()
        source.close()
    return 0
