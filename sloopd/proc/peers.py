"""Who is on the other end of the operator socket, and orphans we adopted.

An agent must not reach operator authority, not even as the same user.  The
daemon makes itself a child subreaper, so every descendant of a run's child
(double-forked or not) stays in the daemon's process tree; a peer whose
ancestry passes through a direct child of the daemon is therefore inside a
run.  Legitimate clients (sloopctl, CI, dashboards) never descend from the
daemon.
"""

from __future__ import annotations

import ctypes
import logging
import os
import socket
import struct
from collections.abc import Callable

from sloopd.proc.children import MARKER_VAR
from sloopd.util import procfs

log = logging.getLogger(__name__)

PR_SET_CHILD_SUBREAPER = 36
# No real ancestry is this deep (a login session is a few dozen); a walk that
# gets here is a fork chain built to exhaust the check, and is refused.
_MAX_DEPTH = 1024


def become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    except (OSError, AttributeError) as exc:
        log.warning(
            "cannot become a child subreaper (%s); double-forked agent processes "
            "may escape the operator-socket check",
            exc,
        )
        return False
    return True


def peer_pid(sock: socket.socket) -> int | None:
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid, _uid, _gid = struct.unpack("3i", creds)
    return int(pid)


def inside_a_run(pid: int, daemon_pid: int | None = None) -> bool:
    """True when ``pid`` descends from a child of this daemon or carries a run's marker."""
    daemon_pid = daemon_pid or os.getpid()
    current = pid
    for _ in range(_MAX_DEPTH):
        if current == daemon_pid:
            return False
        if procfs.environ_names(current, MARKER_VAR):
            return True
        stat = procfs.stat(current)
        if stat is None:
            return True  # it vanished while we looked: fail closed
        parent = stat.ppid
        if parent == daemon_pid:
            return True  # a direct child of the daemon, or an orphan it adopted
        if parent <= 1:
            return False
        current = parent
    return True  # cannot decide: fail closed


def admit_operator_peer(sock: socket.socket) -> bool:
    """Fail closed: a peer we cannot see any more may have been a run's child.

    pid 0 is a peer in a PID namespace we cannot see into (a client in
    another container sharing the socket directory); our own descendants are
    always visible to us, so such a peer is admitted.
    """
    pid = peer_pid(sock)
    if pid == 0:
        return True
    if pid is None or not procfs.exists(pid):
        return False
    return not inside_a_run(pid)


def reap_adopted_orphans(tracked: Callable[[], set[int]]) -> int:
    """Collect zombies the subreaper inherited; never a child someone else waits for.

    Our own tools (git) share the daemon's process group and are waited for by
    the event loop; run children lead their own groups and are waited for by
    ProcessGroups (``tracked``).  Anything else that is our zombie was adopted.
    """
    if not _a_child_exited():
        # The common case, every second: no scan of every process on the host (on a
        # CI host with a few thousand, tens of milliseconds of the event loop's time).
        return 0
    me = os.getpid()
    own_group = os.getpgrp()
    reaped = 0
    watched = tracked()
    for pid in procfs.pids():
        stat = procfs.stat(pid)
        if stat is None or stat.ppid != me or stat.state != "Z":
            continue
        if stat.pgrp == own_group or pid in watched:
            continue
        try:
            os.waitpid(pid, os.WNOHANG)
            reaped += 1
        except ChildProcessError:
            pass
    return reaped


def _a_child_exited() -> bool:
    """Whether any child of ours is a zombie; none is collected (``WNOWAIT``), so the
    waiters of our own tools and of the run children still find theirs."""
    try:
        found = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # no child at all
        return False
    return found is not None
