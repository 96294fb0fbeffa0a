"""The daemon process's own plumbing: its log, its task dump, a socket probe.

Kept out of ``sloopd.server`` so that module stays the startup and shutdown order.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
from pathlib import Path

# Its own name, not ``sloopd.server``'s: a line in daemon.log says which module wrote it
# (the task dump of SIGUSR1 comes from here, not from the startup order).
log = logging.getLogger(__name__)


def answers(path: Path) -> bool:
    """Whether a process listens on the Unix socket at ``path`` (not a leftover file)."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(0.5)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def log_tasks() -> None:
    """SIGUSR1: every task's stack into the log, to see where a run or a stop waits."""
    for task in asyncio.all_tasks():
        frames = task.get_stack()
        where = " <- ".join(f"{f.f_code.co_name}:{f.f_lineno}" for f in reversed(frames))
        log.warning("task %s: %s", task.get_name(), where or "(no frames)")


def configure_logging() -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=os.environ.get("SLOOPD_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
