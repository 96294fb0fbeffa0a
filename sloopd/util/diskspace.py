"""Free space on the filesystem that holds a path, as an unprivileged writer sees it.

The store and the runs' checkouts share the state directory's filesystem; what the
daemon writes there is weighed against this figure (``sloopd.core.logroom``) and a
start on a disk with no room left is refused (``sloopd.server``).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

# The errors that mean "no room" rather than "this write is wrong": a full
# filesystem, or the writer's quota spent.
NO_ROOM_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# The same errors as a program prints them (strerror, as git does: "fatal: unable to
# write new index file: No space left on device"), in the C locale the daemon's gits use.
NO_ROOM_WORDS = tuple(os.strerror(code).lower() for code in sorted(NO_ROOM_ERRNOS))


@dataclass(frozen=True, slots=True)
class Space:
    """One reading of a filesystem: what may still be written, and its size."""

    free: int  # f_bavail: root's reserved blocks are not ours to spend
    size: int
    # No new file can be made (f_favail 0 of a limited f_files; a filesystem that
    # reports no inode count has no such limit), however many bytes are free.
    no_inodes: bool = False


def space_of(path: Path) -> Space | None:
    """The filesystem holding ``path`` (or its nearest existing parent); None if unreadable.

    The nearest parent, because the state directory may not exist yet at start-up:
    it will be created on that filesystem.
    """
    candidate = path
    while True:
        try:
            stats = os.statvfs(candidate)
        except FileNotFoundError:
            if candidate.parent == candidate:
                return None
            candidate = candidate.parent
            continue
        except OSError:
            return None
        no_inodes = stats.f_files > 0 and stats.f_favail == 0
        return Space(stats.f_bavail * stats.f_frsize, stats.f_blocks * stats.f_frsize, no_inodes)


def is_no_room(exc: BaseException) -> bool:
    """Whether ``exc`` is the kernel refusing a write for want of space."""
    return isinstance(exc, OSError) and exc.errno in NO_ROOM_ERRNOS


def says_no_room(text: str) -> bool:
    """Whether a program's message names one of the no-room errors."""
    lowered = text.lower()
    return any(words in lowered for words in NO_ROOM_WORDS)


def mount_of(path: Path) -> Path:
    """The mount point of the filesystem holding ``path`` (or its nearest existing parent)."""
    candidate = Path(os.path.abspath(path))
    while not candidate.exists() and candidate.parent != candidate:
        candidate = candidate.parent
    while candidate.parent != candidate and not os.path.ismount(candidate):
        candidate = candidate.parent
    return candidate
