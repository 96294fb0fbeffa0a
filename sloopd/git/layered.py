"""A copy-on-write checkout: a stage's own layer over shared trees, and what it left there.

``make`` gives an execution a fresh writable layer (``up/``, overlayfs's ``w/``)
over the chain of shared layers of its commit (``sloopd.git.shared_trees``): the
only files written are the run's ``.git/HEAD`` and its branch ref, so a stage
starts in O(1) whatever the tree's size.  The checkout's folder itself stays an
empty mount point on the host; the merged view exists only in the namespaces of
the commands that mount it (``sloopd.proc.overlay``).

After the child, what it changed is read from its layer, not by a status over the
whole tree: ``changes`` walks ``up/`` (O(what the stage wrote), never following a
link), and ``git_untouched`` says whether the stage left the checkout's ``.git``
exactly as made (then its branch is still the commit it started from, and nothing
need be fetched).  The layer is thrown away with the execution: set aside in O(1).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sloopd.git import checkout, runner
from sloopd.git.checkout import CheckoutError, Isolation
from sloopd.git.shared_trees import SharedTrees
from sloopd.proc.overlay import Overlay, is_whiteout
from sloopd.proc.sandbox import CHECKOUT_PATH, Mount, SandboxSpec, command

log = logging.getLogger(__name__)

# Paths of a stage's layer read back by name at most; past it the daemon lists the
# checkout the slow way (a status over every file).
MAX_CHANGES = 4096
# A kept checkout of a tree this small is copied before its run settles; a larger one
# after (its copy costs the tree: seconds at 100,000 files).
KEEP_AT_ONCE = 5_000
# Where ``copy_out`` sees the folder it fills.
KEEP_PATH = "/sloop/keep"


@dataclass(frozen=True, slots=True)
class Layered:
    """One execution's checkout: the commit it was made from, its chain, its layer."""

    commit: str
    chain: tuple[str, ...]
    overlay: Overlay
    place: Path  # the folder holding up/ and w/, set aside with the execution

    @property
    def upper(self) -> Path:
        return self.overlay.upper


def _git_files(branch: str, commit: str) -> dict[str, bytes]:
    return {"HEAD": f"ref: refs/heads/{branch}\n".encode(),
            f"refs/heads/{branch}": f"{commit}\n".encode()}  # fmt: skip


async def make(
    trees: SharedTrees, places: Path, branch: str, commit: str, near: tuple[str, ...] = ()
) -> Layered:
    """A fresh layer at ``commit`` on ``branch`` in a new folder under ``places``."""
    chain = await trees.hold(commit, near)
    try:
        place = places / uuid.uuid4().hex[:12]
        upper, work = place / "up", place / "w"
        for name, content in _git_files(branch, commit).items():
            path = upper / ".git" / name
            path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
            path.write_bytes(content)
        work.mkdir(mode=0o700)
    except BaseException:
        trees.release(chain)
        raise
    return Layered(commit, chain, Overlay(trees.root, trees.lower(chain), upper, work), place)


