"""``sloopctl daemon``: start ``sloopd serve`` detached for this repository.

The daemon prints its operator socket path alone on its first stdout line once
it listens; that line is the only handshake, so the client needs no knowledge
of the daemon's startup beyond it.  Everything else the daemon says goes to
``daemon.log`` in the state directory, which is where a failed start is
explained.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sloopctl.locate import Repo

START_TIMEOUT_S: Final = 10.0
LOG_NAME: Final = "daemon.log"
LOG_TAIL_LINES: Final = 20


class StartError(Exception):
    """The daemon did not come up; ``log_tail`` is the end of its log."""

    def __init__(self, message: str, log_tail: str) -> None:
        super().__init__(message)
        self.message = message
        self.log_tail = log_tail


@dataclass(frozen=True, slots=True)
class Started:
    socket: str
    process: subprocess.Popen[bytes]


def daemon_argv(repo: Repo, socket_dir: str | None) -> list[str]:
    argv = [sys.executable, "-m", "sloopd", "serve", "--repo", str(repo.toplevel)]
    return [*argv, "--socket-dir", socket_dir] if socket_dir else argv


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open("rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 64 * 1024))
            data = log.read()
    except OSError:
        return ""
    return b"\n".join(data.splitlines()[-lines:]).decode(errors="replace")


def _first_line(proc: subprocess.Popen[bytes], timeout: float) -> bytes | None:
    """The child's first stdout line; None at end of file or when time runs out."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    buffer = b""
    while b"\n" not in buffer:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        readable, _, _ = select.select([fd], [], [], remaining)
        if not readable:
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        buffer += chunk
    return buffer.partition(b"\n")[0]


def start_daemon(
    repo: Repo,
    socket_dir: str | None = None,
    *,
    argv: list[str] | None = None,
    timeout: float = START_TIMEOUT_S,
) -> Started:
    """Spawn the daemon in its own session and wait for its socket path."""
    repo.state_dir.mkdir(parents=True, exist_ok=True)
    log_path = repo.state_dir / LOG_NAME
    command = argv if argv is not None else daemon_argv(repo, socket_dir)
    with log_path.open("ab") as log:
        try:
            # Own session: the daemon outlives this shell and its terminal's signals.
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
                cwd=repo.toplevel,
            )
        except OSError as exc:
            raise StartError(f"cannot start {command[0]}: {exc}", "") from None
    assert proc.stdout is not None
    with proc.stdout:
        # The first line is the whole handshake: the daemon writes nothing else
        # to stdout, and this end closes with sloopctl anyway.
        line = _first_line(proc, timeout)
    if line is not None and line.strip():
        return Started(line.decode(errors="replace").strip(), proc)
    try:
        status = proc.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        # Still alive but silent (a long store migration, say): leave it be
        # rather than kill a daemon mid-write.
        raise StartError(
            f"sloopd (pid {proc.pid}) did not report its socket within {timeout:g} s; "
            f"it may still be starting; see {log_path}",
            log_tail(log_path),
        ) from None
    raise StartError(
        f"sloopd exited with status {status} before listening; see {log_path}",
        log_tail(log_path),
    )
