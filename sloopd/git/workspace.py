"""A stage's workspace: a commit in, a place to work, a commit out — on this host or a node.

The one contract every stage execution and panel seat goes through
(docs/architecture.md, "A stage, commit in to commit out"):

1. **make** a place from a commit: a checkout made anew, nothing of an earlier one;
2. the child runs there (the launcher's job: ``sloopd.proc.launchers``);
3. **collect** what it left into one value, ``stage_io.Collected``: what it left
   uncommitted is listed by the daemon's own index (``commit = "auto"`` commits it
   with the daemon's identity), and its branch is brought back through a sandboxed
   upload-pack into a repository of the daemon's, checked (fsck, descends from the
   run's base) and recorded under the execution's ref.

``take_back`` is step 3, written once: ``LocalWorkspace`` runs it into the main
repository; a Ray node's room (``sloopd.remote.room``) runs it into the node's
cache, and ships the result back as a bundle, which ``ShippedWorkspace`` takes as
the stage's end says.  Which of the two a child uses is its placement's ``where``,
decided once per child (``sloopd.runs.placing``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from sloopd.git import checkout, checkout_edits, intake, layered
from sloopd.git.checkout import CheckoutError, Isolation
from sloopd.git.layered import Layered
from sloopd.git.run_branches import RunBranches, RunPlace
from sloopd.git.runner import CHECKOUT_S
from sloopd.proc.stage_io import Collected, Exited, Placement


async def take_back(
    repo: Path,
    worktree: Path,
    branch: str,
    ref: str,
    base: str,
    isolation: Isolation,
    *,
    listing: bool,
    auto_commit: str | None,
    identity: tuple[str, str],
    timeout: float,
    also: Sequence[str] = (),
    made: Layered | None = None,
    record_unchanged: bool = True,
) -> Collected:
    """What the child left in ``worktree``, recorded in ``repo`` under ``ref``.

    ``listing``: what it left uncommitted is listed (in the sandbox that serves the
    fetch: one bwrap, the checkout read-only in both), and with ``auto_commit``
    committed, then brought back again.  ``also``: refs that move with ``ref`` in the
    same transaction (the run's branch, for a producing stage).

    ``made``: the copy-on-write checkout the child ran in (``sloopd.git.layered``).
    What it changed is read from its layer: a stage that left the ``.git`` as made
    and wrote nothing is recorded at the commit it started from with no git fetch or
    listing at all (``record_unchanged=False``: not even recorded, a node's cache
    holds that commit already), and a listing covers only the paths the layer holds.
    """
    only: tuple[str, Sequence[str]] | None = None
    if made is None:
        checkout_edits.require_present(worktree)
    else:
        gone = layered.removed(made, worktree)
        if gone is not None:
            raise CheckoutError(gone)
        found = layered.changes(made) if listing else ()
        if found == () and layered.git_untouched(made, branch):
            if record_unchanged:
                await layered.record(repo, made.commit, (ref, *also), timeout=timeout)
            return Collected(made.commit)
        if found is not None:
            only = (made.commit, found)

    async def fetch(upload: list[str] | None) -> str:
        return await intake.bring_back(
            repo, worktree, branch, ref, base,
            sandboxed_upload_pack=upload, timeout=timeout, also=also,
        )  # fmt: skip

    def plain() -> list[str] | None:
        return checkout.upload_pack_command(worktree, isolation) if isolation.bwrap else None

    dirty: list[str] = []
    if not listing:
        tip = await fetch(plain())
    elif not isolation.bwrap:
        tip = await fetch(None)
        dirty = await checkout_edits.uncommitted(worktree, branch, isolation, timeout=timeout)
    else:
        checkout_edits.unlisted(isolation)
        try:
            tip = await fetch(
                checkout_edits.listing_upload_pack(worktree, branch, isolation, only=only)
            )
        except CheckoutError as exc:
            # The listing's own failure first, as when it ran before the bring-back.
            checkout_edits.listed(worktree, isolation, exc.said, status=only is not None)
            raise
        dirty = checkout_edits.listed(worktree, isolation, status=only is not None)
    if dirty and auto_commit is not None:
        await checkout_edits.commit_all(
            worktree, branch, auto_commit, isolation, identity=identity, timeout=timeout,
            only=dirty if only is not None and len(dirty) < layered.MAX_CHANGES else None,
        )  # fmt: skip
        tip = await fetch(plain())  # brought back again, with the daemon's commit
        dirty = []
    return Collected(tip, tuple(dirty))


class Workspace(Protocol):
    """Where a child's commit comes in and its work goes out, by its placement."""

    async def make(self, run: RunPlace, commit: str) -> None:
        """The place the child starts in, made from ``commit`` (nothing of an earlier one)."""
        ...

    async def collect(self, run: RunPlace, end: Exited, plan: Placement) -> Collected:
        """What the child left, taken back and recorded under ``plan.ref``."""
        ...


class LocalWorkspace:
    """The run's checkout on this host: made anew per execution, brought back from."""

    def __init__(self, branches: RunBranches) -> None:
        self.branches = branches

    async def make(self, run: RunPlace, commit: str) -> None:
        await self.branches.fresh(run, commit)

    async def collect(self, run: RunPlace, end: Exited, plan: Placement) -> Collected:
        branches = self.branches
        return await take_back(
            branches.repo, run.worktree, run.branch, plan.ref, plan.base,
            branches.isolation(run),
            listing=plan.listing, auto_commit=plan.auto_commit, identity=plan.identity,
            timeout=CHECKOUT_S,
            also=(f"refs/heads/{run.branch}",) if plan.advance else (),
            made=branches.layered(run.run_id),
        )  # fmt: skip


class ShippedWorkspace:
    """A child on another machine: the node makes its checkout from the commit and
    takes the work back there (``take_back`` into its cache); the executor ships it
    here, checked and recorded under ``plan.ref``, in the stage's end."""

    def __init__(self, branches: RunBranches) -> None:
        self.branches = branches

    async def make(self, run: RunPlace, commit: str) -> None:
        """Nothing here: the commit is shipped with the launch, the node makes the place."""

    async def collect(self, run: RunPlace, end: Exited, plan: Placement) -> Collected:
        work = end.work
        if work is None:
            raise CheckoutError("the remote executor reported an exit without the work (a bug)")
        if plan.advance:
            # The run's checkout here shows the work so far, as after a local stage: a
            # person reads a kept run's worktree, and a next local stage starts in it.
            await self.branches.fresh(run, work.tip)
            self.branches.untouched(run, work.tip)
            await self.branches.advance(run, work.tip)
        return work
