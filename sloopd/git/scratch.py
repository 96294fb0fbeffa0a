"""``sync``'s merge, computed where no agent has a say: a scratch repository of the daemon's.

A merge in a run's checkout obeys whatever that checkout says: the implementer's
``.git/config`` names a merge driver or a filter, ``.git/info/attributes`` (or a
committed ``.gitattributes``) routes every path through it, and the merge writes what
the driver decides, content neither the reviewed commit nor main had.  So the merge of
``mode = "merge"`` runs here instead: ``git merge-tree --write-tree`` (a merge with no
working tree and no index) and ``commit-tree`` in a bare repository the daemon made
under its state directory, whose ``objects`` is the main repository's own object store
(the merged trees and the commit land where every ref can name them).  Nothing of a
checkout is read; the scratch has no config beyond ``init``'s, no ``info/attributes``,
no hooks, and its git reads no global or system config or attributes either (as
every daemon git: ``runner.NO_OPERATOR_CONFIG``; and ``core.attributesFile=/dev/null``
here): no driver, filter, textconv or renormalisation that
anyone named applies, and a bare repository reads no ``.gitattributes`` from a tree.

It is also the fast path: one ``merge-tree`` and one ``commit-tree`` on the host, no
checkout written, no sandbox started, nothing fetched back.

Imports: ``sloopd.git.runner`` only.
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sloopd.git import runner

# The scratch's git reads config and attributes from nowhere but the daemon's -c (no
# global or system config: runner.environment, as every daemon git).
_SETTINGS = ("-c", "core.attributesFile=/dev/null", "-c", "merge.renormalize=false")


class ScratchError(Exception):
    """git failed in the scratch repository for a reason that is no conflict."""


@dataclass(frozen=True, slots=True)
class Merged:
    """A merge's outcome: ``commit`` when it merged cleanly, else the conflicting paths."""

    commit: str | None
    conflicts: tuple[str, ...] = ()


class ScratchRepository:
    """One bare repository per daemon, borrowing the main object store (``objects``)."""

    def __init__(self, path: Path, objects: Path) -> None:
        self.path = path
        self.objects = objects
        self._made = asyncio.Lock()

    async def _ensure(self, timeout: float) -> None:
        async with self._made:
            if (self.path / "objects").is_symlink():
                return
            if self.path.exists():
                await asyncio.to_thread(_remove_half_made, self.path)
            await self._git(["init", "-q", "--bare", "--template=", str(self.path)], timeout, None)
            # Its own objects folder goes; the main one takes its place (writes land there).
            await asyncio.to_thread(shutil.rmtree, self.path / "objects")
            (self.path / "objects").symlink_to(self.objects, target_is_directory=True)

    async def _git(
        self, args: Sequence[str], timeout: float, identity: tuple[str, str] | None
    ) -> runner.Finished:
        extra: dict[str, str] = {}
        if identity is not None:
            for role in ("AUTHOR", "COMMITTER"):
                extra[f"GIT_{role}_NAME"], extra[f"GIT_{role}_EMAIL"] = identity
        where = ["--git-dir", str(self.path)] if args[0] != "init" else []
        argv = ["git", *_SETTINGS, *where, *args]
        try:
            return await runner.run(argv, timeout=timeout, env=runner.environment(extra))
        except runner.TimedOut:
            raise ScratchError(f"{shlex.join(argv)} did not finish within {timeout:g} s") from None

    async def _merge_base(self, ours: str, theirs: str, timeout: float) -> str | None:
        done = await self._git(["merge-base", ours, theirs], timeout, None)
        if done.returncode not in (0, 1):
            raise ScratchError(f"cannot compare {ours[:12]} and {theirs[:12]}: {_said(done)}")
        return done.stdout.strip() or None

    async def merge(
        self,
        ours: str,
        theirs: str,
        message: str,
        *,
        identity: tuple[str, str],
        timeout: float,
    ) -> Merged:
        """``theirs`` (main's tip) merged into ``ours`` (the work), as ``git merge`` would:
        ``ours`` itself when it already holds ``theirs``, ``theirs`` when ``ours`` is behind
        it (a fast-forward), else a new two-parent commit or the conflicting paths."""
        await self._ensure(timeout)
        base = await self._merge_base(ours, theirs, timeout)
        if base == theirs:
            return Merged(ours)
        if base == ours:
            return Merged(theirs)
        listed = ["merge-tree", "--write-tree", "-z", "--name-only", "--no-messages", ours, theirs]
        done = await self._git(listed, timeout, None)
        items = done.stdout.split("\0")
        if done.returncode == 1:
            # The tree, then each conflicting path, then an empty item.
            paths = []
            for item in items[1:]:
                if not item:
                    break
                if item not in paths:
                    paths.append(item)
            return Merged(None, tuple(paths))
        if done.returncode != 0 or not items[0]:
            raise ScratchError(f"cannot merge {theirs[:12]} into {ours[:12]}: {_said(done)}")
        made = ["commit-tree", items[0], "-p", ours, "-p", theirs, "-m", message]
        done = await self._git(made, timeout, identity)
        commit = done.stdout.strip()
        if done.returncode != 0 or not commit:
            raise ScratchError(f"cannot record the merge of {theirs[:12]}: {_said(done)}")
        return Merged(commit)


def _said(done: runner.Finished) -> str:
    lines = [ln.strip() for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
    return lines[0] if lines else f"git exited {done.returncode}"


def _remove_half_made(path: Path) -> None:
    """A scratch a crash left half made (no objects link yet) holds nothing of value."""
    if path.is_symlink() or not path.is_dir():
        raise ScratchError(f"refusing to replace {path}: it is not a directory")
    shutil.rmtree(path)
