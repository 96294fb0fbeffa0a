"""Child processes (agents, commands): spawn, capture output, stop, and reap leftovers.

Everything that signals a process lives here, behind ``ProcessGroups``, so the run walker
can be tested with a recording fake and this module tested once against real processes.

Each spawn gets a random ``SLOOP_CHILD_MARKER`` in its environment, inherited by all its
descendants. A process is ours only if ``/proc/<pid>/environ`` holds that exact marker;
this is what lets us stop a grandchild that left the group (``setsid``) and kill what a
crashed daemon left behind without ever touching a process we did not start, pid reuse
included. The live markers are recorded on disk, one JSON file per group.

Exit codes follow ``subprocess``/``asyncio``: a death by signal N is ``-N``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

from sloopd.proc.lines import LineSplitter, OnLines
from sloopd.util import argv_limits, procfs
from sloopd.util.pipes import ExitWatch, PipeReader

log = logging.getLogger(__name__)

MARKER_VAR = "SLOOP_CHILD_MARKER"
# Small reads keep one flooding child from holding the loop for long: a loop turn
# reads one chunk per readable pipe, so eight flooding agents cost 8 x 4 KiB of lines
# per turn (16 KiB made a dashboard wait ~50 ms at p99; 4 KiB ~17 ms, no less ingest).
CHUNK_BYTES = 4 * 1024
DRAIN_SECONDS = 1.0  # a grandchild may hold the pipes open forever; read on this long
KILL_WAIT_SECONDS = 5.0  # after SIGKILL, how long to wait before calling a group stuck
# bwrap reports its child's death by signal N as exit status 128+N, as a shell does, so
# inside the sandbox an exit code 128+N is ambiguous.  It is read as a signal only for a
# standard signal whose default action ends the process; anything else is the program's
# own exit code (Gemini CLI exits with the HTTP status modulo 256: 429 is 173, not a
# death by real-time signal 45).
TERMINATING_SIGNALS = frozenset(
    {
        signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGILL, signal.SIGTRAP,
        signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGKILL, signal.SIGUSR1,
        signal.SIGSEGV, signal.SIGUSR2, signal.SIGPIPE, signal.SIGALRM, signal.SIGTERM,
        signal.SIGXCPU, signal.SIGXFSZ, signal.SIGSYS,
    }
)  # fmt: skip
POLL_SECONDS = 0.05


class ChildSpawnError(Exception):
    """The child could not be started (missing or non-executable program, bad cwd)."""


def find_marked(marker: str) -> list[int]:
    """Pids of our uid whose environment carries ``marker`` (setsid escapees included)."""
    entry = f"{MARKER_VAR}={marker}".encode()
    return [pid for pid in procfs.pids(os.getuid()) if procfs.environ_has(pid, entry)]


def _kill_if_marked(pid: int, marker: str, sig: int) -> bool:
    """Signal ``pid`` only after re-checking its marker, race-free where pidfds exist.

    The pidfd pins the process: if it is still alive when signalled, it was alive when
    its environ was read, so the pid cannot have been reused in between.
    """
    entry = f"{MARKER_VAR}={marker}".encode()
    pidfd: int | None
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    except OSError:  # no pidfd support: re-check and signal, accepting a tiny window
        pidfd = None
    try:
        if not procfs.environ_has(pid, entry):
            return False
        with suppress(ProcessLookupError, PermissionError):
            if pidfd is None:
                os.kill(pid, sig)
            else:
                signal.pidfd_send_signal(pidfd, sig)
            return True
        return False
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _signal_group(pgid: int | None, marker: str, sig: int, leader_unreaped: bool) -> list[int]:
    """Signal the group and every marked process; return the marked pids reached.

    ``killpg`` reaches members that replaced their environment. It is safe while the
    leader is unreaped (its pid, hence the group id, cannot be reused) or while a marked
    process still sits in the group (a group id is not reused while the group exists).
    """
    pids = find_marked(marker)
    members: set[int] = set()
    for pid in pids:
        with suppress(OSError):
            if os.getpgid(pid) == pgid:
                members.add(pid)
    hit: set[int] = set()
    if pgid is not None and pgid > 1 and (leader_unreaped or members):
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
            hit = members
    return [pid for pid in pids if pid in hit or _kill_if_marked(pid, marker, sig)]


class Child:
    """One spawned process group: output capture, exit status, and stopping."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        marker: str,
        grace: float,
        on_lines: OnLines,
        sandboxed: bool = False,
    ) -> None:
        self.pid = popen.pid
        # The leader is bwrap, outside the sandbox: SIGTERM goes to the marked
        # processes inside only (bwrap would die of it and SIGKILL them at once);
        # SIGKILL to the group ends bwrap, and with it the whole PID namespace.
        self.sandboxed = sandboxed
        self.pgid = popen.pid  # start_new_session: the child leads its own group
        self.marker = marker
        self.last_output_monotonic = time.monotonic()  # stall clock starts at spawn
        self._popen = popen
        self._grace = grace
        self._loop = asyncio.get_running_loop()
        self._drained: asyncio.Future[None] = self._loop.create_future()
        self._stop_task: asyncio.Task[bool] | None = None
        self._pipes: dict[str, tuple[PipeReader, LineSplitter]] = {}
        for name, pipe in (("stdout", popen.stdout), ("stderr", popen.stderr)):
            assert pipe is not None
            splitter = LineSplitter(name, on_lines)
            on_chunk = functools.partial(self._on_output, splitter)
            on_end = functools.partial(self._on_end, name)
            self._pipes[name] = (PipeReader(pipe, CHUNK_BYTES, on_chunk, on_end), splitter)
        self._exit = ExitWatch(popen, POLL_SECONDS)

    async def wait(self) -> int:
        """The exit code once the process exited and its pipes hit EOF or drained ~1 s."""
        code = await asyncio.shield(self._exit.exited)
        if self.sandboxed:
            code = sandboxed_exit_code(code)
        with suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._drained), DRAIN_SECONDS)
        self._close_pipes()
        return code

    async def stop(self) -> None:
        """SIGTERM the group, SIGKILL what still carries the marker after the grace."""
        await self._terminate()

    def pause_reading(self, paused: bool) -> None:
        """Stop (or go on) reading the pipes: whoever takes the lines cannot keep up (a
        remote executor's bounded outbox), so the child blocks on a full pipe instead."""
        for reader, _splitter in self._pipes.values():
            if paused:
                reader.pause()
            else:
                reader.resume()

    def _terminate(self) -> asyncio.Future[bool]:
        # One termination at a time, shared by every caller; shielded so a cancelled
        # caller does not leave the group half-stopped.
        if self._stop_task is None or self._stop_task.done():
            self._stop_task = self._loop.create_task(self._terminate_once())
        return asyncio.shield(self._stop_task)

    async def _terminate_once(self) -> bool:
        if self.sandboxed:
            for pid in find_marked(self.marker):
                _kill_if_marked(pid, self.marker, signal.SIGTERM)
        else:
            self._signal(signal.SIGTERM)
        if await self._gone_within(self._grace):
            return True
        self._signal(signal.SIGKILL)
        return await self._gone_within(KILL_WAIT_SECONDS)

    def _signal(self, sig: int) -> None:
        _signal_group(self.pgid, self.marker, sig, self._popen.returncode is None)

    async def _gone_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while True:
            if self._exit.exited.done() and not find_marked(self.marker):
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(POLL_SECONDS)

    def _on_output(self, splitter: LineSplitter, data: bytes) -> None:
        self.last_output_monotonic = time.monotonic()
        splitter.feed(data)

    def _on_end(self, name: str) -> None:
        _reader, splitter = self._pipes.pop(name)
        splitter.close()
        if not self._pipes and not self._drained.done():
            self._drained.set_result(None)

    def _close_pipes(self) -> None:
        """Stop reading pipes a grandchild still holds; flush their partial lines."""
        for reader, splitter in list(self._pipes.values()):
            reader.close()
            splitter.close()
        self._pipes.clear()
        if not self._drained.done():
            self._drained.set_result(None)


