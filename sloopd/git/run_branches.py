"""A run's branch through its stages: where it starts, what each stage leaves, what merges.

The checkout is the agent's (hostile once it has run); the refs in the main
repository are the daemon's.  After every stage execution the checkout's branch
is brought back under ``refs/sloop/runs/<run>/…`` (``checkout.bring_back``: a
pack over a pipe, checked to descend from the run's base), and the commit is
recorded on the stage row.  Stages that produce work (a gating agent or command
stage judged by its exit code) move the run's branch ``refs/heads/<branch>``;
stages that review it (a reported verdict, a panel seat, an advisory stage) run
on a pinned commit, and whatever they commit or leave behind is recorded as
discarded and reset away.  ``ff_only`` merges ``Walk.merge_target()``, so the
commit main gets is the one the last gating stage ran on, byte for byte.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Literal, Protocol

from sloopd.git import checkout, conflicts, intake, layered, runner, scratch
from sloopd.git import ops as gitops
from sloopd.git.checkout import CheckoutError, Isolation
from sloopd.git.conflicts import Hunks
from sloopd.git.layered import Layered
from sloopd.git.shared_trees import SharedTrees
from sloopd.util import quoting, trees
from sloopd.util.trash import Trash

# How a sync conflict's hunks name the run's side (the other is main, or the candidate).
WORK_LABEL = "the run's work"


def repository_identity(repo: Path) -> tuple[str, str]:
    """user.name and user.email as git resolves them for ``repo`` (the operator's global
    and system config included), or Sloop's fallback."""
    values = []
    keys = (("user.name", gitops.FALLBACK_NAME), ("user.email", gitops.FALLBACK_EMAIL))
    for key, fallback in keys:
        values.append(runner.config_value(repo, key) or fallback)
    return values[0], values[1]


def _conflicted(doing: str, paths: tuple[str, ...], hunks: Hunks | None) -> gitops.GitResult:
    # The agent's branch chose these paths: quoted a few, the rest counted (the stage
    # row lists them, bounded).
    return gitops.GitResult(
        ok=False,
        reason=f"{doing} conflicts in: {quoting.quote_names(paths)}",
        paths=paths,
        hunks=hunks,
    )


class RunPlace(Protocol):
    """What the branches need of a run (``sloopd.runs.runstate.RunFacts`` is one)."""

    @property
    def run_id(self) -> str: ...

    @property
    def branch(self) -> str: ...

    @property
    def worktree(self) -> Path: ...

    @property
    def base(self) -> str: ...  # "" until the run's driver prepared it


