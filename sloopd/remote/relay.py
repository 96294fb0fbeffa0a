"""The node's side of a stage's output and its worker socket, held for the daemon.

The child's lines and the bytes an agent writes to ``/sloop/worker.sock`` wait in
one ``Outbox`` until the driver takes them (``take``), in the order they came.
The outbox is bounded: past ``NODE_OUTBOX_BYTES`` the child's pipes and the
agent's connections are no longer read (``on_full``), so a slow daemon makes the
child block on a full pipe, as it does on the daemon's host, and the node's
memory stays bounded.  The socket is a byte relay: each connection the agent
opens is a numbered stream the daemon's side opens to the run's real worker
socket, where the token is checked exactly as for a local child.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path

from sloopd.remote.messages import NODE_OUTBOX_BYTES, Conn, Item, Latency, Lines

CHUNK_BYTES = 64 * 1024
# Connections one child may hold open through the relay (the daemon's worker socket
# bounds what it accepts of them again, as for a local child).
MAX_CONNECTIONS = 32


class Outbox:
    """Lines and socket events for the daemon, in order, bounded in bytes."""

    def __init__(self, on_full: Callable[[bool], None]) -> None:
        self._items: list[Item] = []
        self._bytes = 0
        self._on_full = on_full
        self._full = False
        self.changed = asyncio.Event()

    def lines(self, stream: str, texts: list[str], split: bool) -> None:
        self._add(Lines(stream, tuple(texts), split), sum(map(len, texts)) + 16 * len(texts))

    def conn(self, number: int, data: bytes | None) -> None:
        self._add(Conn(number, data), len(data or b"") + 16)

    def latency(self, seconds: float) -> None:
        self._add(Latency(seconds), 16)

    def _add(self, item: Item, size: int) -> None:
        self._items.append(item)
        self._bytes += size
        self.changed.set()
        if not self._full and self._bytes >= NODE_OUTBOX_BYTES:
            self._full = True
            self._on_full(True)

    def take(self) -> tuple[Item, ...]:
        items, self._items, self._bytes = tuple(self._items), [], 0
        self.changed.clear()
        if self._full:
            self._full = False
            self._on_full(False)
        return items

    @property
    def empty(self) -> bool:
        return not self._items

    @property
    def full(self) -> bool:
        """Whether the child's pipes are not read now, for the daemon's sake."""
        return self._full


class SocketRelay:
    """``/sloop/worker.sock`` on the node: each connection a numbered byte stream."""

    def __init__(self, path: Path, outbox: Outbox) -> None:
        self.path = path
        self.outbox = outbox
        self._server: asyncio.AbstractServer | None = None
        self._writers: dict[int, asyncio.StreamWriter] = {}
        # When each connection's request waiting for an answer arrived (the node's clock:
        # the round trip is measured where both ends are seen).
        self._asked: dict[int, float] = {}
        self._next = 0
        self._readable = asyncio.Event()
        self._readable.set()

    async def open(self) -> None:
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path))
        self.path.chmod(0o600)

    def pause(self, paused: bool) -> None:
        if paused:
            self._readable.clear()
        else:
            self._readable.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._writers) >= MAX_CONNECTIONS:
            writer.close()
            return
        number = self._next
        self._next += 1
        self._writers[number] = writer
        try:
            while True:
                await self._readable.wait()
                data = await reader.read(CHUNK_BYTES)
                if not data:
                    # The agent is done writing (a close or a half-close): the daemon's
                    # side half-closes too, and its answers still come back on this one.
                    self.outbox.conn(number, None)
                    return
                self._asked.setdefault(number, time.monotonic())
                self.outbox.conn(number, data)
        except (ConnectionError, OSError):
            if self._writers.pop(number, None) is not None:
                self.outbox.conn(number, None)
                writer.close()

    async def deliver(self, number: int, data: bytes | None) -> None:
        """The daemon's answer on connection ``number``; None: the daemon's side closed."""
        writer = self._writers.get(number)
        if writer is None:
            return
        if data is None:
            self._writers.pop(number, None)
            writer.close()
            return
        asked = self._asked.pop(number, None)
        if asked is not None:
            self.outbox.latency(time.monotonic() - asked)
        try:
            writer.write(data)
            await writer.drain()
        except (ConnectionError, OSError):
            self._writers.pop(number, None)
            writer.close()

    async def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        self.path.unlink(missing_ok=True)
