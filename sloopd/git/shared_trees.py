"""Shared trees: a commit's files, and an index that matches them, made once per host.

A copy-on-write checkout (``sloopd.proc.overlay``) stacks an execution's writable
layer over read-only layers made here, so a stage's start costs the same whatever
the tree's size.  A layer is either *whole* (``checkout.create`` into a fresh
folder: every file, O(tree), once) or a *difference* over another layer: the new
layer is the upper folder of an overlay over its parent's stack in which the
daemon's sandboxed git ran ``read-tree -m -u <parent> <tree>``, so it holds the
files that changed, a whiteout for each one deleted and the index of the new tree
(O(changed files)).  A run's commit stacks over its base; a new ``main`` over the
previous ``main``'s stack; past ``MAX_DEPTH`` layers a tree is made whole again.

Which layer of that stack: trees made one from another (a drain's ``main``s) are
numbered along their line, and the n-th stacks over the one numbered n with its
lowest set bit cleared (a skip list).  A line of N trees is then at most log2(N) + 1
layers deep, and a file changed in it is written O(log N) times in all: stacked each
over the last, a line would reach ``MAX_DEPTH`` (a whole tree, O(tree)) every 16
trees; stacked over one fixed layer, every tree would write again every file changed
since that layer, and every stage's ``git add`` would hash them all again (git reads
the files a difference wrote in the same second as its index).

On disk, under ``root`` (``<state dir>/trees-<uid>``): ``<key>/l`` is the layer and
``<key>/meta`` says its parent, depth, size, entries and number in its line; the key
is the tree's id.
A layer is made in a ``.building-*`` folder and renamed to its key only when
whole, so a crash (SIGKILL, a full disk) leaves nothing that is used: the next
daemon sets those folders aside.  Layers survive a restart (the meta files are
read at start).  The disk they take is bounded (``[repo] tree_cache``): past it,
the least recently used layers that no checkout holds go, with the layers over
them, in O(1) for the caller (``sloopd.util.trash``).

Nothing an agent writes reaches a layer: every stage writes into its own upper
folder, and the layers' folder is hidden from every sandbox like the rest of the
state directory.  A whole tree's index is dated after its last file (``_not_racy``),
so a ``git status`` in a checkout reads no file that did not change; a difference's
index leaves only the files it wrote to be read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import re
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sloopd.git import checkout, runner
from sloopd.git.checkout import CheckoutError, Isolation
from sloopd.proc.overlay import Overlay
from sloopd.util import trees
from sloopd.util.trash import Trash

# Layers in one stack at most; the next tree over it is made whole.  Each layer costs
# the kernel a lookup per path that misses, and the options a few dozen bytes.
MAX_DEPTH = 16
# A difference is made when it changes at most this many paths, or a quarter of the tree.
SMALL_DIFF = 512
_BUILDING = ".building-"
# Commits whose tree is remembered, at most (then forgotten at once: a drain's worth).
_TREES_REMEMBERED = 20_000
# A layer's name is its tree's id: nothing else is ever made a folder name here.
_OBJECT_ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?\Z")
# The unborn branch a layer's HEAD names: a stage's own layer writes the real HEAD.
_LAYER_BRANCH = "sloop-tree"


@dataclass
class _Layer:
    key: str
    parent: str | None
    depth: int
    size: int
    entries: int
    used: float
    number: int = 0  # in the line of trees made one from another; a whole tree is 0


class SharedTrees:
    """The layers of one repository on this host, made on demand, held while used."""

    def __init__(
        self,
        root: Path,
        repo: Path,
        objects: Path,
        hide: tuple[Path, ...],
        *,
        limit: Callable[[], int],
        trash: Trash,
    ) -> None:
        self.root = root
        self.repo = repo
        self.objects = objects
        self.hide = hide
        self._limit = limit
        self._trash = trash
        self._layers: dict[str, _Layer] = {}
        self._holds: Counter[str] = Counter()
        self._building: dict[str, asyncio.Future[None]] = {}
        self._tree_of: dict[str, str] = {}  # commit -> its tree
        self._loaded = False

    def _load(self) -> None:
        """The layers a previous daemon made; half-made ones set aside, never used."""
        self._loaded = True
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        found: dict[str, _Layer] = {}
        for entry in self.root.iterdir():
            if entry.name.startswith(_BUILDING):
                self._set_aside(entry)
                continue
            try:
                meta = json.loads((entry / "meta").read_text(encoding="utf-8"))
                found[entry.name] = _Layer(
                    entry.name, meta["parent"], int(meta["depth"]), int(meta["size"]),
                    int(meta["entries"]), (entry / "meta").stat().st_mtime,
                    int(meta.get("number", 0)),  # a layer of before 0.9.0 counts as 0
                )  # fmt: skip
            except (OSError, ValueError, KeyError, TypeError):
                self._set_aside(entry)
        # A layer whose parent is gone is no stack at all.
        for key in sorted(found, key=lambda k: found[k].depth):
            parent = found[key].parent
            if parent is None or parent in self._layers:
                self._layers[key] = found[key]
            else:
                self._set_aside(self.root / key)

    def _set_aside(self, path: Path) -> None:
        with contextlib.suppress(OSError, trees.NotAFolder):
            if not self._trash.set_aside(path):
                shutil.rmtree(path, ignore_errors=True)

    def chain(self, key: str) -> tuple[str, ...]:
        """``key`` and the layers under it, top first."""
        keys = [key]
        while (parent := self._layers[keys[-1]].parent) is not None:
            keys.append(parent)
        return tuple(keys)

    def lower(self, keys: Sequence[str]) -> tuple[str, ...]:
        """The overlay's ``lowerdir`` names of a chain (relative to ``root``)."""
        return tuple(f"{key}/l" for key in keys)

    async def hold(self, commit: str, near: Sequence[str] = ()) -> tuple[str, ...]:
        """The chain of ``commit``'s tree, made if it is not there, held until ``release``.

        ``near``: commits whose trees are likely close (the run's base, its last
        commit), tried as the parent of a difference besides the layers used last."""
        if not self._loaded:
            self._load()
        trees = await self._trees([commit, *near])
        key = trees[0]
        while key not in self._layers:
            building = self._building.get(key)
            if building is None:
                future = asyncio.get_running_loop().create_future()
                self._building[key] = future
                try:
                    await self._build(key, commit, [t for t in trees[1:] if t in self._layers])
                except BaseException as exc:
                    future.set_exception(exc)
                    future.exception()  # retrieved: a waiter may not be there
                    raise
                else:
                    future.set_result(None)
                finally:
                    del self._building[key]
            else:
                await asyncio.shield(building)
        chain = self.chain(key)
        now = time.time()
        for each in chain:
            self._holds[each] += 1
            self._layers[each].used = now
        os.utime(self.root / key / "meta", (now, now))  # the order survives a restart
        return chain

    def release(self, chain: Sequence[str]) -> None:
        """A checkout let go of its chain: past the limit, what no one holds goes now."""
        for key in chain:
            self._holds[key] -= 1
            if self._holds[key] <= 0:
                del self._holds[key]
        self._evict(keep=None)

    async def _trees(self, commits: Sequence[str]) -> list[str]:
        """The tree ids of ``commits`` (full commit ids, the daemon's own), in order;
        remembered (a commit's tree never changes), so a stage's start asks git nothing
        when its commit was seen before."""
        named = list(dict.fromkeys(c for c in commits if c))
        if all(c in self._tree_of for c in named):
            return [self._tree_of[c] for c in named]
        if not all(_OBJECT_ID.match(c) for c in named):
            raise CheckoutError(f"not a full commit id: {named!r}")
        done = await checkout.run_bounded(
            ["git", "-C", str(self.repo), "rev-parse", *(f"{c}^{{tree}}" for c in named)],
            timeout=runner.QUICK_S,
            what="reading the trees of a checkout",
        )
        found = done.stdout.split()
        if done.returncode != 0 or len(found) != len(named):
            said = checkout.git_reason(done.stderr)
            raise CheckoutError(f"cannot read the tree of {named[0][:12]}: {said}.")
        if not all(_OBJECT_ID.match(tree) for tree in found):
            raise CheckoutError(f"git named no tree for {named[0][:12]}")
        if len(self._tree_of) > _TREES_REMEMBERED:
            self._tree_of.clear()
        self._tree_of.update(zip(named, found, strict=True))
        return found

    async def _changes(self, parent: str, tree: str) -> int:
        done = await checkout.run_bounded(
            ["git", "-C", str(self.repo), "diff-tree", "-r", "-z", "--name-only",
             "--no-renames", parent, tree],
            timeout=runner.QUICK_S, what="comparing two trees", stdout_limit=1 << 20,
        )  # fmt: skip
        if done.returncode != 0 or done.truncated:
            return 1 << 30
        return done.stdout.count("\0")

    async def _parent_for(self, tree: str, near: list[str]) -> tuple[str, int] | None:
        """The layer to stack ``tree`` over and ``tree``'s number in its line; None for
        a whole tree.

        The nearest layer is the first of ``near``, then of the layers used last (a
        chain's top before what is under it), that ``tree`` differs from by little.
        ``tree`` follows it in its line and stacks over the layer the skip list names
        in its chain (module docstring), or over the nearest itself when that one is
        too far.  When the nearest's stack is as deep as a stack goes, the tree is made
        whole: stacked over a shallower layer instead, every tree after it would write
        every file changed since that layer again.  One ``diff-tree`` per candidate
        tried and one for the skip list's layer: in a drain, one or two per tree made.
        """
        recent = sorted(self._layers.values(), key=lambda layer: (-layer.used, -layer.depth))
        for key in dict.fromkeys([*near, *(layer.key for layer in recent[:4])]):
            nearest = self._layers.get(key)
            if nearest is None or not await self._close(key, tree):
                continue
            if key not in self._layers:
                continue  # evicted while it was compared (a stage let go of it)
            number = nearest.number + 1
            skip = self._numbered_at_most(key, number & (number - 1))
            # The skip list's layer differs from ``tree`` by every file changed since it
            # (its O(log N) share): taken unless that is more than the whole tree.  Held
            # to a quarter of its own files like the nearest, it stopped a drain's line
            # at its 512th tree (512 files since the whole one of 3), each tree after
            # stacking over the last, 16 deep, then whole again: O(tree) every few
            # dozen runs.
            whole = max(SMALL_DIFF, nearest.entries)
            if skip != key and self._fits(skip) and await self._close(skip, tree, whole):
                return skip, number
            return (key, number) if self._fits(key) else None
        return None

    def _fits(self, key: str) -> bool:
        layer = self._layers.get(key)  # None: evicted meanwhile (``_build`` makes it whole)
        return layer is None or layer.depth + 1 <= MAX_DEPTH

    async def _close(self, key: str, tree: str, limit: int | None = None) -> bool:
        """Whether ``tree`` is worth stacking over ``key`` rather than made whole: it
        changes at most ``limit`` paths (``SMALL_DIFF`` or a quarter of ``key``'s)."""
        if limit is None:
            limit = max(SMALL_DIFF, self._layers[key].entries // 4)
        return await self._changes(key, tree) <= limit

    def _numbered_at_most(self, key: str, number: int) -> str:
        """The first layer of ``key``'s chain, top first, numbered ``number`` or less
        (the chain's whole tree, numbered 0, at the latest)."""
        for each in self.chain(key):
            if self._layers[each].number <= number:
                return each
        return each

    async def _build(self, tree: str, commit: str, near: list[str]) -> None:
        found = await self._parent_for(tree, near)
        parent, number = found if found is not None else (None, 0)
        if parent is not None and parent not in self._layers:
            parent, number = None, 0  # evicted while it was compared: made whole instead
        # The parent's chain is held while the difference is made over it: a stage
        # letting go of its trees meanwhile must not evict what the build reads.
        under = self.chain(parent) if parent is not None else ()
        self._holds.update(under)
        try:
            await self._build_over(tree, commit, parent, number)
        finally:
            self._holds.subtract(under)
            self._holds += Counter()  # drops the keys no one holds any more
        self._evict(keep=tree)

    async def _build_over(self, tree: str, commit: str, parent: str | None, number: int) -> None:
        place = self.root / f"{_BUILDING}{uuid.uuid4().hex}"
        place.mkdir(mode=0o700)
        layer = place / "l"
        try:
            if parent is None:
                await checkout.create(
                    self.repo, layer, _LAYER_BRANCH, commit, timeout=runner.CHECKOUT_S
                )
                await asyncio.to_thread(_strip, layer)
                depth = 1
            else:
                await self._difference(place, parent, tree)
                depth = self._layers[parent].depth + 1
            index = layer / ".git" / "index"
            entries = _entries(index)
            if parent is None:
                await _not_racy(index)
            size = await asyncio.to_thread(_size, layer)
            meta = {"parent": parent, "depth": depth, "size": size, "entries": entries,
                    "number": number}  # fmt: skip
            (place / "meta").write_text(json.dumps(meta), encoding="utf-8")
            for scratch in ("w", "m", "h"):
                shutil.rmtree(place / scratch, ignore_errors=True)
            os.rename(place, self.root / tree)
        except BaseException:
            self._set_aside(place)
            raise
        self._layers[tree] = _Layer(tree, parent, depth, size, entries, time.time(), number)

    async def _difference(self, place: Path, parent: str, tree: str) -> None:
        """The new layer as the upper folder of ``read-tree -m -u parent tree`` run over
        the parent's stack, in the daemon's sandbox (the tree may be an agent's)."""
        for scratch in ("l", "w", "m", "h"):
            (place / scratch).mkdir(mode=0o700)
        stack = Overlay(self.root, self.lower(self.chain(parent)), place / "l", place / "w")
        isolation = Isolation(objects=self.objects, home=place / "h", hide=self.hide, overlay=stack)
        done = await checkout.run_in_checkout(
            place / "m", ["read-tree", "-m", "-u", parent, tree], isolation,
            timeout=runner.CHECKOUT_S,
        )  # fmt: skip
        if done.returncode != 0:
            raise CheckoutError(f"cannot stack the tree {tree[:12]}: "
                                f"{checkout.git_reason(done.stderr)}.")  # fmt: skip

    def _evict(self, keep: str | None) -> None:
        """Least recently used first, with what stands on them, till within the limit:
        one pass in that order, a layer skipped while it or one over it is held."""
        limit = self._limit()
        total = self.size
        if total <= limit:
            return
        above = self._above()
        for layer in sorted(self._layers.values(), key=lambda layer: layer.used):
            if total <= limit:
                return
            going = [k for k in self._with_above(layer.key, above) if k in self._layers]
            if not going or keep in going or any(self._holds[k] for k in going):
                continue  # gone with one below it already, or in use
            for key in going:
                total -= self._layers.pop(key).size
                self._set_aside(self.root / key)

    def _above(self) -> dict[str, list[str]]:
        above: dict[str, list[str]] = {}
        for layer in self._layers.values():
            if layer.parent is not None:
                above.setdefault(layer.parent, []).append(layer.key)
        return above

    @staticmethod
    def _with_above(key: str, above: dict[str, list[str]]) -> list[str]:
        found, todo = [], [key]
        while todo:
            each = todo.pop()
            found.append(each)
            todo += above.get(each, [])
        return found

    def entries(self, key: str) -> int:
        """How many files the tree ``key`` holds (its index's count)."""
        layer = self._layers.get(key)
        return layer.entries if layer is not None else 0

    @property
    def size(self) -> int:
        return sum(layer.size for layer in self._layers.values())

    def __len__(self) -> int:
        return len(self._layers)


def _strip(layer: Path) -> None:
    """A whole layer's ``.git`` keeps only what every checkout of it shares: its config,
    the alternates line, the index and an unborn HEAD (a stage's layer writes its own)."""
    git = layer / ".git"
    shutil.rmtree(git / "logs", ignore_errors=True)
    for ref in (git / "refs" / "heads").iterdir():
        ref.unlink()
    (git / "ORIG_HEAD").unlink(missing_ok=True)


def _entries(index: Path) -> int:
    with open(index, "rb") as handle:
        header = handle.read(12)
    return int.from_bytes(header[8:12], "big") if header[:4] == b"DIRC" else 0


async def _not_racy(index: Path) -> None:
    """A whole tree's index, dated after every file it records: git trusts an entry's
    stat data only when the file is older than the index (to the second), else it reads
    the file at every status.  The layer is not in use yet, so its index may be dated
    now, once the second its last file was written is over (at most a second's wait).
    Never later than now: a file an agent changes in the same second as the index was
    dated must still be seen as possibly changed (overlayfs keeps its inode number).
    A difference's index is left as git wrote it: only the files it wrote are recent,
    and git marks those to be read."""
    now = time.time()
    await asyncio.sleep(math.floor(now) + 1 - now)
    os.utime(index)


def _size(folder: Path) -> int:
    total = 0
    for top, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, name)).st_blocks * 512
    return total
