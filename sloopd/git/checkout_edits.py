"""What the daemon itself does inside a run's checkout: status, the auto-commit, and
whether the stage left a checkout to read at all.

Every one of these runs hardened git in the checkout's sandbox (see
``sloopd.git.checkout``: once an agent has run, the checkout is hostile), so
a hook, filter or fsmonitor the agent planted runs nothing on the host; status and
the auto-commit read the files through a git directory of the daemon's own (below),
so nothing the agent set decides what they see.  ``sync`` needs no checkout at all: its
merge or rebase is computed in the daemon's scratch repository (``sloopd.git.scratch``).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from sloopd.git.checkout import (
    CheckoutError,
    Isolation,
    git_reason,
    hardened_git,
    in_checkout,
    run_bounded,
    upload_pack_command,
)
from sloopd.proc.sandbox import HOME_PATH

# The daemon's own view of a checkout's files.  After an agent ran, the checkout's
# ``.git`` is the agent's: its config names filters, its ``info/exclude`` and
# ``core.excludesFile`` hide files, its index carries skip-worktree bits.  So the
# daemon reads the files through a git directory it makes itself, in its own git
# HOME, whose ``objects`` is the checkout's object store (new objects land where
# bring-back fetches them): an index built there obeys nothing the agent set.  Only
# the branch tip is read from the agent's refs (rev-parse runs no program), and the
# auto-commit moves that ref by compare-and-swap with hooks off.
_SHADOW = """set -e
work="$PWD"; shadow="$HOME/.sloop-shadow"; mode="$1"; branch="$2"
parent=$({git} --git-dir="$work/.git" rev-parse --verify --quiet "refs/heads/$branch^{{commit}}")
rm -rf "$shadow"
{git} init -q --bare --template= "$shadow"
rm -rf "$shadow/objects"; ln -s "$work/.git/objects" "$shadow/objects"
view() {{ {git} --git-dir="$shadow" --work-tree="$work" --literal-pathspecs "$@"; }}
view read-tree "$parent"
if [ -n "${{4:-}}" ]; then view add -A --pathspec-from-file="$4" --pathspec-file-nul
else view add -A; fi
if [ "$mode" = list ]; then view diff --cached --name-only -z "$parent"; exit 0; fi
if view diff --cached --quiet "$parent"; then exit 3; fi
commit=$(view commit-tree "$(view write-tree)" -p "$parent" -m "$3")
{git} --git-dir="$work/.git" update-ref "refs/heads/$branch" "$commit" "$parent"
"""


def _shadow_script() -> str:
    return _SHADOW.format(git=shlex.join(hardened_git()))


async def uncommitted(
    checkout: Path, branch: str, isolation: Isolation, *, timeout: float
) -> list[str]:
    """Paths that differ from the branch tip (untracked included, ignored not), as the
    daemon's own index sees them; the checkout's config, excludes and index play no part."""
    require_present(checkout)
    argv, run_env, cwd = in_checkout(
        checkout, ["sh", "-c", _shadow_script(), "sh", "list", branch], isolation, None
    )
    done = await run_bounded(
        argv, timeout=timeout, what=f"reading {checkout}", env=run_env, cwd=cwd
    )
    if done.returncode != 0:
        raise CheckoutError(f"cannot read the files of {checkout}: {git_reason(done.stderr)}.")
    return [item for item in done.stdout.split("\0") if item]


def removed(checkout: Path) -> str | None:
    """What a stage removed of its checkout, as the reason its work cannot be read; None
    while its ``.git`` is there (a ``.git`` turned into something else is refused later,
    by the git that reads it).  An agent may delete anything in its checkout, and git's
    "not a git repository" would name a path inside the sandbox, not the cause."""
    git_dir = checkout / ".git"
    if os.path.lexists(git_dir):
        return None
    try:
        with os.scandir(checkout) as entries:
            empty = next(entries, None) is None
    except FileNotFoundError:
        return f"the stage removed its checkout {checkout}, so there is no work to bring back"
    except NotADirectoryError:
        return f"the stage replaced its checkout {checkout}, so there is no work to bring back"
    if empty:
        return (
            f"the stage removed its checkout {checkout} (every file and its .git), "
            "so there is no work to bring back"
        )
    return f"the stage removed its checkout's .git ({git_dir}), so its work cannot be read"


def require_present(checkout: Path) -> None:
    """``CheckoutError`` with ``removed``'s reason when the stage removed its checkout."""
    gone = removed(checkout)
    if gone is not None:
        raise CheckoutError(gone)