def git_untouched(layered: Layered, branch: str) -> bool:
    """Whether the stage left the checkout's ``.git`` as ``make`` wrote it: nothing in
    its layer under ``.git`` but the folders and the two files made there, unchanged.
    Anything else (an object, a ref, a config copied up, a link) and the work is
    fetched as from any checkout."""
    mine = _git_files(branch, layered.commit)
    folders = {""} | {os.path.dirname(name) for name in mine}
    for name in list(folders):
        while name:
            name = os.path.dirname(name)
            folders.add(name)
    root = layered.upper / ".git"
    seen: set[str] = set()
    for top, dirs, files in os.walk(root):
        relative = os.path.relpath(top, root)
        relative = "" if relative == "." else relative
        if relative not in folders or os.path.islink(top):
            return False
        for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            path = os.path.join(relative, name) if relative else name
            if path not in mine:
                return False
            try:
                descriptor = os.open(os.path.join(top, name), os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                return False
            with os.fdopen(descriptor, "rb") as handle:
                if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                    return False
                if handle.read(len(mine[path]) + 1) != mine[path]:
                    return False
            seen.add(path)
    return seen == set(mine)


def changes(layered: Layered, limit: int = MAX_CHANGES) -> tuple[str, ...] | None:
    """Every path the stage's layer holds outside ``.git``: a file or link it wrote, a
    whiteout (deleted), a folder it made over a shared one's place (named itself: the
    shared files under it are gone).  Folders merged with shared ones are walked into;
    a link is never followed.  None when more than ``limit``."""
    found: list[str] = []
    lowers = [layered.overlay.root / name for name in layered.overlay.lower]
    todo = [""]
    while todo:
        relative = todo.pop()
        try:
            entries = list(os.scandir(layered.upper / relative))
        except OSError:
            continue
        for entry in entries:
            path = f"{relative}/{entry.name}" if relative else entry.name
            if path == ".git":
                continue
            if entry.is_dir(follow_symlinks=False):
                if not _opaque(entry.path) and _shared_folder(lowers, path):
                    todo.append(path)  # merged with the shared folder: what changed inside
                    continue
                found.append(path)  # replaced or new: named whole
                todo.append(path)
            else:
                found.append(path)
            if len(found) > limit:
                return None
    return tuple(found)


def _opaque(path: str) -> bool:
    for name in ("user.overlay.opaque", "trusted.overlay.opaque"):
        try:
            if os.getxattr(path, name, follow_symlinks=False) == b"y":
                return True
        except OSError:
            continue
    return False


def _shared_folder(lowers: list[Path], path: str) -> bool:
    """Whether the layers under hold ``path`` as a folder (the top one that has it)."""
    for lower in lowers:
        candidate = lower / path
        if is_whiteout(candidate):
            return False
        try:
            mode = os.lstat(candidate).st_mode
        except OSError:
            continue
        return stat.S_ISDIR(mode)
    return False


def removed(layered: Layered, checkout: Path) -> str | None:
    """``checkout_edits.removed``'s sentence for a layered checkout: None while its
    ``.git`` is there (a ``.git`` turned into a file is refused later, by git)."""
    git = layered.upper / ".git"
    if not is_whiteout(git):
        return None
    shared: set[str] = set()
    hidden: set[str] = set()  # deleted by a layer above the one that has it
    for lower in layered.overlay.lower:
        with os.scandir(layered.overlay.root / lower) as entries:
            for entry in entries:
                if entry.name not in shared and entry.name not in hidden:
                    gone = is_whiteout(Path(entry.path))
                    (hidden if gone else shared).add(entry.name)
    with os.scandir(layered.upper) as entries:
        left = [e.name for e in entries if not is_whiteout(Path(e.path))]
    if not left and all(is_whiteout(layered.upper / name) for name in shared - {".git"}):
        return (
            f"the stage removed its checkout {checkout} (every file and its .git), "
            "so there is no work to bring back"
        )
    git_dir = checkout / ".git"
    return f"the stage removed its checkout's .git ({git_dir}), so its work cannot be read"


async def copy_out(made: Layered, worktree: Path, isolation: Isolation) -> None:
    """The merged view copied whole into ``worktree``, by ``cp -a`` in the sandbox (the
    files are the agent's: links stay links, nothing is followed on the host)."""
    view = made.place / "view"
    view.mkdir(mode=0o700, exist_ok=True)
    spec = SandboxSpec(
        checkout=view, home=isolation.home, objects=isolation.objects, hide=isolation.hide,
        network=False, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        checkout_writable=False, overlay=made.overlay,
        rw_mounts=(Mount(worktree, KEEP_PATH, writable=True),),
    )  # fmt: skip
    copy = ["cp", "-a", "--", f"{CHECKOUT_PATH}/.", f"{KEEP_PATH}/"]
    argv = ["nice", "-n", "19", *command(spec, copy)]  # a person's copy: last in line
    done = await checkout.run_bounded(argv, timeout=runner.CHECKOUT_S, what=f"keeping {worktree}")
    if done.returncode != 0:
        raise CheckoutError(f"cannot keep {worktree}: {checkout.git_reason(done.stderr)}.")


async def record(repo: Path, sha: str, refs: tuple[str, ...], *, timeout: float) -> None:
    """Move ``refs`` to ``sha`` in one transaction: the commit the checkout was made
    from, which the stage left as it was (``git_untouched``: nothing to fetch or check)."""
    for ref in refs:
        await checkout.check_ref(ref, timeout)
    moves = "".join(f"update {ref} {sha}\n" for ref in refs)
    what = f"recording {refs[0]}"
    done = await checkout.run_bounded(
        ["git", "-C", str(repo), "update-ref", "-m", "sloop: bring back", "--stdin"],
        timeout=timeout, what=what, stdin=moves.encode(),
    )  # fmt: skip
    if done.returncode != 0:
        raise CheckoutError(f"{what} failed: {checkout.git_reason(done.stderr)}.")


class Keeper:
    """Whole copies of settled runs' last checkouts of large trees, made one at a time
    off the runs' path (``nice`` 19): such a run settles at once, and its checkout
    folder fills after.  A copy still waiting or running when its folder is removed
    (the ticket's next attempt, ``gc``) or the daemon stops is cancelled; its chain of
    shared trees is held until then."""

    def __init__(self, release: Callable[[Layered], None]) -> None:
        self._release = release
        self._slot = asyncio.Semaphore(1)
        self._copies: dict[Path, tuple[asyncio.Task[None], Layered]] = {}

    def keep(self, made: Layered, worktree: Path, isolation: Isolation) -> None:
        task = asyncio.get_running_loop().create_task(self._copy(made, worktree, isolation))
        self._copies[worktree] = (task, made)

    async def _copy(self, made: Layered, worktree: Path, isolation: Isolation) -> None:
        try:
            async with self._slot:
                await copy_out(made, worktree, isolation)
        except (CheckoutError, OSError) as exc:
            log.warning("the checkout %s could not be kept whole: %s", worktree, exc)
        finally:
            self._done(worktree)

    def _done(self, worktree: Path) -> None:
        """The trees of ``worktree``'s copy let go, once (a task cancelled before it
        began never reaches its own ``finally``)."""
        entry = self._copies.pop(worktree, None)
        if entry is not None:
            self._release(entry[1])

    async def cancel(self, worktree: Path) -> None:
        """No copy into ``worktree`` goes on (it is about to be removed)."""
        entry = self._copies.get(worktree)
        if entry is not None:
            entry[0].cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await entry[0]
            self._done(worktree)

    def stop(self) -> None:
        for worktree, (task, _made) in list(self._copies.items()):
            task.cancel()
            self._done(worktree)

    async def settled(self) -> None:
        """Every copy asked for so far is made (tests, and a daemon that waits for them)."""
        while self._copies:
            await asyncio.gather(*(t for t, _m in self._copies.values()), return_exceptions=True)
