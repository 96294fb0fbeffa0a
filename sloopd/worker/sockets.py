"""A run's worker socket: made when the run starts, removed when it settles, bounded."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import cast

from sloopd.wire.api import ErrorCode, ProtocolError
from sloopd.wire.connection import LISTEN_BACKLOG, Connection, bound_private
from sloopd.wire.dispatch import error_line
from sloopd.worker.dispatcher import WorkerDispatcher

# An agent that opens connections without end must not take the daemon's file
# descriptors from the operator and the other runs: past this many on one
# socket (or the shared budget), a connection is answered with one error and closed.
WORKER_CONNECTIONS_MAX = 32


def _refusal(limit: int) -> bytes:
    return error_line(
        None,
        ProtocolError(
            ErrorCode.DAEMON_UNAVAILABLE,
            f"too many connections on this worker socket (at most {limit}); close some",
            {"limit": limit},
        ),
    )


class _Refused(asyncio.Protocol):
    def __init__(self, limit: int) -> None:
        self._limit = limit

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        cast(asyncio.Transport, transport).write(_refusal(self._limit))
        transport.close()


class WorkerSockets:
    """Creates a run's socket when it starts and removes it when it settles."""

    def __init__(
        self,
        directory: Path,
        dispatcher_for: Callable[[str], WorkerDispatcher],
        *,
        per_socket: int = WORKER_CONNECTIONS_MAX,
        budget: int = 512,
    ) -> None:
        self.directory = directory
        self._dispatcher_for = dispatcher_for
        self._servers: dict[str, tuple[asyncio.AbstractServer, set[Connection]]] = {}
        self._per_socket = per_socket
        # Worker connections of every run together: what is left for them once the
        # operator socket, the store and the children's pipes have their share.
        self.budget = budget

    def _open_connections(self) -> int:
        return sum(len(connections) for _, connections in self._servers.values())

    def path(self, run: str) -> Path:
        return self.directory / f"{run}.sock"

    async def open(self, run: str) -> Path:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        path = self.path(run)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        dispatcher = self._dispatcher_for(run)
        connections: set[Connection] = set()

        def factory() -> asyncio.Protocol:
            if len(connections) >= self._per_socket or self._open_connections() >= self.budget:
                return _Refused(self._per_socket)
            conn = Connection(dispatcher.handle_line, connections.discard)
            connections.add(conn)
            return conn

        server = await asyncio.get_running_loop().create_unix_server(
            factory, sock=bound_private(path), backlog=LISTEN_BACKLOG
        )
        self._servers[run] = (server, connections)
        return path

    def clear_stale(self) -> None:
        """At start: sockets of runs a crashed daemon left; nothing listens on them."""
        if self.directory.is_dir():
            for path in self.directory.glob("*.sock"):
                path.unlink(missing_ok=True)

    async def close(self, run: str) -> None:
        entry = self._servers.pop(run, None)
        if entry is not None:
            server, connections = entry
            server.close()
            for conn in list(connections):
                conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)
        with contextlib.suppress(FileNotFoundError):
            self.path(run).unlink()
