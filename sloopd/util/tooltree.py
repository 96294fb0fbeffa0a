"""A tool's process tree: killed whole, its adopted hooks collected, and what a killed
daemon's tools left found again by their marker.

A tool outlives a SIGKILLed daemon: killing it with the daemon (``PR_SET_PDEATHSIG``)
was tried and left ``packed-refs.lock`` and ``<ref>.lock`` files behind that failed
every later run.  Instead every tool carries ``TOOL_MARKER`` in its environment (set
by ``mark_tools`` at startup, added by ``sloopd.util.subproc``; never the daemon's own
environment, so nothing else it starts carries it), and the next daemon waits for the
marked survivors to finish (``await_survivors``) before it reads a ref to decide whether
a merge happened, so a ``git update-ref`` still running cannot move ``main`` after that
decision.

Imports ``util.procfs`` only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Sequence

from sloopd.util import procfs

# NAME=<state dir> in the environment of every tool a daemon runs (set by the server).
TOOL_MARKER = "SLOOP_DAEMON_TOOLS"
_marker: dict[str, str] = {}


def mark_tools(state_dir: str) -> None:
    """Every later tool is marked as this daemon's (see ``await_survivors``)."""
    _marker[TOOL_MARKER] = state_dir


def marker() -> dict[str, str]:
    """The entry every tool's environment carries (none before ``mark_tools``)."""
    return dict(_marker)


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


async def reap_adopted(pids: Sequence[int], within: float = 2.0) -> None:
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
