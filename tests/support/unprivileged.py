"""Running a daemon as an unprivileged user from a test that runs as root.

The user is ``nobody`` (uid 65534).  What the daemon needs (the interpreter, the
virtualenv, the checkout, the installed agent CLIs) may sit under a folder only
root can enter (``/root`` is 0700, and pyenv's interpreter lives there), so the
daemon starts in a private mount namespace (``unshare --mount``) where each such
folder is covered by an empty tmpfs anyone may enter, and only the paths the
daemon needs are bound back in, read-only.  Nothing changes outside that
namespace: no mode on the host is touched, and nobody sees anything else of root's.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from collections.abc import Iterable
from pathlib import Path

NOBODY_UID = 65534
NOBODY_GID = 65534

# $1: uid, $2: gid, then BLOCKED KEEP... groups separated by "::", then "--", then argv.
# Every blocked folder is bound aside, covered by a 0755 tmpfs, and each kept path
# under it is bound back read-only onto an empty stand-in of its own kind.
_SCRIPT = r"""
set -eu
uid=$1; gid=$2; shift 2
aside=$(mktemp -d /tmp/sloop-aside.XXXXXX)
n=0
while [ "$1" != "--" ]; do
  blocked=$1; shift
  n=$((n + 1)); mkdir "$aside/$n"
  mount --bind "$blocked" "$aside/$n"
  mount -t tmpfs -o mode=0755 tmpfs "$blocked"
  while [ "$1" != "::" ]; do
    rel=$1; shift
    if [ -d "$aside/$n/$rel" ]; then mkdir -p "$blocked/$rel"
    else mkdir -p "$(dirname "$blocked/$rel")"; : > "$blocked/$rel"; fi
    mount --bind "$aside/$n/$rel" "$blocked/$rel"
    mount -o remount,bind,ro "$blocked/$rel"
  done
  shift
done
shift
# The binds outlive their source: the folder set aside is left empty on the host.
while [ "$n" -gt 0 ]; do umount -l "$aside/$n"; rmdir "$aside/$n"; n=$((n - 1)); done
rmdir "$aside"
exec setpriv --reuid="$uid" --regid="$gid" --clear-groups --inh-caps=-all -- "$@"
"""


def available() -> str | None:
    """Why an unprivileged daemon cannot be started here, or None when it can."""
    if os.geteuid() != 0:
        return "the tests do not run as root (they already run unprivileged)"
    for tool in ("unshare", "setpriv", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} is missing"
    return None


def _blocking_folder(path: Path, uid: int) -> Path | None:
    """The outermost folder above ``path`` that ``uid`` (not its owner) cannot enter."""
    for parent in reversed(path.parents):
        info = parent.stat()
        if info.st_uid != uid and not info.st_mode & stat.S_IXOTH:
            return parent
    return None


def prefix(needed: Iterable[Path], uid: int = NOBODY_UID, gid: int = NOBODY_GID) -> list[str]:
    """The argv prefix that runs a command as ``uid`` with ``needed`` paths reachable."""
    groups: dict[Path, set[str]] = {}
    for path in needed:
        for candidate in (path, path.resolve()):
            blocked = _blocking_folder(candidate, uid)
            if blocked is not None:
                first = candidate.relative_to(blocked).parts[0]
                groups.setdefault(blocked, set()).add(first)
    argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", _SCRIPT, "sh"]
    argv += [str(uid), str(gid)]
    for blocked, kept in sorted(groups.items()):
        argv += [str(blocked), *sorted(kept), "::"]
    return [*argv, "--"]


def interpreter_paths() -> list[Path]:
    """What ``python -m sloopd`` needs: the interpreter, its virtualenv, the checkout."""
    checkout = Path(__file__).resolve().parents[2]
    return [Path(sys.executable), Path(sys.prefix), Path(sys.base_prefix), checkout]


def hand_over(root: Path, uid: int = NOBODY_UID, gid: int = NOBODY_GID) -> None:
    """Give the test's folder tree to ``uid``: the daemon writes its state there."""
    os.chown(root, uid, gid)
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(folder, name), uid, gid)
