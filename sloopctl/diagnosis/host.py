"""What doctor reads of this host without the daemon: daemon.json, git, /proc.

The daemon's files (``daemon.json``, the process-group registry) are read as
sloopd writes them; worktrees come from ``git worktree list``, processes from
``/proc``.  No verdicts here: the checks decide what a finding means.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson

from sloopd.wire import api

# Names inside the state directory (sloopd.core.paths, sloopd.proc.children, sloopd.runs.runner);
# sloopctl may not import those modules, so they are repeated here.
# Run checkouts, one repository per run (sloopd.git.checkout).
CHECKOUTS_DIR: Final = "checkouts"
GROUPS_DIR: Final = "groups"
MARKER_VAR: Final = "SLOOP_CHILD_MARKER"


# --- daemon.json -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DaemonInfo:
    """``daemon.json``: what a running daemon recorded in its state directory."""

    path: Path
    pid: int | None
    socket: str | None


def read_daemon_info(state_dir: Path) -> DaemonInfo | None:
    path = state_dir / api.DAEMON_INFO_NAME
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    pid, socket = data.get("pid"), data.get("socket")
    return DaemonInfo(
        path,
        pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
        socket if isinstance(socket, str) and socket else None,
    )


# --- git ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Worktree:
    """One entry of ``git worktree list --porcelain``."""

    path: Path
    branch: str | None
    prunable: bool


class GitProblem(Exception):
    """A git command doctor relies on failed; the message says which and why."""


def parse_worktrees(porcelain: str) -> list[Worktree]:
    entries = []
    for block in porcelain.split("\n\n"):
        lines = block.strip().splitlines()
        if not lines or not lines[0].startswith("worktree "):
            continue
        branch = next(
            (ln.removeprefix("branch ") for ln in lines if ln.startswith("branch ")), None
        )
        prunable = any(ln == "prunable" or ln.startswith("prunable ") for ln in lines)
        entries.append(Worktree(Path(lines[0].removeprefix("worktree ")), branch, prunable))
    return entries


def git(
    repo: Path | None, *args: str, timeout: float | None = 60.0
) -> subprocess.CompletedProcess[str]:
    """Run git (in ``repo`` when given); OSError when git cannot be run at all."""
    where = ["-C", str(repo)] if repo is not None else []
    return subprocess.run(
        ["git", *where, *args], capture_output=True, text=True, check=False, timeout=timeout
    )


# --- processes ---------------------------------------------------------------------------


def process_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (another user's counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = read_proc(pid, "stat")
    return stat is None or stat.rpartition(b")")[2].split()[:1] != [b"Z"]


def read_proc(pid: int, name: str) -> bytes | None:
    """``/proc/<pid>/<name>``; None when it cannot be read (gone, not ours, no /proc).

    The daemon reads /proc through ``sloopd.util.procfs``; sloopctl keeps this
    reader of its own because it may import nothing of the daemon but the
    wire schema (DESIGN rule 3).
    """
    try:
        with open(f"/proc/{pid}/{name}", "rb") as f:
            return f.read()
    except OSError:
        return None


def marked_processes(markers: set[str]) -> dict[str, set[int]]:
    """Live processes whose environment carries one of ``markers`` (as sloopd marks them)."""
    found: dict[str, set[int]] = {}
    prefix = f"{MARKER_VAR}=".encode()
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        environ = read_proc(int(name), "environ")
        for entry in (environ or b"").split(b"\0"):
            if entry.startswith(prefix):
                marker = entry[len(prefix) :].decode(errors="replace")
                if marker in markers:
                    found.setdefault(marker, set()).add(int(name))
    return found


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """One file of ``<state dir>/groups``, as sloopd.proc.children writes them."""

    path: Path
    marker: str
    pid: int | None
    owner: str | None
    argv: tuple[str, ...]


def read_group_records(directory: Path) -> list[GroupRecord]:
    records = []
    try:
        paths = sorted(directory.glob("*.json"))
    except OSError:
        return []
    for path in paths:
        try:
            data = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        if not isinstance(data, dict) or not isinstance(data.get("marker"), str):
            continue
        pid, owner, argv = data.get("pid"), data.get("owner"), data.get("argv")
        records.append(
            GroupRecord(
                path,
                data["marker"],
                pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
                owner if isinstance(owner, str) else None,
                tuple(str(a) for a in argv) if isinstance(argv, list) else (),
            )
        )
    return records


def live_pids(record: GroupRecord, marked: Mapping[str, set[int]]) -> set[int]:
    """The record's live processes: those carrying its marker, and its leader.

    The leader's pid counts only while its environment still holds the marker,
    or cannot be read (another user's process): a pid reused by an unrelated
    process is no leftover.
    """
    pids = set(marked.get(record.marker, ()))
    pid = record.pid
    if pid is not None and pid > 1 and pid not in pids and process_alive(pid):
        environ = read_proc(pid, "environ")
        if environ is None or f"{MARKER_VAR}={record.marker}".encode() in environ.split(b"\0"):
            pids.add(pid)
    return pids


def describe_group(record: GroupRecord, pids: Iterable[int]) -> str:
    program = Path(record.argv[0]).name if record.argv else "?"
    listed = ", ".join(str(p) for p in sorted(pids))
    return f"{record.owner or 'unknown owner'}: pid {listed} ({program})"