def sandboxed_exit_code(status: int) -> int:
    """bwrap's exit status as ``subprocess`` would report its child's: ``-N`` for signal N."""
    if 128 < status < 128 + 64 and (status - 128) in TERMINATING_SIGNALS:
        return 128 - status
    return status


class ProcessGroups:
    """The one object that starts, signals and reaps child process groups."""

    def __init__(self, registry_dir: Path, grace_seconds: float = 5.0) -> None:
        self.registry_dir = registry_dir
        self.grace_seconds = grace_seconds
        self._children: dict[str, Child] = {}
        registry_dir.mkdir(parents=True, exist_ok=True)

    async def spawn(
        self,
        argv: list[str],
        *,
        cwd: Path,
        env: dict[str, str],
        owner: str,
        on_lines: OnLines,
        sandbox: Callable[[list[str], dict[str, str]], list[str]] | None = None,
    ) -> Child:
        """Start ``argv`` as the leader of a new group, recorded before any output is read.

        The record is written once before the fork (marker only) so a daemon crash at any
        point leaves something the next start can find, then again with the pid.
        ``sandbox`` turns (argv, the child's environment) into the command that runs
        it sandboxed; the marker is then in the sandboxed processes' environment only.
        """
        if not argv:
            raise ChildSpawnError("cannot start a child: empty command")
        marker = secrets.token_hex(16)
        record: dict[str, Any] = {
            "pgid": None,
            "pid": None,
            "marker": marker,
            "argv": list(argv),
            "started_at_ms": time.time_ns() // 1_000_000,
            "owner": owner,
        }
        self._write(record)
        child_env = {**env, MARKER_VAR: marker}
        command, spawn_env = argv, child_env
        if sandbox is not None:
            command, spawn_env = sandbox(argv, child_env), {"PATH": os.defpath}
        too_big = argv_limits.problem(command, spawn_env)
        if too_big is not None:
            # execve's E2BIG ("Argument list too long") names neither the part nor the limit.
            self._path(marker).unlink(missing_ok=True)
            raise ChildSpawnError(f"cannot start {argv[0]}: {too_big}")
        try:
            popen = subprocess.Popen(
                command,
                cwd=cwd,
                env=spawn_env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            self._path(marker).unlink(missing_ok=True)
            where = exc.filename or argv[0]
            raise ChildSpawnError(f"cannot start {argv[0]}: {exc.strerror}: {where}") from exc
        record["pid"] = record["pgid"] = popen.pid
        try:
            self._write(record)
        except OSError as exc:  # the marker-only record still lets a restart find it
            log.warning("cannot record group %d: %s", popen.pid, exc)
        child = Child(popen, marker, self.grace_seconds, on_lines, sandboxed=sandbox is not None)
        self._children[marker] = child
        return child

    async def reap_leftovers(self, child: Child) -> None:
        """Stop what a finished child left behind; forget its group once confirmed empty."""
        empty = await child._terminate()
        await child.wait()
        if not empty:
            log.warning(
                "group %d (%s) survived SIGKILL; kept in registry", child.pgid, child.marker
            )
            return
        self._path(child.marker).unlink(missing_ok=True)
        self._children.pop(child.marker, None)

    async def stop_all(self) -> None:
        """A stopping daemon stops every group it started, concurrently."""
        children = list(self._children.values())
        await asyncio.gather(*(self.reap_leftovers(c) for c in children))

    def kill_recorded_leftovers(self) -> list[int]:
        """At daemon start: SIGKILL whatever a previous daemon's groups left; clear records."""
        killed: list[int] = []
        for path in sorted(self.registry_dir.iterdir()):
            record = _read(path)
            if record is None:
                log.warning("removing unreadable group record %s", path)
            elif record["marker"] in self._children:
                continue  # started by this daemon and still live: not a leftover
            else:  # not our child any more: only marked members can vouch for the group id
                pgid = record.get("pgid")
                pgid = pgid if isinstance(pgid, int) else None
                killed += _signal_group(pgid, record["marker"], signal.SIGKILL, False)
            with suppress(IsADirectoryError):
                path.unlink(missing_ok=True)
        if killed:
            log.warning("killed %d leftover processes from a previous run: %s", len(killed), killed)
        return killed

    def leader_pids(self) -> set[int]:
        """Pids this object waits for itself (nobody else may reap them)."""
        return {child.pid for child in self._children.values()}

    def live(self) -> list[dict[str, Any]]:
        """The recorded live groups, oldest first (unreadable records are skipped)."""
        records = [r for p in self.registry_dir.glob("*.json") if (r := _read(p)) is not None]
        return sorted(records, key=lambda r: (r.get("started_at_ms") or 0, r["marker"]))

    def _path(self, marker: str) -> Path:
        return self.registry_dir / f"{marker}.json"

    def _write(self, record: dict[str, Any]) -> None:
        path = self._path(record["marker"])
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(record, sort_keys=True) + "\n")
        os.replace(tmp, path)


def _read(path: Path) -> dict[str, Any] | None:
    """A record with a well-formed marker, or None for anything else."""
    try:
        record = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    marker = record.get("marker")
    return record if isinstance(marker, str) and re.fullmatch("[0-9a-f]{32}", marker) else None
