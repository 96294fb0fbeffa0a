"""Why a daemon does not start: each refusal one line, with the exit status it gives.

Exit status 1 for what an operator must change (a bad ``sloop.toml``, another daemon,
an untrusted socket directory), ``diskfull.DISK_FULL_EXIT`` (75) for a state
directory whose filesystem has no room, which the same start survives once space is
freed (docs/operator-guide.md, "Start-up refusals").
"""

from __future__ import annotations

import os

import orjson

from sloopd.core import diskfull
from sloopd.core.paths import Layout
from sloopd.ops.process import answers
from sloopd.store import StoreUnavailable
from sloopd.util.diskspace import is_no_room
from sloopd.wire import api


class StartupError(Exception):
    """The daemon cannot start; the message says why and what to do."""

    exit_code = 1


class DiskFull(StartupError):
    """The state directory's filesystem has no room: retry once space is freed."""

    exit_code = diskfull.DISK_FULL_EXIT


def refusal(layout: Layout, exc: BaseException) -> StartupError:
    """A failed start-up step as the one line a refused start logs."""
    if (isinstance(exc, StoreUnavailable) and exc.reason == "full") or is_no_room(exc):
        return DiskFull(diskfull.message(layout.state_dir))
    if isinstance(exc, StoreUnavailable):
        return StartupError(f"refusing to start: {exc}")
    return StartupError(str(exc))


def refuse_if_served(layout: Layout) -> None:
    """Refuse while another daemon answers on our operator socket.

    Checked before anything else is touched: reconciling clears the socket
    directory's worker sockets and kills the leftovers recorded in the state
    directory, which would break the runs of a live daemon that shares the
    socket directory (with its own state directory, its lock does not stop us).
    """
    path = layout.operator_socket
    # A directory we may not trust is refused as Server._listen would, before we
    # speak to whatever listens in it.
    reason = api.untrusted_socket_path(path)
    if reason is not None:
        raise StartupError(f"cannot prepare socket directory: {reason}")
    if (path.exists() or path.is_symlink()) and answers(path):
        raise StartupError(
            f"refusing to start: another daemon already answers on {path}; stop it, "
            "or give this daemon a socket directory of its own (--socket-dir)"
        )


def write_info(layout: Layout) -> None:
    """``daemon.json``: how clients find this daemon's socket (sloopctl locate, doctor)."""
    info = {
        "pid": os.getpid(),
        "socket": str(layout.operator_socket),
        "version": api.SOFTWARE_VERSION,
        "repo": str(layout.repo),
    }
    target = layout.daemon_info
    tmp = target.with_suffix(".tmp")
    try:
        tmp.write_bytes(orjson.dumps(info))
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk leaves no half-written file behind
        raise
    tmp.replace(target)