# The same view for a checkout served read-only, run before ``upload-pack`` in the
# sandbox that serves the bring-back (one sandbox for both, not two): the daemon's git
# directory borrows the checkout's objects through an alternates line instead of taking
# them over, so what ``add`` hashes lands in the daemon's git HOME, never in the checkout.
# The list goes to a file in that HOME (standard output is the fetch's protocol), at
# most ``LISTED_BYTES`` of it; a second, empty file says every step passed (written by
# the shell itself: no process).  What the listing's gits print on standard error is
# the fetch's standard error, which the daemon reads bounded like any git's: written
# to a file of the state directory, an agent's repository made it hundreds of MiB
# (a git error per line of a 96 MiB alternates file, for each git of the listing).
# The shadow git directory both listings start from, and how they end: the list and
# the file that says it is whole.
_LIST_START = """list() {{
work="$PWD"; shadow="$HOME/.sloop-shadow"
parent=$({git} --git-dir="$work/.git" rev-parse --verify --quiet \
  "refs/heads/$SLOOP_BRANCH^{{commit}}") || return 1
rm -rf "$shadow" || return 1
{git} init -q --bare --template= "$shadow" || return 1
printf '%s\\n' "$work/.git/objects" > "$shadow/objects/info/alternates" || return 1
"""
_LIST_END = """}}
list < /dev/null > "$HOME/{listed}" || exit 3
: > "$HOME/{whole}" || exit 3
"""
_LISTING = (
    _LIST_START
    + """view() {{ {git} --git-dir="$shadow" --work-tree="$work" "$@"; }}
view read-tree "$parent" || return 1
view add -A || return 1
{{ view diff --cached --name-only -z "$parent"; echo $? > "$shadow/diffed"; }} | head -c {cap}
read diffed < "$shadow/diffed" || return 1
[ "$diffed" = 0 ] || [ "$diffed" = 141 ]  # 141: SIGPIPE, the list past its cap
"""
    + _LIST_END
)
# The same list for a copy-on-write checkout, over the paths its layer holds only
# (``sloopd.git.layered.changes``, in ``_PATHS`` of the git HOME, NUL-separated) and
# those the stage's commits changed: a status limited to them (untracked included,
# ignored not), its lines ``XY path`` read back by ``listed``.  Nothing outside those
# paths is read, so the listing costs what the stage wrote, not the tree.
_LISTING_PATHS = (
    _LIST_START
    + """{git} --git-dir="$shadow" read-tree "$parent" || return 1
{git} --git-dir="$shadow" update-ref --no-deref HEAD "$parent" || return 1
{{ cat "$HOME/{paths}" && {git} --git-dir="$work/.git" diff-tree -r -z --name-only \
  --no-renames "$SLOOP_START" "$parent"; }} > "$shadow/paths" || return 1
{{ xargs -0 -r {git} --git-dir="$shadow" --work-tree="$work" --literal-pathspecs \
  status --porcelain -z --untracked-files=all --no-renames -- < "$shadow/paths"
  echo $? > "$shadow/diffed"; }} | head -c {cap}
read diffed < "$shadow/diffed" || return 1
[ "$diffed" = 0 ] || [ "$diffed" = 125 ]  # 125: xargs's git killed by SIGPIPE, past the cap
"""
    + _LIST_END
)
_PATHS = ".sloop-paths"

# The names of what an agent left are listed up to this many bytes, the rest dropped.
LISTED_BYTES = 16 * 1024 * 1024
_LISTED, _WHOLE = ".sloop-left", ".sloop-left.ok"


