"""The store's exclusive lock: one daemon (or one maintenance command) per state directory."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path


class LockHeld(Exception):
    """Another process holds the lock; its message names that process."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(
            f"the store at {path.parent} is locked by {holder}; "
            "stop that process first (only one sloopd may own a repository's store)"
        )
        self.path = path
        self.holder = holder


class StoreLock:
    """An flock on ``<state dir>/lock``, released by the kernel if we die.

    flock rather than a pid file: a crashed daemon can never leave the lock
    behind, so a restart after kill -9 needs no clean-up.
    """

    def __init__(self, state_dir: Path, role: str) -> None:
        self.path = state_dir / "lock"
        self.role = role
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise LockHeld(self.path, holder) from None
        os.ftruncate(fd, 0)
        try:
            os.pwrite(fd, f"{self.role} (pid {os.getpid()})\n".encode(), 0)
        except OSError as exc:
            # The holder's name only words another process's refusal; the flock is the
            # lock.  On a full disk it cannot be written, and a read-only ``store
            # check`` still runs ("another process" is named instead).
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                os.close(fd)
                raise
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> StoreLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
