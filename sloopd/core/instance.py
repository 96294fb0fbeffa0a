"""This daemon's instance id: random, made once, kept in its state directory.

A Ray node keeps one cache of each daemon's repository (``sloopd.remote.room``),
and whatever names that cache decides who shares it.  ``hostname:repository
path`` was shared by two daemons in containers with the same host name and path,
so one's agents could read the other's objects.  A random id that lives with the
state directory is the daemon's own: another state directory has another, and a
restart keeps it (the node's cache stays warm).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from pathlib import Path

FILE_NAME = "instance-id"
_ID = re.compile(r"[0-9a-f]{32}")


def instance_id(state_dir: Path) -> str:
    """The id kept in ``state_dir``; one is made (atomically, 0600) if none is there."""
    path = state_dir / FILE_NAME
    found = _read(path)
    if found is not None:
        return found
    made = secrets.token_hex(16)
    staging = state_dir / f".{FILE_NAME}-{made}"
    staging.write_text(made + "\n", encoding="ascii")
    staging.chmod(0o600)
    try:
        # link, not rename: of two daemons racing on a fresh directory (the second is
        # refused its lock later), the first id stays and both read it.
        os.link(staging, path)
    except FileExistsError:
        # An unreadable or malformed one is replaced: a new id only costs the node
        # caches their warm objects.
        if _read(path) is None:
            os.replace(staging, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            staging.unlink()
    found = _read(path)
    if found is None:
        raise OSError(f"cannot keep this daemon's instance id in {path}")
    return found


def _read(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text if _ID.fullmatch(text) else None
