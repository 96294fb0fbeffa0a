"""A started process's pipes read, and its exit watched, on the running event loop: the
one reader and the one exit watch of the tools (``sloopd.util.subproc``) and the
agents' process groups (``sloopd.proc.children``).

Both are driven by the loop's readiness callbacks, never by a thread or a blocking
call, so the loop's thread never waits on a process: a pipe is made non-blocking
before the loop watches it, and a read that finds nothing after all (another reader
of the pipe, a spurious wake) returns at once.

The two ends are independent.  A process may exit while its pipes stay open for
good, held by a grandchild it left running (a hook, an agent's background job), and
its pipes may reach their end before it exits.  Each caller decides what the pair
means: a tool's tree is killed whole, so its pipes are read to their end; an agent's
pipes are read on for a bounded time after its exit.

Imports nothing of ``sloopd``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable
from typing import IO


class PipeReader:
    """One of a process's output pipes, read on the loop chunk by chunk to its end.

    Each readiness callback reads one chunk of at most ``chunk_bytes``, so one
    flooding process holds the loop for one chunk a turn, however much it writes.
    At the end (a read of nothing, or a read error, which ends a pipe as surely)
    the pipe is closed at once, so a long-lived process's finished stream holds
    no descriptor, and ``on_end`` is called once.  ``close`` stops reading early
    without calling ``on_end``.
    """

    def __init__(
        self,
        pipe: IO[bytes],
        chunk_bytes: int,
        on_chunk: Callable[[bytes], None],
        on_end: Callable[[], None],
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._pipe = pipe
        self._fd = pipe.fileno()
        self._chunk_bytes = chunk_bytes
        self._on_chunk = on_chunk
        self._on_end = on_end
        self._watched = False
        self.ended = False  # the end was read (``on_end`` was called)
        # Non-blocking, or a wake with nothing to read left the loop stuck in read().
        os.set_blocking(self._fd, False)
        self.resume()

    def pause(self) -> None:
        """Stop reading: the writer then blocks on a full pipe (back-pressure).  A
        paused pipe never sees its end; whoever pauses resumes or closes it."""
        if self._watched:
            self._loop.remove_reader(self._fd)
            self._watched = False

    def resume(self) -> None:
        """Read on (nothing happens once the pipe ended or was closed)."""
        if not self._watched and not self._pipe.closed:
            self._loop.add_reader(self._fd, self._readable)
            self._watched = True

    def close(self) -> None:
        """Stop reading and give the pipe back, at its end or not (a grandchild may
        hold its other end for ever).  ``on_end`` is not called.  Idempotent."""
        self.pause()  # off the loop before the descriptor is closed and its number reused
        self._pipe.close()

    def _readable(self) -> None:
        try:
            chunk = os.read(self._fd, self._chunk_bytes)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            self._on_chunk(chunk)
            return
        self.close()
        self.ended = True
        self._on_end()


class ExitWatch:
    """A started process's exit, seen on the loop when it happens, and collected there.

    A pidfd (``os.pidfd_open``) becomes readable when the process exits; without
    pidfds (an old kernel, a seccomp filter) the exit is polled every
    ``poll_seconds``.  Either way the process is collected by its own ``Popen``
    (``poll``, a ``waitpid`` of its pid), never by a wait for any child, so no one
    else's exit status is taken; from then on its pid may be reused.  ``exited``
    holds the exit status as ``Popen`` reports it (``-N`` for a death by signal N);
    ``on_exit`` is called with it at the same moment, before any waiter wakes.
    """

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        poll_seconds: float,
        on_exit: Callable[[int], None] | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._popen = popen
        self._poll_seconds = poll_seconds
        self._on_exit = on_exit
        self.exited: asyncio.Future[int] = self._loop.create_future()
        self._pidfd: int | None = None
        try:
            self._pidfd = os.pidfd_open(popen.pid)
            self._loop.add_reader(self._pidfd, self._poll)
        except OSError:  # no pidfds: poll instead
            if self._pidfd is not None:  # a pidfd the loop cannot watch is no use
                os.close(self._pidfd)
                self._pidfd = None
            self._loop.call_soon(self._poll)

    def close(self) -> None:
        """Give the pidfd back once the process was collected (by anyone).  A process
        not collected yet keeps its watch, so the loop still collects it: a caller
        cancelled while the process dies must not leave a zombie behind."""
        if self._popen.returncode is not None:
            self._release()

    def _poll(self) -> None:
        code = self._popen.poll()  # collects it; from here on the pid may be reused
        if code is None:
            if self._pidfd is None:
                self._loop.call_later(self._poll_seconds, self._poll)
            return
        self._release()
        if not self.exited.done():
            self.exited.set_result(code)
            if self._on_exit is not None:
                self._on_exit(code)

    def _release(self) -> None:
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None
