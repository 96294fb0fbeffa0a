"""Short-lived tools (git) run with a deadline, cancellable, never outliving the daemon,
and what they print kept in bounded space.

A git call that hangs (a hook waiting on a terminal, a network remote, a lock) must
not hold a run, an ``abort`` or a shutdown for ever: every call has a timeout, and a
timeout or a cancellation kills the tool *and* what it started (hooks), so nothing
keeps writing to the repository after the daemon has stopped waiting for it.

Whatever a tool prints, the daemon keeps a bounded part of it, whoever the caller:
each stream's first and last part, the middle counted (``sloopd.util.headtail``),
as it is read, never read whole and cut afterwards.  Standard error keeps
``STDERR_HEAD`` + ``STDERR_TAIL`` bytes; standard output, which callers parse,
keeps ``STDOUT_HEAD`` + ``STDOUT_TAIL``, or, with a caller's ``stdout_limit``, its
first part only, the tool killed there.  An agent's repository decides what its
git prints (one line per entry of a 96 MiB ``objects/info/alternates``: issue 34).

The tool stays in the daemon's process group: the daemon is a child subreaper whose
orphan reaper leaves that group alone, so the event loop, not the reaper, collects its
exit status.  It carries the daemon's marker, so a killed daemon's successor finds it
(``sloopd.util.tooltree``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import selectors
import subprocess
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from sloopd.util import procfs, tooltree
from sloopd.util.headtail import STDERR_HEAD, STDERR_TAIL, HeadTail
from sloopd.util.pipes import ExitWatch, PipeReader

# Standard output is what callers parse (a list of paths, a tree, a sha): its head is
# large enough for any list the daemon reads whole, bounded all the same.
STDOUT_HEAD: Final = 16 * 1024 * 1024
STDOUT_TAIL: Final = 64 * 1024
T = TypeVar("T")


class TimedOut(Exception):
    """The tool did not finish within its deadline; it and its children were killed."""


class Interrupted(Exception):
    """The caller's ``interrupt`` was set before the tool finished; it and its children
    were killed (or, set before the start, it was never started)."""


@dataclass(frozen=True, slots=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str
    # Set when the caller's ``stdout_limit`` was reached: the tool was killed there.
    truncated: bool = False


async def run(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    cwd: Path | None = None,
    stdout_limit: int | None = None,
    interrupt: asyncio.Event | None = None,
) -> Finished:
    """Run ``argv`` (never through a shell); on timeout or cancellation kill its tree.

    With ``stdout_limit`` at most that many bytes of standard output are kept: the
    tool is killed when it writes more (its output may be unbounded, a diff for
    one), and the result says ``truncated``.

    ``interrupt`` is the caller's stop (an abort, a stopping daemon): once it is set
    the tool and what it started are killed and ``Interrupted`` is raised, so a hook
    that hangs holds the caller no longer than the kill takes, not until ``timeout``.
    Unlike cancelling the caller's task, the caller keeps running and can look at
    what the killed tool left (a ref that did or did not move).
    """
    if interrupt is not None and interrupt.is_set():
        raise Interrupted("stopped before it started")
    tool = _Tool(await _start(argv, env, stdin, cwd), stdin, stdout_limit)
    try:
        await asyncio.wait_for(_unless(tool.finished(), interrupt), timeout)
    except BaseException as exc:
        if tool.returncode is None:
            doomed = tooltree.kill_tree(tool.pid)
            # Shielded: a cancelled caller still must not leave a zombie or a live tool.
            await asyncio.shield(tool.exited())
            await asyncio.shield(tooltree.reap_adopted(doomed[1:]))
        if isinstance(exc, TimeoutError):
            raise TimedOut(f"did not finish within {timeout:.3g} s") from None
        raise
    finally:
        tool.close()
    code = tool.returncode if tool.returncode is not None else -1
    return Finished(code, tool.out.text(), tool.err.text(), truncated=tool.truncated)


def _stdout(limit: int | None) -> HeadTail:
    """Standard output as kept: its first ``limit`` bytes (the tool is killed past
    them), or without a limit its head and tail."""
    return HeadTail(limit, 0) if limit is not None else HeadTail(STDOUT_HEAD, STDOUT_TAIL)


def run_blocking(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Finished:
    """``run`` for callers that need an answer before the event loop serves anything
    (start-up): the same bounds on what is kept; past ``timeout`` the tool and what it
    started are killed and ``TimedOut`` is raised.  ``FileNotFoundError`` and
    ``NotADirectoryError`` (no such program, no ``cwd``) reach the caller."""
    popen = subprocess.Popen(
        list(argv),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**(env if env is not None else os.environ), **tooltree.marker()},
    )
    assert popen.stdout is not None and popen.stderr is not None
    out, err = _stdout(None), HeadTail(STDERR_HEAD, STDERR_TAIL)
    deadline = time.monotonic() + timeout
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(popen.stdout, selectors.EVENT_READ, out)
            selector.register(popen.stderr, selectors.EVENT_READ, err)
            while selector.get_map():
                left = deadline - time.monotonic()
                ready = selector.select(left) if left > 0 else []
                if not ready and time.monotonic() >= deadline:
                    raise TimedOut(f"did not finish within {timeout:.3g} s")
                for key, _ in ready:
                    chunk = os.read(key.fd, _READ_BYTES)
                    if chunk:
                        key.data.add(chunk)
                    else:
                        selector.unregister(key.fileobj)
        code = popen.wait(max(0.0, deadline - time.monotonic()))
    except (TimedOut, subprocess.TimeoutExpired):
        tooltree.kill_tree(popen.pid)
        popen.wait()
        raise TimedOut(f"did not finish within {timeout:.3g} s") from None
    finally:
        popen.stdout.close()
        popen.stderr.close()
    return Finished(code, out.text(), err.text())


async def _unless(work: Awaitable[T], interrupt: asyncio.Event | None) -> T:
    """``work``'s result, or ``Interrupted`` as soon as ``interrupt`` is set.

    ``work`` is cancelled and waited for before this returns, so no reader of the
    tool's pipes outlives the call; killing the tool is ``run``'s.  A tool that
    finished as the interrupt came keeps its result: what it did is done.
    """
    if interrupt is None:
        return await work
    doing = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(interrupt.wait())
    try:
        await asyncio.wait((doing, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not doing.done():
            doing.cancel()
            # asyncio.wait raises nothing of ``doing``'s, but a cancel of ours leaves.
            await asyncio.wait((doing,))
    if doing.cancelled():
        raise Interrupted("stopped by the caller")
    return doing.result()


_READ_BYTES = 65536
# Without pidfds (an old kernel, a seccomp filter) a tool's exit is polled this often.
_EXIT_POLL_SECONDS = 0.005


# Tools start from this one thread, which lives as long as the daemon: the loop's own
# thread is not held while the kernel runs a vforked child up to its exec (the GIL is
# released meanwhile), which on two loaded cores took about 2 ms a tool, the loop
# standing still.  A sandbox's --die-with-parent is tied to the thread that started
# bwrap, and this one ends only with the daemon.
_STARTER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sloop-tools")


def _umask() -> int | None:
    """The process umask, read without setting it (``os.umask`` would, for every thread)."""
    status = procfs.own_status_field("Umask")
    return int(status, 8) if status else None


async def _start(
    argv: Sequence[str], env: Mapping[str, str] | None, stdin: bytes | None, cwd: Path | None
) -> subprocess.Popen[bytes]:
    environ = {**(env if env is not None else os.environ), **tooltree.marker()}
    # The umask as the loop's thread sees it now, handed to the tool: should anything
    # narrow the process umask for a moment (``bound_private`` did before 0.9.0), a
    # tool started from the other thread just then would make folders no one can enter.
    mask = _umask()

    def popen() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            list(argv),
            cwd=cwd,
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environ,
            umask=-1 if mask is None else mask,
        )

    if mask is None:
        return popen()  # no way to read it: started here, where it is right
    starting = _STARTER.submit(popen)
    try:
        return await asyncio.shield(asyncio.wrap_future(starting))
    except asyncio.CancelledError:
        # Told by the starter's own future, not the loop's: a caller cancelled as its
        # loop closes (asyncio.run's end) would otherwise never hear of the start, and
        # the tool ran on with its pipes open, unwaited.
        starting.add_done_callback(_abandoned)
        raise


def _abandoned(starting: concurrent.futures.Future[subprocess.Popen[bytes]]) -> None:
    """A tool whose caller was cancelled while it started: killed, and collected (in the
    starter's thread, or at once when it had started already)."""
    if starting.cancelled() or starting.exception() is not None:
        return
    popen = starting.result()
    tooltree.kill_tree(popen.pid)
    for pipe in (popen.stdin, popen.stdout, popen.stderr):
        if pipe is not None:
            pipe.close()
    try:
        _STARTER.submit(popen.wait)  # SIGKILLed: it is gone at once
    except RuntimeError:
        # The interpreter is exiting (a daemon that stopped while this tool started):
        # this is the starter's own thread, which no longer takes work; wait here.
        popen.wait()


class _Tool:
    """One tool's process, started by ``subprocess`` (vfork and exec, in ``_start``), its
    pipes read and its exit watched (a pidfd) on the running loop (``sloopd.util.pipes``).

    Not the loop's own ``create_subprocess_exec``: uvloop forks the whole daemon for
    each one, which cost the loop's thread about 1.4 ms of CPU a tool (page tables
    copied) against 0.25 ms here, and the daemon starts some 20 gits per run.  The
    tool stays in the daemon's process group (the orphan reaper leaves it alone) and
    is waited for here, by pid, never by anyone else.
    """

    def __init__(
        self, popen: subprocess.Popen[bytes], stdin: bytes | None, stdout_limit: int | None
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._popen = popen
        self.pid = self._popen.pid
        self.out = _stdout(stdout_limit)
        self.err = HeadTail(STDERR_HEAD, STDERR_TAIL)
        self.truncated = False
        self._limit = stdout_limit
        self._doomed: list[int] = []  # what a truncation killed besides the tool
        self._done = self._loop.create_future()  # exited, and every pipe at its end
        assert self._popen.stdout is not None and self._popen.stderr is not None
        self._readers = (
            PipeReader(self._popen.stdout, _READ_BYTES, self._out, self._settle),
            PipeReader(self._popen.stderr, _READ_BYTES, self.err.add, self._settle),
        )
        self._unsent = memoryview(stdin or b"")
        if self._popen.stdin is not None:
            os.set_blocking(self._popen.stdin.fileno(), False)
            self._send()
        self._exit = ExitWatch(self._popen, _EXIT_POLL_SECONDS, lambda _code: self._settle())

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    async def finished(self) -> None:
        """Once the tool exited and both its pipes reached their end (``communicate``)."""
        await asyncio.shield(self._done)
        if self._doomed:
            await tooltree.reap_adopted(self._doomed)

    async def exited(self) -> None:
        await asyncio.shield(self._exit.exited)

    def _send(self) -> None:
        stdin = self._popen.stdin
        assert stdin is not None
        try:
            while self._unsent:
                self._unsent = self._unsent[os.write(stdin.fileno(), self._unsent) :]
        except BlockingIOError:
            self._loop.add_writer(stdin.fileno(), self._sent_more)
            return
        except OSError:
            pass  # the tool closed its end (exited or did not read): as communicate does
        self._close_stdin()

    def _sent_more(self) -> None:
        stdin = self._popen.stdin
        assert stdin is not None
        self._loop.remove_writer(stdin.fileno())
        self._send()

    def _close_stdin(self) -> None:
        stdin = self._popen.stdin
        if stdin is not None and not stdin.closed:
            self._loop.remove_writer(stdin.fileno())
            stdin.close()

    def _out(self, chunk: bytes) -> None:
        if self._limit is None:
            self.out.add(chunk)
        elif not self.truncated:
            if len(self.out) + len(chunk) > self._limit:
                self.out.add(chunk[: self._limit - len(self.out)])
                self.truncated = True
                # The tool is blocked writing the rest; nothing more of it is wanted.
                # Its pipes are read on to their end: a paused pipe never sees its EOF.
                self._doomed = tooltree.kill_tree(self.pid)[1:]
            else:
                self.out.add(chunk)

    def _settle(self) -> None:
        ended = all(reader.ended for reader in self._readers)
        if ended and self._exit.exited.done() and not self._done.done():
            self._done.set_result(None)

    def close(self) -> None:
        """Every pipe and watch given back (the process itself is collected by then)."""
        self._close_stdin()
        for reader in self._readers:
            reader.close()
        self._exit.close()
