"""A node's places for one stage execution: its cache of the repository, a checkout, a HOME.

The node keeps one bare cache repository per daemon repository (``SLOOP_NODE_DIR``,
default ``<tmp>/sloop-node-<uid>``), made by Sloop with no templates and read
only by hardened git.  A stage's commit arrives as a bundle of what the cache
lacks (``haves`` says what it holds), and the checkout is made from the cache
exactly as the daemon makes one (``sloopd.git.checkout.create``).  After the
child, the daemon's collect runs here, the same function as on the daemon's host
(``sloopd.git.workspace.take_back``): the status and the auto-commit through
Sloop's own index in the checkout's sandbox, and the bring-back into the cache
through a sandboxed upload-pack with fsck and the descends-from-base check.  What
goes back is a bundle of the new commits only.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sloopd.git import checkout, layered
from sloopd.git.checkout import Isolation
from sloopd.git.errors import GitError
from sloopd.git.layered import Layered
from sloopd.git.node_cache import HAVE_PREFIX, Cache, CacheError
from sloopd.git.runner import SHIPPING_S
from sloopd.git.shared_trees import SharedTrees
from sloopd.git.workspace import take_back
from sloopd.proc import overlay_probe
from sloopd.util import trees
from sloopd.util.trash import Trash


def _owner_of(pid: int) -> str:
    """A process by pid and start time (field 22 of its stat): pid reuse is not it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    except OSError:
        return ""
    return f"{pid} {stat.rsplit(')', 1)[1].split()[19]}"


def _sweep_orphans(rooms: Path, prefix: str = "") -> None:
    if not rooms.is_dir():
        return
    for room in rooms.iterdir():
        if not room.name.startswith(prefix):
            continue
        try:
            owner = (room / "owner").read_text(encoding="ascii").strip()
            pid = int(owner.split()[0])
        except (OSError, ValueError, IndexError):
            continue  # being made right now, or not a room of ours
        if _owner_of(pid) != owner:
            with contextlib.suppress(OSError, trees.NotAFolder):
                trees.remove_blocking(room)


class RoomError(GitError):
    """The node could not prepare or collect a stage; the message says why.  One of the
    git layer's family (``sloopd.git.errors``): what failed is the node's git."""


def node_dir() -> Path:
    configured = os.environ.get("SLOOP_NODE_DIR")
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / f"sloop-node-{os.getuid()}"


def _key(repository: str) -> str:
    # The daemon names its repository; the node folder is a hash, never that text.
    return hashlib.sha256(repository.encode()).hexdigest()[:16]


async def cache_of(repository: str) -> Cache:
    """The node's cache of one daemon's repository."""
    try:
        return await Cache.of(node_dir() / _key(repository))
    except CacheError as exc:
        raise RoomError(str(exc)) from exc


class NodeTrees:
    """This actor's shared trees (copy-on-write checkouts), one set per cache.

    Each actor process keeps its own folder (``trees-<uid>-<pid>``): the layers an
    actor made are held and evicted by it alone, so two actors on a node never
    remove what the other uses; a warm actor reuses them stage after stage, and the
    folder of an actor that is gone is swept by the next (its owner file, as rooms).
    Where the node allows no overlay (the probe, once per actor) checkouts are whole.
    """

    def __init__(self, root: Path, hide: Callable[[], tuple[Path, ...]]) -> None:
        self.root = root
        self._hide = hide
        self._mine = root / f"trees-{os.getuid()}-{os.getpid()}"
        self._trash = Trash(root / "trash")
        self._by_cache: dict[Path, SharedTrees] = {}
        self.problem: str | None = None
        self._probed = False

    def of(self, cache: Cache) -> SharedTrees | None:
        if not self._probed:
            self._probed = True
            _sweep_orphans(self.root, prefix=f"trees-{os.getuid()}-")
            self.problem = overlay_probe.probe(self._mine)
            if self.problem is None:
                (self._mine / "owner").write_text(_owner_of(os.getpid()), encoding="ascii")
        if self.problem is not None:
            return None
        found = self._by_cache.get(cache.path)
        if found is None:
            found = self._by_cache[cache.path] = SharedTrees(
                self._mine / hashlib.sha256(bytes(cache.path)).hexdigest()[:16],
                cache.path, cache.path / "objects", self._hide(),
                limit=lambda: TREE_CACHE_BYTES, trash=self._trash,
            )  # fmt: skip
        return found