class RunBranches:
    def __init__(
        self,
        repo: Path,
        state_dir: Path,
        common_dir: Path,
        *,
        sandboxed: Callable[[str], bool],
        protected: tuple[Path, ...],
        trees: SharedTrees | None = None,
    ) -> None:
        self.repo = repo
        self.state_dir = state_dir
        self._sandboxed = sandboxed
        self.common_dir = common_dir  # the repository's git directory, resolved
        self.protected = protected
        # The daemon's own commits (sync merges, commit = "auto") carry the repository's
        # identity, as a person's merge would, or Sloop's fallback on a bare CI host.
        self.identity = repository_identity(repo)
        # Runs whose checkout ``create`` made and no child has entered yet: the first
        # execution may start in it as it is (it is exactly what ``fresh`` would make).
        self._untouched: dict[str, str] = {}
        # Per run, its last sync's commit and the main commit it was built on (which it
        # descends from, merged or rebased): what ``ff_only`` need not ask git about again.
        self._merged_onto: dict[str, tuple[str, str]] = {}
        # Checkouts set aside by ``fresh``, deleted off the stage's critical path.
        self.trash = Trash(state_dir / "trash")
        # Copy-on-write checkouts (sloopd.git.layered) for sandboxed runs; None: whole ones.
        self.trees = trees
        self._layered: dict[str, Layered] = {}
        self.keeper = layered.Keeper(self._let_go)
        # Where sync's merges are computed: no checkout, no agent's settings.
        self.scratch = scratch.ScratchRepository(state_dir / "merge.git", common_dir / "objects")
        # Inboxes a killed daemon left in the main objects (sloopd.git.intake).
        intake.sweep(common_dir / "objects")

    def isolation(self, facts: RunPlace) -> Isolation:
        home = self.state_dir / "runs" / facts.run_id / "git-home"
        home.mkdir(parents=True, exist_ok=True)
        return Isolation(
            objects=self.common_dir / "objects",
            home=home,
            hide=self.protected,
            bwrap="bwrap" if self._sandboxed(facts.run_id) else None,
            overlay=made.overlay if (made := self._layered.get(facts.run_id)) else None,
        )

    def layered(self, run_id: str) -> Layered | None:
        """The run's copy-on-write checkout as its last execution was given it."""
        return self._layered.get(run_id)

    def _layering(self, run_id: str) -> bool:
        # Only in the sandbox: the merged view exists in the namespaces it mounts.
        return self.trees is not None and self._sandboxed(run_id)

    async def _make_layered(self, facts: RunPlace, commit: str) -> None:
        """A fresh layer at ``commit``; the previous execution's goes in O(1)."""
        assert self.trees is not None
        previous = self._layered.pop(facts.run_id, None)
        near = tuple(c for c in (facts.base, previous.commit if previous else "") if c)
        if previous is not None:
            self.trees.release(previous.chain)
            self._set_aside(previous.place)
        worktree = facts.worktree
        if worktree.is_dir() and not worktree.is_symlink() and any(worktree.iterdir()):
            self._set_aside(worktree)  # a whole checkout of before: out of the mount's way
        worktree.mkdir(mode=0o700, parents=True, exist_ok=True)
        places = self.state_dir / "runs" / facts.run_id / "layers"
        places.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._layered[facts.run_id] = await layered.make(
            self.trees, places, facts.branch, commit, near
        )

    def places(self, facts: RunPlace) -> tuple[Path, ...]:
        """Where a run's git writes: its checkout, the main repository, the state directory
        (the run's git HOME, the store): the filesystems a full disk is looked for on."""
        return (facts.worktree, self.common_dir, self.state_dir)

    @staticmethod
    def ref(facts: RunPlace, name: str) -> str:
        return f"refs/sloop/runs/{facts.run_id}/{name}"

    async def create(
        self,
        facts: RunPlace,
        main: str,
        *,
        timeout: float = runner.HOOK_DEFAULT_S,
        interrupt: asyncio.Event | None = None,
    ) -> str:
        """The run's checkout and branch at main's tip now; returns that base commit.

        Making the branch runs the repository's ``reference-transaction`` hook: it has
        ``timeout`` (the repository's ``git_timeout``), and ``interrupt`` (an abort, a
        stopping daemon) kills it with its git at once (``GitInterrupted``)."""
        repo = self.repo
        base = await gitops.rev_parse(repo, main)
        if base is None:
            raise gitops.GitError(f"cannot start the run: {main!r} names no commit in {repo}")
        branch = f"refs/heads/{facts.branch}"
        if await gitops.rev_parse(repo, branch) is not None:
            raise gitops.GitError(f"cannot start the run: branch {facts.branch} already exists")
        try:
            if self._layering(facts.run_id):
                await checkout.check_ref(f"refs/heads/{facts.branch}", runner.QUICK_S)
                await self._make_layered(facts, base)
            else:
                await checkout.create(
                    repo, facts.worktree, facts.branch, base, timeout=runner.CHECKOUT_S
                )
        except CheckoutError as exc:
            # A plain GitError: the run driver settles a run whose checkout could not be
            # made (sloopd.runs.disk_full) and lets a CheckoutError of its own through.
            raise gitops.GitError(str(exc)) from exc
        # One transaction: the base pinned, and the branch made only where there is none.
        await gitops.update_refs(
            repo,
            {self.ref(facts, "base"): base},
            created={branch: base},
            timeout=timeout,
            interrupt=interrupt,
        )
        self._untouched[facts.run_id] = base
        return base

    async def fresh(self, facts: RunPlace, commit: str) -> None:
        """The checkout the next execution starts in: made anew by the daemon from ``commit``.

        Nothing of the previous execution's ``.git`` survives (config, hooks, info,
        ``refs/replace``, grafts, index bits such as skip-worktree) nor its files: the
        only thing one stage hands the next is the commit brought back and checked.
        """
        if self._untouched.pop(facts.run_id, None) == commit:
            return
        if self._layering(facts.run_id):
            await self._make_layered(facts, commit)
            return
        if not self._set_aside(facts.worktree):
            await checkout.remove(facts.worktree)
        await checkout.create(
            self.repo, facts.worktree, facts.branch, commit, timeout=runner.CHECKOUT_S
        )

    def untouched(self, facts: RunPlace, commit: str) -> None:
        """Only the daemon's own git has worked in the checkout since ``fresh`` made it, and
        it stands at ``commit`` (a stage shipped back from a node): the next execution may
        start in it as it is."""
        self._untouched[facts.run_id] = commit

    def merged_onto_main(self, facts: RunPlace, tip: str) -> str | None:
        """The main commit ``tip`` descends from as this run's sync built it, if it did."""
        merged, onto = self._merged_onto.get(facts.run_id, ("", ""))
        return onto if merged == tip else None

    def forget(self, run_id: str) -> None:
        """The run's driver ended: nothing is kept for it (a run that merged right after
        a passing sync never asks for a fresh checkout again)."""
        self._untouched.pop(run_id, None)
        self._merged_onto.pop(run_id, None)
        made = self._layered.pop(run_id, None)
        if made is not None:
            self._let_go(made)

    async def keep(self, facts: RunPlace) -> None:
        """A run that did not merge keeps its checkout for a person to read: a
        copy-on-write one is copied whole into its folder, as its last stage left it
        (in the sandbox: what is copied is the agent's).  Before the run settles when
        its tree is small (a person, or a script, reads it as soon as the run shows its
        end, as before 0.9.0); for a tree of more than ``layered.KEEP_AT_ONCE`` files,
        after it (``layered.Keeper``), its shared trees held till then."""
        made = self._layered.get(facts.run_id)
        if made is None or self.trees is None:
            return
        isolation = self.isolation(facts)
        if self.trees.entries(made.chain[0]) <= layered.KEEP_AT_ONCE:
            await layered.copy_out(made, facts.worktree, isolation)
            return
        del self._layered[facts.run_id]  # the keeper lets its trees go, not ``forget``
        self.keeper.keep(made, facts.worktree, isolation)

    def _let_go(self, made: Layered) -> None:
        if self.trees is not None:
            self.trees.release(made.chain)

    def _set_aside(self, worktree: Path) -> bool:
        """A checkout (or a run's state folder) out of the way at once, deleted in the
        background (``sloopd.util.trash``); False: it cannot be renamed, delete it."""
        try:
            return self.trash.set_aside(worktree)
        except trees.NotAFolder as exc:
            raise CheckoutError(str(exc)) from exc

    def stop_sweeping(self) -> None:
        """The daemon stops: the trash's backlog never holds the stop (``Trash.stop``),
        nor a kept checkout still being copied."""
        self.trash.stop()
        self.keeper.stop()

    async def base(self, facts: RunPlace) -> str:
        if facts.base:
            return facts.base  # the driver's facts carry it from create: no git needed
        sha = await gitops.rev_parse(self.repo, self.ref(facts, "base"))
        if sha is None:
            raise CheckoutError(f"{facts.run_id} has no recorded base commit")
        return sha

    async def advance(self, facts: RunPlace, sha: str) -> None:
        """The run's branch in the main repository shows the work so far."""
        await gitops.update_ref(self.repo, f"refs/heads/{facts.branch}", sha)

    async def sync(
        self,
        facts: RunPlace,
        main: str,
        mode: Literal["merge", "rebase"],
        work: str,
        name: str,
        onto: tuple[str, tuple[str, ...]] | None = None,
        *,
        timeout: float,
    ) -> gitops.GitResult:
        """Bring main into the work (commit ``work``); the result's ``head`` is the commit
        recorded as execution ``name`` and now the run's branch.

        ``onto``: at a landing, the merge queue's commit to build on (main's tip, or the
        candidate of the run ahead) and the branches of the runs whose work it holds.

        Both modes are computed in the daemon's scratch repository
        (``sloopd.git.scratch``): no checkout, so nothing an agent left in one applies,
        and no driver, filter or attribute anyone named either, a ``.gitattributes`` the
        agent committed included.

        ``timeout`` (the run's ``repo.git_timeout``) bounds the merge or the rebase (the
        whole replay) and the ``update-ref`` that records it, which runs the
        repository's ``reference-transaction`` hook; past it the sync fails with a reason.
        """
        sha = onto[0] if onto is not None else await gitops.rev_parse(self.repo, main)
        if sha is None:
            raise gitops.GitError(f"cannot sync: {main!r} names no commit")
        ahead = onto[1] if onto is not None else ()
        # The queue's runs ahead are named: main's history says what each merge held.
        queued = f" with {', '.join(ahead)} queued ahead" if ahead else ""
        source = main + queued
        # A ScratchError is a GitError: the stage fails with its sentence.
        if mode == "merge":
            doing = f"merging {source} into the branch"
            merged = await self.scratch.merge(
                work,
                sha,
                f"Merge branch '{main}'{queued} into {facts.branch}",
                identity=self.identity,
                timeout=timeout,
            )
        else:
            doing = f"rebasing the branch onto {source}"
            merged = await self.scratch.rebase(work, sha, identity=self.identity, timeout=timeout)
        if merged.commit is None:
            # The marked regions from the tree git wrote; in a rebase main is "ours".
            sides = (WORK_LABEL, source) if mode == "merge" else (source, WORK_LABEL)
            hunks = await self._merge_hunks(merged, *sides)
            return _conflicted(doing, merged.conflicts, hunks)
        # The execution's record and the run's branch move together.
        moves = {
            self.ref(facts, name): merged.commit,
            f"refs/heads/{facts.branch}": merged.commit,
        }
        await gitops.update_refs(self.repo, moves, "sloop: sync", timeout=timeout)
        # Either way the result descends from ``sha``: ff_only need not ask again.
        self._merged_onto[facts.run_id] = (merged.commit, sha)
        return gitops.GitResult(ok=True, head=merged.commit)

    async def _merge_hunks(self, merged: scratch.Merged, ours: str, theirs: str) -> Hunks | None:
        """The marked regions of a merge's conflicted files, from the tree git wrote."""
        if merged.tree is None:
            return None
        found: list[str] = []
        for path in merged.conflicts[: conflicts.FILES_READ]:
            try:
                text = await self.scratch.blob(
                    merged.tree, path, conflicts.FILE_BYTES, runner.CHECKOUT_S
                )
            except scratch.ScratchError:
                break  # the paths still say what conflicted
            if text is not None:
                found += conflicts.of_file(path, text, ours, theirs)
            if len(found) > conflicts.HUNK_LINES:
                break
        clipped = len(merged.conflicts) > conflicts.FILES_READ
        return conflicts.bounded(found, clipped)

    async def remove(self, path: Path) -> None:
        """A run's checkout or state folder, or (from a 0.4 store) its git worktree: gone
        from its place at once, deleted in the background (a merged run settles without
        waiting for thousands of unlinks)."""
        if (path / ".git").is_file():
            await gitops.remove_worktree(self.repo, path)
            return
        await self.keeper.cancel(path)  # no copy fills a folder once it is set aside
        if not self._set_aside(path):
            await checkout.remove(path)
