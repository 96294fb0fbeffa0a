"""Copy-on-write checkouts: a kernel overlay of shared trees, in a mount namespace of its own.

A stage's checkout is a stack: read-only trees the daemon made once (``lower``, top
first; ``sloopd.git.shared_trees``) and the execution's own writable layer
(``upper``, with overlayfs's ``work`` folder beside it).  bubblewrap 0.8 has no
overlay option, so the command that runs in the checkout is started as
``unshare`` → ``sh`` (mount the overlay on the checkout's folder, then ``exec``) →
bwrap → the command: the merged view exists only in that namespace, dies with it,
and is what bwrap binds at ``/sloop/work``.  Whatever the command writes lands in
``upper`` (a whiteout for what it deletes); the shared trees are never written, and
nothing outside the namespace sees the mount.

Two ways in, by who the daemon is:

- **root**: ``unshare --mount`` (no user namespace) and a plain overlay, so bwrap
  and the child run exactly as in a full checkout;
- **any other user**: ``unshare --user --map-root-user --mount`` and the overlay with
  ``userxattr`` (the kernel allows it in a user namespace since 5.11); bwrap then makes
  a user namespace of its own in which the child is the daemon's uid again
  (``--uid``/``--gid``), so the files it sees and writes are the daemon user's, an
  agent CLI that refuses to run as root runs, and an index the daemon wrote matches.

The same pid runs from ``unshare`` to bwrap (each ``exec``s the next; ``mount`` is
the only fork, awaited), so a child's process group, marker and exit status are
bwrap's as without an overlay.  ``probe`` tries the whole chain once, as a stage
would; where it fails the daemon makes full checkouts instead and says why.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

# The lower layers are named relative to ``root`` (the overlay's options are one page,
# 4,096 bytes; a stack of absolute paths ran out of it at about forty layers).
_MOUNT = 'cd "$1" && mount -n -t overlay sloop -o "$2" "$3" && shift 3 && exec "$@"'
# What overlayfs reads as separators in its options, or git in a path it is given.
_UNSAFE = frozenset(",:\\\n")


@dataclass(frozen=True, slots=True)
class Overlay:
    """A checkout made of layers.

    ``lower``: the shared trees, top first, as names under ``root``; ``upper`` and
    ``work``: the execution's own folders (same file system as ``root``).  A reader
    (``writable=False`` in ``prefix``) stacks ``upper`` on top as one more read-only
    layer: what the stage left, seen exactly as the stage saw it, changed by nothing.
    """

    root: Path
    lower: tuple[str, ...]
    upper: Path
    work: Path


def rootful() -> bool:
    """Whether the daemon mounts as real root (no user namespace needed)."""
    return os.geteuid() == 0


def usable_path(path: Path) -> bool:
    """Whether ``path`` can be named in an overlay's options."""
    return not any(ch in _UNSAFE for ch in str(path))


def options(overlay: Overlay, *, writable: bool) -> str:
    lower = ":".join(overlay.lower)
    if writable:
        said = f"lowerdir={lower},upperdir={overlay.upper},workdir={overlay.work}"
    else:
        said = f"lowerdir={overlay.upper}:{lower}"
    # Off, whatever the kernel's defaults: a layer is read by later mounts, and none of
    # these may make one layer point into another (a redirect, a metadata-only copy).
    # ``userxattr`` allows no redirect at all (naming one is refused as a conflict).
    said += ",metacopy=off,index=off"
    return said + ",redirect_dir=off" if rootful() else said + ",userxattr"


def prefix(overlay: Overlay, at: Path, *, writable: bool) -> list[str]:
    """The argv that mounts ``overlay`` at ``at`` in a new mount namespace and ``exec``s
    what follows it (bwrap's argv)."""
    if rootful():
        namespaces = ["unshare", "--mount", "--propagation", "private"]
    else:
        namespaces = ["unshare", "--user", "--map-root-user", "--mount"]
    said = options(overlay, writable=writable)
    return [*namespaces, "sh", "-c", _MOUNT, "sh", str(overlay.root), said, str(at)]


def bwrap_user() -> list[str]:
    """bwrap's user-namespace flags inside the overlay's namespace: the child runs as the
    daemon's uid and gid (outside it, root's namespace holds no one else)."""
    if rootful():
        return []
    return ["--unshare-user", "--uid", str(os.getuid()), "--gid", str(os.getgid())]


def missing_tools() -> str | None:
    """What of the chain this host lacks, in one sentence; None when all is there."""
    for tool in ("unshare", "mount", "sh"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (util-linux)"
    return None


def is_whiteout(path: Path) -> bool:
    """Whether ``path`` (in an upper layer) is overlayfs's mark of a deleted entry: a
    character device 0/0."""
    try:
        found = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISCHR(found.st_mode) and found.st_rdev == 0
