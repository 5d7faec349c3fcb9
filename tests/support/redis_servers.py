"""Private redis-servers a test may break: a standalone one, a one-node Redis Cluster, the
faults a real server can be put into (READONLY, OOM, empty after a restart), and a proxy that
loses one reply after the server applied the command (a timeout after commit).

The session's shared redis-server is never disturbed: each of these is started by the test
module that uses it and stopped by its process group.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import redis

from pubsub_toolkit_local.emulators import redis_server
from pubsub_toolkit_local.processes import LOOPBACK, free_port, start_service
from tests.support.tcp_proxy import TcpProxy


@dataclass(frozen=True)
class PrivateRedis:
    """A redis-server of one test module: ``url`` for the stores, ``admin`` to break it."""

    url: str
    port: int
    cluster: bool

    def admin(self) -> redis.Redis:
        return redis.Redis(host=LOOPBACK, port=self.port, socket_timeout=5)

    def make_replica(self) -> None:
        """READONLY for every write: the server follows a primary that does not exist (what
        a client still connected to the old primary sees after a failover)."""
        with self.admin() as admin:
            admin.replicaof(LOOPBACK, free_port())

    def make_full(self) -> None:
        """OOM for every write: maxmemory reached with ``noeviction``."""
        with self.admin() as admin:
            admin.config_set("maxmemory-policy", "noeviction")
            admin.config_set("maxmemory", 1)

    def heal(self) -> None:
        """A primary with room again (the data it held is still there)."""
        with self.admin() as admin:
            if not self.cluster:
                admin.replicaof("NO", "ONE")
            admin.config_set("maxmemory", 0)

    def flush(self) -> None:
        """Empty, as after a restart without persistence (scripts gone too)."""
        with self.admin() as admin:
            admin.flushall()
            admin.script_flush()


@contextlib.contextmanager
def private_redis(work_dir: Path, *, cluster: bool = False) -> Iterator[PrivateRedis]:
    """Start a redis-server (with ``cluster``: a one-node Redis Cluster owning every slot -
    Redis checks that a script's keys share a *slot*, not a node, so one node is faithful)."""
    port = free_port()
    spec = redis_server(port)
    if cluster:
        spec = replace(
            spec,
            name="redis-cluster",
            argv=(
                *spec.argv,
                *("--cluster-enabled", "yes", "--cluster-port", str(free_port())),
                *("--cluster-config-file", str(work_dir / "nodes.conf")),
            ),
            cwd=str(work_dir),
        )
    service = start_service(spec, work_dir)
    try:
        server = PrivateRedis(f"redis://{LOOPBACK}:{port}/0", port, cluster)
        if cluster:
            with server.admin() as admin:
                admin.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
                deadline = time.monotonic() + 20
                while admin.cluster("info").get("cluster_state") != "ok":
                    assert time.monotonic() < deadline, "the one-node cluster never got ready"
                    time.sleep(0.05)
        yield server
    finally:
        service.stop()


class ReplyDroppingProxy(TcpProxy):
    """A proxy to a redis-server that, once :meth:`drop_next_reply` was called, forwards the
    next command but throws its reply away and cuts the connection: the server applied the
    write, the client saw a dropped connection (what a timeout after commit looks like)."""

    def __init__(self, upstream_port: int) -> None:
        super().__init__(upstream_port)
        self._armed = threading.Event()
        self.dropped = 0

    def drop_next_reply(self) -> None:
        self._armed.set()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        replies = src.getpeername()[1] == self.upstream_port
        try:
            while chunk := src.recv(65536):
                if replies and self._armed.is_set():
                    self._armed.clear()
                    self.dropped += 1
                    break  # the reply is lost; the server has already applied the command
                dst.sendall(chunk)
        except OSError:
            pass
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
