"""Deleting a folder an agent wrote: never following its symlinks, undoing its chmods.

A run's checkout and HOME are written by code we do not trust.  By the time the
daemon deletes one, the agent is gone (its namespace died with it), so nothing races
the walk; what remains is what it left: symlinks pointing anywhere (``rmtree`` removes
a link, never its target), folders it made unwritable (put back to 0700 first, unless
the daemon is root and needs no permission).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
from pathlib import Path


class NotAFolder(Exception):
    """The path is a symlink or a file where a folder the daemon made should be."""


def _remove(path: Path) -> None:
    if os.geteuid() != 0:
        os.chmod(path, stat.S_IRWXU)
        for parent, dirs, _ in os.walk(path):
            for name in dirs:
                if not os.path.islink(os.path.join(parent, name)):
                    os.chmod(os.path.join(parent, name), stat.S_IRWXU)
    shutil.rmtree(path)


def remove_blocking(path: Path) -> None:
    """Delete ``path`` and everything in it; one already gone is fine."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink() or not path.is_dir():
        raise NotAFolder(f"refusing to delete {path}: it is not a directory.")
    _remove(path)


async def remove(path: Path) -> None:
    """``remove_blocking`` off the event loop (a large checkout takes a while)."""
    await asyncio.to_thread(remove_blocking, path)
