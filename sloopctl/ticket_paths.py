"""What ``post`` sends for a ticket file: its path relative to its repository's root and
the digest of what it holds.

Why relative: the daemon may see the repository at another path than this shell does
(a container serving the host folder mounted at ``/repo``); an absolute host path is
outside the repository there.  Why the digest: a relative path names a file in whichever
repository the daemon serves, so a file posted from another repository would name
another file there, or none; with the digest the daemon refuses that instead of posting
what it found (docs/tickets.md, "Posting from another path").
"""

from __future__ import annotations

import functools
import hashlib
import os
import stat
import subprocess
from pathlib import Path
from typing import Final

# Larger than any ticket the daemon takes (repo.max_ticket_bytes, 1 MiB by default):
# past this the path goes without its digest and the daemon refuses the size.
DIGEST_MAX_BYTES: Final = 64 << 20


def posted(path: str) -> tuple[str, str | None]:
    """(the path to send, its SHA-256 or None).

    Only the directory is resolved, so a symlinked ticket keeps its own name.  Outside
    any repository, or unreadable here, the absolute path goes as before: the daemon
    says why it refuses it.
    """
    absolute = os.path.abspath(path)
    folder = os.path.realpath(os.path.dirname(absolute))
    absolute = os.path.join(folder, os.path.basename(absolute))
    root = outermost_root(folder) if os.path.isdir(folder) else None
    if root is None or os.path.commonpath([root, absolute]) != root:
        return absolute, None
    relative = Path(os.path.relpath(absolute, root)).as_posix()
    return relative, _digest(absolute)


@functools.lru_cache(maxsize=64)
def outermost_root(folder: str) -> str | None:
    """The work tree ``folder`` is in; for a submodule's file, its superproject's (the
    repository whose daemon it is posted to, as when the path went absolute).  Only
    submodules climb: a repository that merely sits inside another work tree (a project
    under a home directory kept in git) is its own."""
    where: str | None = folder
    root = None
    while where is not None:
        try:
            done = subprocess.run(
                ["git", "rev-parse", "--show-superproject-working-tree", "--show-toplevel"],
                cwd=where,
                capture_output=True,
                text=True,
                check=False,
            )
        except OSError:
            return root
        lines = done.stdout.splitlines()
        if done.returncode != 0 or not lines:
            return root
        root = os.path.realpath(lines[-1])
        where = lines[0] if len(lines) == 2 else None
    return root


def _digest(path: str) -> str | None:
    """The file's SHA-256; None for what is not a regular file of a sane size (a FIFO
    in its place neither blocks the open nor is read)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(descriptor, "rb", buffering=0) as handle:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode) or status.st_size > DIGEST_MAX_BYTES:
            return None
        digest = hashlib.sha256()
        try:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        except OSError:
            return None
    return digest.hexdigest()