# The disk a node's actor gives its shared trees, per cache (the daemon's [repo]
# tree_cache is the daemon host's; a node has its own disk and its own bound).
TREE_CACHE_BYTES = 2 << 30


@dataclass
class Room:
    """One execution's checkout, HOME, files and socket on the node."""

    cache: Cache
    root: Path
    branch: str
    # A copy-on-write checkout and the trees it holds; None: a whole one.
    made: Layered | None = None
    shared: SharedTrees | None = None

    @property
    def checkout(self) -> Path:
        return self.root / "work"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def files(self) -> Path:
        return self.root / "files"

    @property
    def socket(self) -> Path:
        return self.root / "w.sock"

    def isolation(self, hide: tuple[Path, ...]) -> Isolation:
        git_home = self.root / "git-home"
        git_home.mkdir(mode=0o700, exist_ok=True)
        return Isolation(
            objects=self.cache.path / "objects", home=git_home, hide=hide, bwrap="bwrap",
            overlay=self.made.overlay if self.made is not None else None,
        )  # fmt: skip

    @classmethod
    async def make(
        cls, cache: Cache, branch: str, commit: str, shared: SharedTrees | None = None
    ) -> Room:
        rooms = cache.path.parent / "rooms"
        await asyncio.to_thread(_sweep_orphans, rooms)
        root = rooms / uuid.uuid4().hex[:16]
        root.mkdir(mode=0o700, parents=True)
        # Whose room it is: an actor killed with its driver never removes its room, so
        # the next one on this node removes every room whose owner is gone.
        (root / "owner").write_text(_owner_of(os.getpid()), encoding="ascii")
        room = cls(cache, root, branch)
        room.files.mkdir(mode=0o700)
        if shared is None:
            await checkout.create(cache.path, room.checkout, branch, commit, timeout=SHIPPING_S)
            return room
        await checkout.check_ref(f"refs/heads/{branch}", SHIPPING_S)
        room.checkout.mkdir(mode=0o700)  # the mount point: the merged view is the sandbox's
        (root / "layers").mkdir(mode=0o700)
        room.made = await layered.make(shared, root / "layers", branch, commit)
        room.shared = shared
        return room

    def let_go(self) -> None:
        """The room's trees are no longer held (in the loop's thread: eviction may run)."""
        if self.made is not None and self.shared is not None:
            self.shared.release(self.made.chain)
        self.shared = None

    async def collect(
        self, hide: tuple[Path, ...], *, start: str, base: str, auto_commit: str | None,
        identity: tuple[str, str], max_bundle: int,
    ) -> tuple[str, list[str], bytes]:  # fmt: skip
        """(the tip, what is left uncommitted, a bundle of the new commits) after the child."""
        isolation = self.isolation(hide)
        try:
            # The same collect as on the daemon's host (sloopd.git.workspace), into the
            # node's cache under a private ref; what goes back is a bundle of the new commits.
            work = await take_back(
                self.cache.path, self.checkout, self.branch,
                f"{HAVE_PREFIX}work-{uuid.uuid4().hex}", base, isolation,
                listing=True, auto_commit=auto_commit, identity=identity, timeout=SHIPPING_S,
                made=self.made, record_unchanged=False,
            )  # fmt: skip
            tip, dirty = work.tip, list(work.uncommitted)
            bundle = b"" if tip == start else await self.cache.bundle(tip, start, max_bundle)
        except (checkout.CheckoutError, CacheError) as exc:
            raise RoomError(str(exc)) from exc
        return tip, dirty, bundle

    def remove(self) -> None:
        trees.remove_blocking(self.root)
