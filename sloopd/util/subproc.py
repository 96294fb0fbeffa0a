"""Short-lived tools (git) run with a deadline, cancellable, and never outliving the daemon.

A git call that hangs (a hook waiting on a terminal, a network remote, a lock) must
not hold a run, an ``abort`` or a shutdown for ever: every call has a timeout, and a
timeout or a cancellation kills the tool *and* what it started (hooks), so nothing
keeps writing to the repository after the daemon has stopped waiting for it.

The tool stays in the daemon's process group: the daemon is a child subreaper whose
orphan reaper leaves that group alone, so the event loop, not the reaper, collects its
exit status.

A tool outlives a SIGKILLed daemon: killing it with the daemon (``PR_SET_PDEATHSIG``)
was tried and left ``packed-refs.lock`` and ``<ref>.lock`` files behind that failed
every later run.  Instead every tool carries ``TOOL_MARKER`` in its environment (set
by ``mark_tools`` at startup, added by ``run``; never the daemon's own environment,
so nothing else it starts carries it), and the next daemon waits for the marked survivors to
finish (``await_survivors``) before it reads a ref to decide whether a merge happened,
so a ``git update-ref`` still running cannot move ``main`` after that decision.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from sloopd.util import procfs

# NAME=<state dir> in the environment of every tool a daemon runs (set by the server).
TOOL_MARKER = "SLOOP_DAEMON_TOOLS"
_marker: dict[str, str] = {}
T = TypeVar("T")


def mark_tools(state_dir: str) -> None:
    """Every later ``run`` marks its tool as this daemon's (see ``await_survivors``)."""
    _marker[TOOL_MARKER] = state_dir


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
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**(env if env is not None else os.environ), **_marker},
    )
    truncated = False
    try:
        if stdout_limit is None:
            out, err = await asyncio.wait_for(_unless(proc.communicate(stdin), interrupt), timeout)
        else:
            out, err, truncated = await asyncio.wait_for(
                _unless(_communicate_bounded(proc, stdin, stdout_limit), interrupt), timeout
            )
    except BaseException as exc:
        if proc.returncode is None:
            doomed = kill_tree(proc.pid)
            # Shielded: a cancelled caller still must not leave a zombie or a live tool.
            await asyncio.shield(proc.wait())
            await asyncio.shield(_reap_adopted(doomed[1:]))
        if isinstance(exc, TimeoutError):
            raise TimedOut(f"did not finish within {timeout:.3g} s") from None
        raise
    code = proc.returncode if proc.returncode is not None else -1
    return Finished(
        code, out.decode(errors="replace"), err.decode(errors="replace"), truncated=truncated
    )


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


# Standard error is for a person: what is kept of it when a tool's output is bounded.
_STDERR_LIMIT = 64 * 1024


async def _communicate_bounded(
    proc: asyncio.subprocess.Process, stdin: bytes | None, limit: int
) -> tuple[bytes, bytes, bool]:
    """``communicate`` keeping at most ``limit`` bytes of stdout; past them kill the tree."""
    assert proc.stdout is not None and proc.stderr is not None
    if stdin is not None and proc.stdin is not None:
        proc.stdin.write(stdin)
        await proc.stdin.drain()
        proc.stdin.close()
    errors = asyncio.ensure_future(_drain(proc.stderr, _STDERR_LIMIT))
    kept = bytearray()
    truncated = False
    try:
        while chunk := await proc.stdout.read(65536):
            if len(kept) + len(chunk) > limit:
                kept += chunk[: limit - len(kept)]
                truncated = True
                break
            kept += chunk
        if truncated:
            # The tool is blocked writing the rest; nothing more of it is wanted.
            doomed = kill_tree(proc.pid)
            # Read on to the pipe's end: a paused pipe never sees its EOF, and asyncio's
            # wait() answers only once every pipe has closed (it hung, under load).
            while await proc.stdout.read(65536):
                pass
            await proc.wait()
            await _reap_adopted(doomed[1:])
        else:
            await proc.wait()
    except BaseException:
        errors.cancel()  # the caller kills the tool; no reader may outlive this call
        raise
    return bytes(kept), await errors, truncated


async def _drain(stream: asyncio.StreamReader, keep: int) -> bytes:
    """Read ``stream`` to its end (a full pipe would block the tool), keeping ``keep`` bytes."""
    kept = bytearray()
    while chunk := await stream.read(65536):
        kept += chunk[: max(0, keep - len(kept))]
    return bytes(kept)


def kill_tree(pid: int) -> list[int]:
    """SIGKILL ``pid`` and every process descending from it (a hook, its children).

    Descendants are found before anything is killed, since a killed parent's children
    are re-parented (to us, the subreaper) and would no longer be found by their parent.
    """
    children: dict[int, list[int]] = {}
    for candidate in procfs.pids():
        stat = procfs.stat(candidate)
        if stat is not None:
            children.setdefault(stat.ppid, []).append(candidate)
    doomed, todo = [], [pid]
    while todo:
        current = todo.pop()
        doomed.append(current)
        todo.extend(children.get(current, ()))
    for victim in doomed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(victim, signal.SIGKILL)
    return doomed


async def _reap_adopted(pids: Sequence[int], within: float = 2.0) -> None:
    """Collect killed hooks the subreaper inherits: they share our process group,
    which the orphan reaper leaves alone, so no one else would.  A killed hook may
    still be dying when its git is already collected, hence the short wait."""
    me = os.getpid()
    waiting = set(pids)
    deadline = time.monotonic() + within
    while waiting and time.monotonic() < deadline:
        for pid in list(waiting):
            stat = procfs.stat(pid)
            if stat is None:
                waiting.discard(pid)
            elif stat.state == "Z" and stat.ppid == me:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                waiting.discard(pid)
            elif stat.state == "Z" and not procfs.exists(stat.ppid):
                waiting.discard(pid)  # someone else's to collect
        if waiting:
            await asyncio.sleep(0.02)


def survivors(state_dir: str) -> list[int]:
    """Live tools a previous daemon of ``state_dir`` started (by their marker)."""
    entry = f"{TOOL_MARKER}={state_dir}".encode()
    found = []
    for pid in procfs.pids():
        stat = procfs.stat(pid)
        if stat is not None and stat.state != "Z" and procfs.environ_has(pid, entry):
            found.append(pid)
    return found


def await_survivors(state_dir: str, timeout: float) -> list[int]:
    """Wait for a killed daemon's tools to finish; SIGKILL what is left at ``timeout``.

    Blocking on purpose: it runs at startup, before anything is served or decided.
    Returns the pids that had to be killed.
    """
    deadline = time.monotonic() + timeout
    left = survivors(state_dir)
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = survivors(state_dir)
    for pid in left:
        kill_tree(pid)
    return left
