"""What ``/proc`` says about a process, read one way for the whole daemon.

Every reader answers None (or nothing) for a process that is gone or not
ours to read, never raises: the callers decide what "cannot tell" means (the
operator-socket check fails closed; the process-group code skips the pid).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Stat:
    state: str  # "R", "S", "Z", ...
    ppid: int
    pgrp: int


def stat(pid: int) -> Stat | None:
    """The process's state, parent and group; None once it is gone."""
    raw = _read(pid, "stat")
    if raw is None:
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return Stat(fields[0].decode(), int(fields[1]), int(fields[2]))
    except (IndexError, ValueError):
        return None


def environ(pid: int) -> list[bytes] | None:
    """The process's initial environment as ``NAME=value`` entries; None if unreadable."""
    raw = _read(pid, "environ")
    return None if raw is None else [entry for entry in raw.split(b"\0") if entry]


def environ_has(pid: int, entry: bytes) -> bool:
    """Whether the initial environment holds exactly ``entry`` (False if unreadable)."""
    return entry in (environ(pid) or ())


def environ_names(pid: int, name: str) -> bool:
    """Whether the initial environment sets ``name`` to anything (False if unreadable)."""
    prefix = name.encode() + b"="
    return any(entry.startswith(prefix) for entry in environ(pid) or ())


def pids(uid: int | None = None) -> Iterator[int]:
    """Every visible pid but our own, only those owned by ``uid`` when given."""
    me = os.getpid()
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        if uid is not None:
            try:
                if os.stat(f"/proc/{name}").st_uid != uid:
                    continue
            except OSError:
                continue
        yield int(name)


def own_status_field(name: str) -> str | None:
    """A field of this process's ``/proc/self/status`` (``Umask``: ``0022``), or None."""
    raw = _read_path("/proc/self/status")
    prefix = name.encode() + b":"
    for line in (raw or b"").splitlines():
        if line.startswith(prefix):
            return line[len(prefix) :].strip().decode()
    return None


def exists(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def _read(pid: int, name: str) -> bytes | None:
    return _read_path(f"/proc/{pid}/{name}")


def _read_path(path: str) -> bytes | None:
    # os.open and os.read, not a file object: a scan reads one file of every process
    # on the host, on the event loop, after every child (a third less time per file).
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # gone, or not ours to read; a zombie's empty environ reads fine
        return None
    try:
        chunks = []
        while chunk := os.read(descriptor, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(descriptor)
