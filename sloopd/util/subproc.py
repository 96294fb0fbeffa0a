"""Short-lived tools (git) run with a deadline, cancellable, and never outliving the daemon.

A git call that hangs (a hook waiting on a terminal, a network remote, a lock) must
not hold a run, an ``abort`` or a shutdown for ever: every call has a timeout, and a
timeout or a cancellation kills the tool *and* what it started (hooks), so nothing
keeps writing to the repository after the daemon has stopped waiting for it.

The tool stays in the daemon's process group: the daemon is a child subreaper whose
orphan reaper leaves that group alone, so the event loop, not the reaper, collects its
exit status.  ``PR_SET_PDEATHSIG`` kills it when the daemon dies: a ``git update-ref``
left running by a SIGKILLed daemon could otherwise move ``main`` after the next daemon
has already decided from the ref that the merge did not happen.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sloopd.util import procfs

_PR_SET_PDEATHSIG = 1


class TimedOut(Exception):
    """The tool did not finish within its deadline; it and its children were killed."""


@dataclass(frozen=True, slots=True)
class Finished:
    returncode: int
    stdout: str
    stderr: str


def _die_with_daemon() -> None:  # pragma: no cover - runs in the forked child
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


async def run(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    cwd: Path | None = None,
) -> Finished:
    """Run ``argv`` (never through a shell); on timeout or cancellation kill its tree."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env) if env is not None else None,
        preexec_fn=_die_with_daemon,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    except BaseException as exc:
        if proc.returncode is None:
            doomed = kill_tree(proc.pid)
            # Shielded: a cancelled caller still must not leave a zombie or a live tool.
            await asyncio.shield(proc.wait())
            _reap_adopted(doomed[1:])
        if isinstance(exc, TimeoutError):
            raise TimedOut(f"did not finish within {timeout:.3g} s") from None
        raise
    code = proc.returncode if proc.returncode is not None else -1
    return Finished(code, out.decode(errors="replace"), err.decode(errors="replace"))


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


def _reap_adopted(pids: Sequence[int]) -> None:
    """Collect killed hooks the subreaper inherited: they share our group, which the
    orphan reaper leaves alone, so no one else would."""
    me = os.getpid()
    for pid in pids:
        stat = procfs.stat(pid)
        if stat is not None and stat.ppid == me and stat.state == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
