"""One client connection: NDJSON lines in, responses out in request order.

A line is answered synchronously when its verb needs no waiting, which keeps
the hot path free of task hand-offs; a line whose verb waits (``wait``, a
``logs`` or ``events`` request held by ``wait_ms``) is queued, and every later
reply waits behind it so order is kept.  A connection holds at most
``MAX_HELD_PER_CONNECTION`` long-poll requests at once: past that, a new one is
answered as things are, at once (in its turn).  A client that half-closes its
side ends its held requests' waits: each is answered as things are, and the
connection closes once every reply is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Final, cast

from sloopd.wire import api
from sloopd.wire.dispatch import OVERLONG_LINE, HeldReply, Reply, error_line

log = logging.getLogger(__name__)

LineHandler = Callable[[bytes], Reply]

# The listen backlog of every socket the daemon serves.  asyncio's default of
# 100 turns a burst of clients away with EAGAIN while the loop is busy (400 at
# once: 290 refused); a queued connect costs the kernel a little memory, so be
# generous.  Linux caps it silently at net.core.somaxconn (4096 by default
# since 5.4; older kernels: 128), so raise that sysctl too if bursts are larger.
LISTEN_BACKLOG: Final = 4096

# Held long-poll requests per connection; replies keep request order, so more
# would only wait behind each other.
MAX_HELD_PER_CONNECTION: Final = 16


class Connection(asyncio.Protocol):
    def __init__(
        self,
        handle_line: LineHandler,
        on_close: Callable[[Connection], None],
        admit: Callable[[socket.socket], bool] | None = None,
        refuse_line: LineHandler | None = None,
    ) -> None:
        self._handle_line = handle_line
        self._admit = admit
        self._refuse_line = refuse_line
        self._on_close = on_close
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._discarding = False  # inside an over-long line, until its newline
        self._queue: deque[bytes | asyncio.Future[bytes]] = deque()
        self._drainer: asyncio.Task[None] | None = None
        self._peer_done = False  # the client half-closed; close once replies are out
        self._holds: set[HeldReply] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        if self._admit is not None and self._refuse_line is not None:
            sock = transport.get_extra_info("socket")
            if sock is not None and not self._admit(sock):
                # Answer (structured) instead of hanging up, so the refusal is legible.
                self._handle_line = self._refuse_line

    def data_received(self, data: bytes) -> None:
        if not self._buffer and not self._discarding and data.find(b"\n") == len(data) - 1:
            # One whole line, the common case: straight from the read, no buffer.
            line = data[:-1]
            if len(line) > api.MAX_REQUEST_BYTES:
                self._submit(error_line(None, OVERLONG_LINE))
            elif line and not line.isspace():
                reply = self._handle_line(line)
                transport = self._transport
                if type(reply) is bytes and not self._queue and transport is not None:
                    # _submit's common case written out (every call counts here): an
                    # answer with nothing queued before it goes out at once.
                    if not transport.is_closing():
                        transport.write(reply)
                else:
                    self._submit(reply)
        else:
            self._buffered(data)

    def _buffered(self, data: bytes) -> None:
        """Part of a line, several lines, or what follows an over-long line."""
        buffer = self._buffer
        buffer += data
        start = 0
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            line = bytes(buffer[start:end])
            start = end + 1
            if self._discarding:
                self._discarding = False
                continue
            if len(line) > api.MAX_REQUEST_BYTES:
                # Whole in the buffer (its newline came in the same read): same answer.
                self._submit(error_line(None, OVERLONG_LINE))
                continue
            if line.strip():
                self._submit(self._handle_line(line))
        del buffer[:start]
        if len(buffer) > api.MAX_REQUEST_BYTES:
            # Answer once, then drop bytes until the line ends.
            if not self._discarding:
                self._submit(error_line(None, OVERLONG_LINE))
                self._discarding = True
            buffer.clear()

    def eof_received(self) -> bool | None:
        # A last request without a trailing newline still counts.
        if self._buffer.strip() and not self._discarding:
            self._submit(self._handle_line(bytes(self._buffer)))
        self._buffer.clear()
        # Nobody is left to wait for news: held requests answer as things are.
        for held in list(self._holds):
            held.waiting.cut()
        if self._queue:
            self._peer_done = True
            return True  # keep the transport open until the queued replies are written
        return None

    def _submit(self, reply: Reply) -> None:
        if isinstance(reply, bytes) and not self._queue:
            self._write(reply)
            return
        if not isinstance(reply, bytes):
            held = reply if isinstance(reply, HeldReply) else None
            reply = asyncio.ensure_future(reply)
            if held is not None:
                self._track(held, reply)
        self._queue.append(reply)
        if self._drainer is None:
            self._drainer = asyncio.get_running_loop().create_task(self._drain())

    def _track(self, held: HeldReply, reply: asyncio.Future[bytes]) -> None:
        if len(self._holds) >= MAX_HELD_PER_CONNECTION:
            held.waiting.cut()  # answered as things are, in its turn
        else:
            self._holds.add(held)

        def done(_reply: asyncio.Future[bytes]) -> None:
            # Also when the reply was cancelled before it ran (the client went away).
            self._holds.discard(held)
            held.waiting.release()

        reply.add_done_callback(done)

    async def _drain(self) -> None:
        try:
            while self._queue:
                head = self._queue[0]
                data = head if isinstance(head, bytes) else await head
                if self._queue and self._queue[0] is head:  # else close() wrote it
                    self._queue.popleft()
                    self._write(data)
        finally:
            self._drainer = None
        if self._peer_done and self._transport is not None:
            self._transport.close()

    def _write(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def pause_writing(self) -> None:
        # A client that stops reading stops being read: its replies cannot pile up.
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_writing(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        for item in self._queue:
            if isinstance(item, asyncio.Future):
                item.cancel()
        self._queue.clear()
        self._transport = None
        self._on_close(self)

    def close(self) -> None:
        """Write the replies that are ready (in order), then close.

        A stopping daemon ends held waits first, so their answers go out here.
        """
        while self._queue:
            head = self._queue[0]
            if isinstance(head, asyncio.Future):
                if not head.done() or head.cancelled() or head.exception() is not None:
                    break
                head = head.result()
            self._queue.popleft()
            self._write(head)
        if self._transport is not None:
            self._transport.close()


def bound_private(path: Path) -> socket.socket:
    """A Unix socket bound at ``path``, 0600 from birth, for ``create_unix_server(sock=)``.

    Linux makes a socket's file with the mode of the socket's own inode, less the umask:
    that inode is made 0600 before ``bind``, so the process umask is never touched.  It
    is one per process: narrowed around ``bind`` (as before 0.9.0), every thread's
    files and folders made meanwhile lost their x bits, and an ``objects/<xx>/`` folder
    the bring-back made just then could not be entered by any sandbox after it (every
    later fetch of those objects failed: tests/unit/test_socket_umask.py).
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # Where a kernel refused it, the file is born with the umask's mode in the
        # socket directory, 0700, and connecting needs w, which the umask rarely gives.
        with contextlib.suppress(OSError):
            os.fchmod(sock.fileno(), 0o600)
        sock.bind(str(path))
        os.chmod(path, 0o600)  # exactly 0600 whatever the umask took away
    except BaseException:
        sock.close()
        raise
    return sock
