"""``sync``, computed where no agent has a say: a scratch repository of the daemon's.

A merge or a rebase in a run's checkout obeys whatever that checkout says: the
implementer's ``.git/config`` names a merge driver or a filter, ``.git/info/attributes``
(or a committed ``.gitattributes``) routes every path through it, and git writes what
the driver decides, content neither the reviewed commit nor main had; a committed
``shared.txt merge=union`` alone turns a real conflict into both sides' lines.  So both
modes run here instead, in a bare repository the daemon made under its state directory,
whose ``objects`` is the main repository's own object store (the trees and commits made
land where every ref can name them):

- ``merge``: ``git merge-tree --write-tree`` (a merge with no working tree and no
  index) and a commit of its tree with both parents;
- ``rebase``: git 2.39 has no rebase without a working tree (``git replay`` is 2.44),
  so each commit is replayed as a cherry-pick is, with ``merge-tree --write-tree``:
  against a throw-away commit holding the new tip's tree on the replayed commit's own
  parent, so that parent is the one merge base (the three-way merge ``git rebase``
  makes: base, the new tip, the commit), then recorded on the new tip.

Nothing of a checkout is read.  The scratch has no config beyond ``init``'s, no hooks,
and its git reads no global or system config or attributes (as every daemon git:
``runner.NO_OPERATOR_CONFIG``; and ``core.attributesFile=/dev/null`` here); a bare
repository reads no ``.gitattributes`` from a tree, and its ``info/attributes`` (which
outranks any ``.gitattributes``) pins the built-in merge and no filter or conversion
for every path anyway (``PINNED_ATTRIBUTES``).  No
driver, filter, textconv, ``merge=union`` or renormalisation that anyone named applies.

It is also the fast path: a few gits on the host per merge or replayed commit, no
checkout written, no sandbox started, nothing fetched back.

Imports: ``sloopd.git.runner`` and ``sloopd.git.errors`` only.
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sloopd.git import runner
from sloopd.git.errors import ScratchError as ScratchError

# The scratch's git reads config and attributes from nowhere but the daemon's -c (no
# global or system config: runner.environment, as every daemon git).
_SETTINGS = ("-c", "core.attributesFile=/dev/null", "-c", "merge.renormalize=false")
# The scratch's ``info/attributes``, the highest-ranked attributes file (above every
# ``.gitattributes`` of a tree, whatever a later git reads them from): for every path
# the built-in three-way merge (``merge`` set never looks a driver up in any config;
# binary content still merges as binary), and no filter, end-of-line or encoding
# conversion or ``$Id$`` expansion.  Not ``-merge``: that makes every change both sides
# made to one file a conflict, however far apart.
PINNED_ATTRIBUTES = "* merge -filter -text -eol -ident -working-tree-encoding\n"


@dataclass(frozen=True, slots=True)
class Merged:
    """A merge's outcome: ``commit`` when it merged cleanly, else the conflicting paths
    and the tree git wrote, whose conflicted files hold its markers (``blob``)."""

    commit: str | None
    conflicts: tuple[str, ...] = ()
    tree: str | None = field(default=None, compare=False)


class ScratchRepository:
    """One bare repository per daemon, borrowing the main object store (``objects``)."""

    def __init__(self, path: Path, objects: Path) -> None:
        self.path = path
        self.objects = objects
        self._made = asyncio.Lock()
        self._pinned = False

    async def _ensure(self, timeout: float) -> None:
        async with self._made:
            if not (self.path / "objects").is_symlink():
                if self.path.exists():
                    await asyncio.to_thread(_remove_half_made, self.path)
                init = ["init", "-q", "--bare", "--template=", str(self.path)]
                await self._git(init, timeout, None)
                # Its own objects folder goes; the main one takes its place (writes land there).
                await asyncio.to_thread(shutil.rmtree, self.path / "objects")
                (self.path / "objects").symlink_to(self.objects, target_is_directory=True)
            if not self._pinned:
                # Written by each daemon once: a scratch an older daemon made has none.
                await asyncio.to_thread(_pin_attributes, self.path)
                self._pinned = True

    async def _git(
        self,
        args: Sequence[str],
        timeout: float,
        identity: tuple[str, str] | None,
        stdout_limit: int | None = None,
        stdin: bytes | None = None,
    ) -> runner.Finished:
        extra: dict[str, str] = {}
        if identity is not None:
            for role in ("AUTHOR", "COMMITTER"):
                extra[f"GIT_{role}_NAME"], extra[f"GIT_{role}_EMAIL"] = identity
        where = ["--git-dir", str(self.path)] if args[0] != "init" else []
        argv = ["git", *_SETTINGS, *where, *args]
        return await runner.run_or_raise(
            argv,
            timeout=timeout,
            timed_out=lambda: ScratchError(
                f"{shlex.join(argv)} did not finish within {timeout:g} s"
            ),
            env=runner.environment(extra),
            stdin=stdin,
            stdout_limit=stdout_limit,
        )

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
        merged = await self._merge_tree(
            ours, theirs, timeout, f"merge {theirs[:12]} into {ours[:12]}"
        )
        if isinstance(merged, Merged):
            return merged
        made = ["commit-tree", merged, "-p", ours, "-p", theirs, "-m", message]
        done = await self._git(made, timeout, identity)
        commit = done.stdout.strip()
        if done.returncode != 0 or not commit:
            raise ScratchError(f"cannot record the merge of {theirs[:12]}: {_said(done)}")
        return Merged(commit)

    async def blob(self, tree: str, path: str, limit: int, timeout: float) -> str | None:
        """The first ``limit`` bytes of the file ``path`` in ``tree``; None when it is
        no file there (a submodule, a deleted side) or git cannot read it."""
        await self._ensure(timeout)
        done = await self._git(["cat-file", "blob", f"{tree}:{path}"], timeout, None, limit)
        if done.returncode != 0 and not done.truncated:
            return None
        return done.stdout

    async def rebase(
        self, work: str, onto: str, *, identity: tuple[str, str], timeout: float
    ) -> Merged:
        """``work``'s own commits replayed onto ``onto``, as ``git rebase onto`` replays
        them with its defaults: merge commits left out, a commit whose change ``onto``
        already has skipped, a commit the replay leaves empty dropped (one that was empty
        kept), each author and message kept, the daemon's identity the committer.

        ``work`` itself when it already holds ``onto``; ``onto`` when ``work`` has nothing
        of its own; else the new tip, or the paths of the first commit that conflicts.
        ``timeout`` bounds the whole replay.
        """
        left = _Deadline(timeout)
        await self._ensure(left())
        base = await self._merge_base(work, onto, left())
        if base == onto:
            return Merged(work)
        if base == work:
            return Merged(onto)
        listed = ["rev-list", "--reverse", "--topo-order", "--right-only", "--cherry-pick"]
        done = await self._git([*listed, "--no-merges", f"{onto}...{work}"], left(), None)
        if done.returncode != 0:
            raise ScratchError(f"cannot list the commits of {work[:12]}: {_said(done)}")
        picks = done.stdout.split()
        done = await self._git(["var", "GIT_COMMITTER_IDENT"], left(), identity)
        committer = done.stdout.strip()
        if done.returncode != 0 or not committer:
            raise ScratchError(f"cannot tell the daemon's identity: {_said(done)}")
        tip, tip_tree = onto, await self._tree(onto, left())
        for sha in picks:
            picked = await self._read_commit(sha, left())
            if picked.parent == tip:
                # Already on the new tip: git rebase fast-forwards over it.
                tip, tip_tree = sha, picked.tree
                continue
            tree = await self._replay(picked, tip_tree, committer, left)
            if isinstance(tree, Merged):
                return tree  # the first commit that conflicts: its paths and tree
            if tree == tip_tree and picked.tree != await self._parent_tree(picked, left()):
                continue  # its change is on the new tip already: dropped, as git does
            text = _commit_text(tree, tip, picked.author, committer, picked.rest)
            tip, tip_tree = await self._write("commit", text, left()), tree
        return Merged(tip)

    async def _replay(
        self, picked: _Commit, onto_tree: str, committer: str, left: _Deadline
    ) -> str | Merged:
        """``picked``'s change made to ``onto_tree``, as a cherry-pick makes it: the tree,
        or the conflict (its paths and the tree git wrote, markers in it).

        The three-way merge of ``picked``'s parent (the base), ``onto_tree`` and
        ``picked``.  merge-tree merges two commits over their merge base (it takes no
        ``--merge-base`` before 2.40), so ``onto_tree`` is committed, throw-away, on
        ``picked``'s parent: that parent is the two commits' one merge base.  A root
        commit's base is the empty tree: both sides are committed on a commit of it.
        """
        base, theirs = picked.parent, picked.sha
        if base is None:
            empty = await self._write("tree", b"", left())
            base = await self._write("commit", _scaffold(empty, None, committer), left())
            theirs = await self._write("commit", _scaffold(picked.tree, base, committer), left())
        ours = await self._write("commit", _scaffold(onto_tree, base, committer), left())
        return await self._merge_tree(ours, theirs, left(), f"replay {picked.sha[:12]}")

    async def _merge_tree(self, ours: str, theirs: str, timeout: float, doing: str) -> str | Merged:
        """``merge-tree --write-tree``'s tree, or the conflict: the conflicting paths,
        each once, and the tree it wrote with their markers (``blob`` reads them)."""
        listed = ["merge-tree", "--write-tree", "-z", "--name-only", "--no-messages", ours, theirs]
        done = await self._git(listed, timeout, None)
        items = done.stdout.split("\0")
        if done.returncode == 1:
            # The tree, then each conflicting path (once per stage), then an empty item.
            paths: list[str] = []
            for item in items[1:]:
                if not item:
                    break
                if item not in paths:
                    paths.append(item)
            return Merged(None, tuple(paths), items[0] or None)
        if done.returncode != 0 or not items[0]:
            raise ScratchError(f"cannot {doing}: {_said(done)}")
        return items[0]

    async def _read_commit(self, sha: str, timeout: float) -> _Commit:
        done = await self._git(["cat-file", "commit", sha], timeout, None)
        if done.returncode != 0:
            raise ScratchError(f"cannot read the commit {sha[:12]}: {_said(done)}")
        return _Commit.parse(sha, done.stdout)

    async def _tree(self, commit: str, timeout: float) -> str:
        done = await self._git(["rev-parse", "--verify", f"{commit}^{{tree}}"], timeout, None)
        if done.returncode != 0 or not done.stdout.strip():
            raise ScratchError(f"cannot read the tree of {commit[:12]}: {_said(done)}")
        return done.stdout.strip()

    async def _parent_tree(self, picked: _Commit, timeout: float) -> str:
        if picked.parent is None:
            return await self._write("tree", b"", timeout)
        return await self._tree(picked.parent, timeout)

    async def _write(self, kind: str, content: bytes, timeout: float) -> str:
        """An object written to the store as it is: no filter, no path, format checked."""
        done = await self._git(
            ["hash-object", "-t", kind, "-w", "--stdin"], timeout, None, stdin=content
        )
        written = done.stdout.strip()
        if done.returncode != 0 or not written:
            raise ScratchError(f"cannot write a {kind}: {_said(done)}")
        return written


class _Deadline:
    """The time left of one ``timeout`` shared by every git a replay runs."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.end = time.monotonic() + timeout

    def __call__(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise ScratchError(f"the rebase did not finish within {self.timeout:g} s")
        return left


@dataclass(frozen=True, slots=True)
class _Commit:
    """What a replay keeps of a commit: its tree, its one parent (None: a root commit),
    its author line as recorded, and ``rest``: its encoding header if any, the blank
    line and its message, as recorded."""

    sha: str
    tree: str
    parent: str | None
    author: str
    rest: str

    @classmethod
    def parse(cls, sha: str, raw: str) -> _Commit:
        head, _, body = raw.partition("\n\n")
        fields: dict[str, list[str]] = {}
        for line in head.split("\n"):
            if not line.startswith(" "):  # a continued header: a signature's lines
                key, _, value = line.partition(" ")
                fields.setdefault(key, []).append(value)
        trees, parents, authors = (fields.get(key, []) for key in ("tree", "parent", "author"))
        if len(trees) != 1 or len(authors) != 1 or len(parents) > 1:
            raise ScratchError(f"cannot replay {sha[:12]}: it is not a commit rebase replays")
        encoding = fields.get("encoding", [])
        # Bytes that were not UTF-8 were read as U+FFFD: what is written is UTF-8 then.
        header = f"encoding {encoding[0]}\n" if encoding and "\ufffd" not in raw else ""
        return cls(sha, trees[0], parents[0] if parents else None, authors[0], header + "\n" + body)


def _commit_text(tree: str, parent: str | None, author: str, committer: str, rest: str) -> bytes:
    """A commit object's text; ``rest`` is the optional encoding header, the blank line and
    the message (a signature is not kept: it signed another commit)."""
    parents = f"parent {parent}\n" if parent is not None else ""
    return f"tree {tree}\n{parents}author {author}\ncommitter {committer}\n{rest}".encode()


def _scaffold(tree: str, parent: str | None, committer: str) -> bytes:
    """A throw-away commit a replay merges over (no ref ever names it; gc takes it)."""
    return _commit_text(tree, parent, committer, committer, "\nsloop: a replay's scaffold\n")


def _said(done: runner.Finished) -> str:
    lines = [ln.strip() for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
    return lines[0] if lines else f"git exited {done.returncode}"


def _pin_attributes(path: Path) -> None:
    info = path / "info"
    info.mkdir(exist_ok=True)
    attributes = info / "attributes"
    if not attributes.is_file() or attributes.read_text(encoding="utf-8") != PINNED_ATTRIBUTES:
        attributes.write_text(PINNED_ATTRIBUTES, encoding="utf-8")


def _remove_half_made(path: Path) -> None:
    """A scratch a crash left half made (no objects link yet) holds nothing of value."""
    if path.is_symlink() or not path.is_dir():
        raise ScratchError(f"refusing to replace {path}: it is not a directory")
    shutil.rmtree(path)
