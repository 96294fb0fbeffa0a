"""Whether the service manager's hardening is in force around this daemon.

Why: systemd applies the unit's file-system hardening (``ProtectSystem=full``:
``/usr`` and ``/etc`` read-only; ``PrivateTmp=yes``) by setting up a mount namespace,
and where it cannot (systemd as PID 1 of a container without ``CAP_SYS_ADMIN``) it
starts the service without it and says so only at debug level (seen with systemd 252,
issue 37).  The daemon reads its own mount table once at start and reports what it
found (``daemon.service``, additive in 0.9.0); ``sloopctl doctor`` warns when a daemon
systemd started has ``/usr`` or ``/etc`` writable.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

# What deploy/systemd/sloopd@.service's ProtectSystem=full makes read-only.
READ_ONLY_EXPECTED: Final = ("/usr", "/etc")
MOUNTINFO: Final = Path("/proc/self/mountinfo")


def _unescape(field: str) -> str:
    # mountinfo writes space, tab, newline and backslash as octal escapes.
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def mounts(text: str) -> dict[str, tuple[str, ...]]:
    """Mount point -> its per-mount options (the last mount of a point wins)."""
    found: dict[str, tuple[str, ...]] = {}
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) >= 6:
            found[_unescape(fields[4])] = tuple(fields[5].split(","))
    return found


def covering(table: Mapping[str, tuple[str, ...]], path: str) -> str:
    """The mount point ``path`` lies on: the longest one that is a prefix of it."""
    best = "/"
    for point in table:
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best = point
    return best


def service(
    environ: Mapping[str, str] | None = None, mountinfo: str | None = None
) -> dict[str, Any]:
    """``{"manager", "writable", "private_tmp"}``: ``manager`` is ``"systemd"`` when systemd
    started this process (it sets ``INVOCATION_ID`` for a service), else null; ``writable``
    the paths of ``READ_ONLY_EXPECTED`` on a read-write mount; ``private_tmp`` whether
    ``/tmp`` is a mount of its own.  Null fields when the mount table cannot be read."""
    env = os.environ if environ is None else environ
    manager = "systemd" if env.get("INVOCATION_ID") else None
    if mountinfo is None:
        try:
            mountinfo = MOUNTINFO.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return {"manager": manager, "writable": None, "private_tmp": None}
    table = mounts(mountinfo)
    writable = [p for p in READ_ONLY_EXPECTED if "ro" not in table.get(covering(table, p), ())]
    return {"manager": manager, "writable": writable, "private_tmp": covering(table, "/tmp") != "/"}


@functools.cache
def this_daemon() -> dict[str, Any]:
    """``service()`` of this process, read once: mounts do not change under a running
    daemon, and the dashboard's head is built from it."""
    return service()
