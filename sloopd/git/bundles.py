"""What the daemon sends a Ray node and takes back from it: git bundles.

Out: a bundle of the stage's start commit holding only what the node's cache
lacks (its ``haves``; none when the node has the commit already).  Back: the
node's bundle of the new commits is fetched into a bare repository the daemon
makes for it (borrowing the main object store, so the bundle's prerequisites
are there), and from there into the main repository by ``intake.bring_back``,
the same path a local stage's work takes: fsck on every object, the tip must
descend from the run's base, and the run-private ref moves only then.  git 2.39
does not fsck what it fetches from a bundle file; the second hop does.

Every bundle is bounded either way (``[executor] max_bundle``): it is held whole on
its way (in the node's actor, Ray's object store and the driver), so one that is
larger fails its stage with a reason naming the bound (``oversized``).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path

from sloopd.git import intake
from sloopd.git import runner as git_runner
from sloopd.git.checkout import CheckoutError
from sloopd.git.errors import ShippingError as ShippingError
from sloopd.util import trees
from sloopd.util.sizes import format_bytes

# Its one deadline (runner.SHIPPING_S: why it is fixed) and kind of error.
_GIT = git_runner.Git(ShippingError, git_runner.SHIPPING_S)
BOUND_NAME = "[executor] max_bundle"


def oversized(what: str, size: int, limit: int) -> str | None:
    """Why a bundle of ``size`` bytes may not travel (``what`` names it), None if it may."""
    if size <= limit:
        return None
    return f"{what} is {format_bytes(size)}, more than {BOUND_NAME} ({format_bytes(limit)})"


async def _known(repo: Path, shas: list[str]) -> list[str]:
    """The ones of ``shas`` that name commits in ``repo`` (a node may hold others)."""
    if not shas:
        return []
    done = await _GIT.run(
        repo, "cat-file", "--batch-check=%(objectname) %(objecttype)",
        stdin="".join(f"{sha}\n" for sha in shas).encode(),
    )  # fmt: skip
    known = []
    for line in done.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1] == "commit":
            known.append(parts[0])
    return known


async def bundle_for(
    repo: Path, folder: Path, commit: str, haves: list[str], limit: int
) -> Path | None:
    """A bundle of ``commit`` less what ``haves`` reach, of at most ``limit`` bytes;
    None when they reach it all."""
    if commit in haves:
        return None  # the node holds the commit itself: nothing to ask git
    known = await _known(repo, haves)
    if commit in known:
        return None
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    name = uuid.uuid4().hex
    ref = f"refs/sloop/ship/{name}"
    path = folder / f"{name}.bundle"
    done = await _GIT.run(repo, "update-ref", ref, commit)
    if done.returncode != 0:
        raise ShippingError(f"cannot name {commit[:12]} to ship it: {done.stderr.strip()}")
    try:
        done = await _GIT.run(
            repo, "bundle", "create", "-q", str(path), ref, *(f"^{h}" for h in known)
        )
        if done.returncode != 0:
            if "empty bundle" in done.stderr:
                return None  # every object is on the node already
            raise ShippingError(f"cannot bundle {commit[:12]}: {done.stderr.strip()[-400:]}")
        refused = oversized("the bundle of the stage's start commit", path.stat().st_size, limit)
        if refused is not None:
            path.unlink(missing_ok=True)
            raise ShippingError(refused)
        return path
    finally:
        await _GIT.run(repo, "update-ref", "-d", ref)


async def adopt(
    repo: Path, folder: Path, bundle: Path, *, branch: str, ref: str, base: str, limit: int
) -> str:
    """Take a node's bundle of ``branch`` (at most ``limit`` bytes) into ``repo`` as
    ``ref``, checked; its tip."""
    refused = oversized("the bundle of the work", bundle.stat().st_size, limit)
    if refused is not None:
        bundle.unlink(missing_ok=True)
        raise ShippingError(refused)
    objects = await _GIT.run(repo, "rev-parse", "--path-format=absolute", "--git-path", "objects")
    if objects.returncode != 0:
        raise ShippingError(f"cannot read {repo}: {objects.stderr.strip()}")
    landing = folder / f"landing-{uuid.uuid4().hex}.git"
    try:
        # Not _GIT: a timed-out init has always ended in the runner's TimedOut.
        done = await git_runner.run(
            ["git", "init", "-q", "--bare", "--template=", str(landing)],
            timeout=git_runner.SHIPPING_S,
        )
        if done.returncode != 0:
            raise ShippingError(f"cannot make a landing repository: {done.stderr.strip()}")
        alternates = landing / "objects" / "info" / "alternates"
        alternates.write_text(objects.stdout.strip() + "\n", encoding="utf-8")
        heads = await _GIT.run(landing, "bundle", "list-heads", str(bundle))
        names = [line.split()[1] for line in heads.stdout.splitlines() if len(line.split()) == 2]
        if heads.returncode != 0 or len(names) != 1:
            raise ShippingError("the node's bundle does not hold exactly one branch")
        done = await _GIT.run(
            landing, "fetch", "-q", "--no-tags", "--no-write-fetch-head", "--no-auto-gc",
            str(bundle), f"+{names[0]}:refs/heads/{branch}",
        )  # fmt: skip
        if done.returncode != 0:
            raise ShippingError(f"the node's bundle was refused: {done.stderr.strip()[-400:]}")
        try:
            return await intake.bring_back(
                repo,
                landing,
                branch,
                ref,
                base,
                sandboxed_upload_pack=None,
                timeout=git_runner.SHIPPING_S,
            )
        except CheckoutError as exc:
            raise ShippingError(str(exc)) from exc
    finally:
        await asyncio.to_thread(trees.remove_blocking, landing)
        with contextlib.suppress(OSError):
            bundle.unlink()


async def record(repo: Path, ref: str, tip: str, base: str) -> str:
    """The node made no commit: ``tip`` is a commit the daemon has; record it as ``ref``."""
    # The base itself descends from the base (a stage that started there and made
    # nothing): only another commit is asked of git.
    if tip != base:
        done = await _GIT.run(repo, "merge-base", "--is-ancestor", base, tip)
        if done.returncode != 0:
            raise ShippingError(f"{tip[:12]} does not descend from the run's base {base[:12]}")
    done = await _GIT.run(repo, "update-ref", ref, tip)
    if done.returncode != 0:
        raise ShippingError(f"cannot record {ref}: {done.stderr.strip()}")
    return tip