def listing_upload_pack(
    checkout: Path,
    branch: str,
    isolation: Isolation,
    *,
    only: tuple[str, Sequence[str]] | None = None,
) -> list[str]:
    """``checkout.upload_pack_command`` that lists what differs from ``branch``'s tip first
    (``uncommitted``'s answer, read back by ``listed``); call ``unlisted`` before it runs.

    ``only``: (the commit the stage started from, the paths its layer holds): a
    copy-on-write checkout, listed over those paths alone."""
    git = shlex.join(hardened_git())
    env = {"SLOOP_BRANCH": branch}
    if only is None:
        before = _LISTING.format(git=git, listed=_LISTED, whole=_WHOLE, cap=LISTED_BYTES)
    else:
        start, paths = only
        (isolation.home / _PATHS).write_bytes(b"".join(p.encode() + b"\0" for p in paths))
        env["SLOOP_START"] = start
        before = _LISTING_PATHS.format(
            git=git, listed=_LISTED, whole=_WHOLE, cap=LISTED_BYTES, paths=_PATHS
        )
    return upload_pack_command(checkout, isolation, before=before, env=env)


def unlisted(isolation: Isolation) -> None:
    """No list of an earlier bring-back is left to be read as this one's."""
    for name in (_LISTED, _WHOLE):
        (isolation.home / name).unlink(missing_ok=True)


def listed(
    checkout: Path, isolation: Isolation, said: str = "", *, status: bool = False
) -> list[str]:
    """What ``listing_upload_pack`` found, or ``uncommitted``'s error when it could not
    (``said``: what the fetch that ran the listing printed, the listing's errors in it)."""
    whole = _read_own(isolation.home / _WHOLE) is not None
    found = _read_own(isolation.home / _LISTED) if whole else None
    if found is None:
        if isolation.overlay is None:  # a layered one was looked at in its layer
            require_present(checkout)
        raise CheckoutError(f"cannot read the files of {checkout}: {git_reason(said)}.")
    items = found.decode(errors="replace").split("\0")
    if len(found) >= LISTED_BYTES:
        items.pop()  # cut at the cap: the last name is a part of one
    if status:  # ``XY path`` lines, a path once however many pathspecs named it
        return list(dict.fromkeys(item[3:] for item in items if len(item) > 3))
    return [item for item in items if item]


def _read_own(path: Path) -> bytes | None:
    """A file the daemon's script wrote in its git HOME, at most ``LISTED_BYTES`` of it;
    never followed through a link."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(descriptor, "rb") as handle:
        return handle.read(LISTED_BYTES)


def _identity_env(identity: tuple[str, str]) -> dict[str, str]:
    name, email = identity
    env: dict[str, str] = {}
    for role in ("AUTHOR", "COMMITTER"):
        env[f"GIT_{role}_NAME"], env[f"GIT_{role}_EMAIL"] = name, email
    return env


async def commit_all(
    checkout: Path,
    branch: str,
    message: str,
    isolation: Isolation,
    *,
    identity: tuple[str, str],
    timeout: float,
    only: Sequence[str] | None = None,
) -> bool:
    """Commit every file on the branch (``commit = "auto"``), built in the daemon's own
    index and config; False when there was nothing to commit.

    ``only``: the paths the listing found changed (a copy-on-write checkout's): only
    those are read and hashed, the rest of the tree is the branch's as it is."""
    if isolation.overlay is None:  # a layered one was looked at in its layer
        require_present(checkout)
    script = ["sh", "-c", _shadow_script(), "sh", "commit", branch, message]
    if only is not None:
        (isolation.home / _PATHS).write_bytes(b"".join(p.encode() + b"\0" for p in only))
        script.append(f"{HOME_PATH}/{_PATHS}" if isolation.bwrap else str(isolation.home / _PATHS))
    argv, run_env, cwd = in_checkout(checkout, script, isolation, _identity_env(identity))
    done = await run_bounded(
        argv, timeout=timeout, what=f"committing in {checkout}", env=run_env, cwd=cwd
    )
    if done.returncode == 3:
        return False
    if done.returncode != 0:
        raise CheckoutError(f"cannot commit in {checkout}: {git_reason(done.stderr)}.")
    return True
