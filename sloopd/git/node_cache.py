"""A Ray node's cache of a daemon's repository: a bare repository only Sloop's git touches.

One per daemon repository under the node folder (``sloopd.remote.room``), made with
no templates; its git reads no global or system config or attributes and runs no
hook (the scratch repository's rules, ``sloopd.git.scratch``).  A stage's commit
arrives in a bundle of what the cache lacked (``haves`` says what it holds); the
work goes back as a bundle of the new commits only (``bundle``).
"""

from __future__ import annotations

import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from sloopd.git import checkout
from sloopd.git import runner as git_runner
from sloopd.git.bundles import oversized
from sloopd.git.errors import CacheError as CacheError
from sloopd.util import trees

HAVE_PREFIX = "refs/sloop/have/"
# The haves a node reports; older ones are pruned so the list stays short.
MAX_HAVES = 32


# The cache is Sloop's own: its git reads no global or system config or attributes
# (runner.environment, as every daemon git), and runs no hook (HARDENING).
_SETTINGS = tuple(part for key, value in checkout.HARDENING for part in ("-c", f"{key}={value}"))
# Its one deadline (runner.SHIPPING_S: why it is fixed) and kind of error.
_GIT = git_runner.Git(CacheError, git_runner.SHIPPING_S, _SETTINGS)


async def _git(repo: Path, *args: str, stdin: bytes | None = None, what: str) -> str:
    """stdout of ``git args`` in the cache; its failure is a ``CacheError`` naming ``what``."""
    done = await _GIT.run(repo, *args, stdin=stdin)
    if done.returncode != 0:
        raise CacheError(f"{what} failed: {done.stderr.strip()[-500:]}")
    return done.stdout.strip()


# Commits this process found in each cache (a warm actor's next stage on the same
# commit asks git nothing): objects are fetched into a cache and never removed.
_SEEN: dict[Path, set[str]] = {}
_SEEN_AT_MOST = 10_000


@dataclass
class Cache:
    """The node's bare repository for one daemon repository."""

    path: Path

    @classmethod
    async def of(cls, root: Path) -> Cache:
        """The cache in ``root`` (the node folder of one daemon repository), made once."""
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = root / "cache.git"
        if not (path / "HEAD").exists():
            staging = root / f"cache-{uuid.uuid4().hex}.git"
            done = await _GIT.run(None, "init", "-q", "--bare", "--template=", str(staging))
            if done.returncode != 0:
                raise CacheError(f"cannot make the node's cache: {done.stderr.strip()}")
            try:
                staging.rename(path)  # two stages at once: one cache wins, the other goes
            except OSError:
                trees.remove_blocking(staging)
        return cls(path)

    async def haves(self) -> list[str]:
        out = await _git(
            self.path,
            "for-each-ref",
            "--sort=-creatordate",
            "--format=%(objectname)",
            HAVE_PREFIX,
            what="listing the node's cache",
        )
        shas = list(dict.fromkeys(out.split()))
        return shas[:MAX_HAVES]

    async def take(self, bundle: bytes, commit: str) -> None:
        """Fetch a bundle of ``commit`` (what the cache lacked) and keep it as a have."""
        if await self.has(commit):
            return
        if not bundle:
            raise CacheError(f"the node lacks {commit[:12]} and no bundle came with the stage")
        with tempfile.NamedTemporaryFile(dir=self.path, suffix=".bundle") as file:
            file.write(bundle)
            file.flush()
            await _git(
                self.path,
                "-c",
                "fetch.fsckObjects=true",
                "-c",
                "protocol.file.allow=always",  # the bundle is a file the node just wrote
                "fetch",
                "-q",
                "--no-tags",
                "--no-write-fetch-head",
                "--no-auto-gc",
                file.name,
                f"+refs/*:{HAVE_PREFIX}in-{uuid.uuid4().hex}/*",
                what="fetching the stage's bundle",
            )
        if not await self.has(commit):
            raise CacheError(f"the bundle did not hold {commit[:12]}")
        await self.keep(commit)

    async def has(self, commit: str) -> bool:
        if commit in _SEEN.get(self.path, ()):
            return True  # this process saw it there; the cache is never pruned of objects
        done = await _GIT.run(self.path, "cat-file", "-e", f"{commit}^{{commit}}")
        if done.returncode == 0:
            seen = _SEEN.setdefault(self.path, set())
            if len(seen) > _SEEN_AT_MOST:
                seen.clear()
            seen.add(commit)
        return done.returncode == 0

    async def keep(self, commit: str) -> None:
        await _git(self.path, "update-ref", f"{HAVE_PREFIX}{commit}", commit, what="keeping a have")
        await self._prune()

    async def _prune(self) -> None:
        out = await _git(
            self.path,
            "for-each-ref",
            "--sort=-creatordate",
            "--format=%(refname)",
            HAVE_PREFIX,
            what="listing the node's cache",
        )
        stale = out.split()[MAX_HAVES * 2 :]
        if stale:
            script = "".join(f"delete {ref}\n" for ref in stale).encode()
            await _git(self.path, "update-ref", "--stdin", stdin=script, what="pruning haves")

    async def bundle(self, tip: str, start: str, limit: int) -> bytes:
        """The commits from ``start`` to ``tip``: what the daemon lacks of the work, in
        at most ``limit`` bytes (it is held whole on its way back)."""
        ref = f"refs/sloop/out/{uuid.uuid4().hex}"
        await _git(self.path, "update-ref", ref, tip, what="naming the work")
        try:
            with tempfile.TemporaryDirectory(dir=self.path) as scratch:
                out = Path(scratch) / "work.bundle"
                done = await _GIT.run(
                    self.path, "bundle", "create", "-q", str(out), ref, f"^{start}"
                )
                if done.returncode != 0 and "empty bundle" in done.stderr:
                    # The tip is an ancestor of the start: the daemon has every commit of
                    # it already (it records the tip after its descends-from-base check).
                    return b""
                if done.returncode != 0:
                    raise CacheError(f"bundling the work failed: {done.stderr.strip()[-500:]}")
                refused = oversized("the bundle of the work", out.stat().st_size, limit)
                if refused is not None:
                    raise CacheError(refused)
                return out.read_bytes()
        finally:
            await _git(self.path, "update-ref", "-d", ref, what="forgetting the work's name")
