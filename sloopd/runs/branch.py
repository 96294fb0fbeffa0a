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
import contextlib
import errno
import os
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sloopd.core.paths import Layout, git_common_dir
from sloopd.flows.flow import Stage
from sloopd.git import checkout, checkout_edits, conflicts, runner, scratch
from sloopd.git import ops as gitops
from sloopd.git.checkout import CheckoutError, Isolation
from sloopd.git.conflicts import Hunks
from sloopd.runs.runstate import RunFacts
from sloopd.util import quoting, trees

# Every git call on a checkout or for it has this deadline; a hook or a huge
# repository that takes longer fails the stage with a reason instead of hanging it.
GIT_TIMEOUT_S = 300.0
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


def produces(stage: Stage) -> bool:
    """Whether a stage's commits become the run's work (else it reviews a pinned commit)."""
    return (
        stage.action in ("agent", "command")
        and stage.result_check == "exit_code"
        and not stage.advisory
        # A merge-queue gate runs on the candidate and never moves it (DESIGN rule 9).
        and not stage.gate
    )


@dataclass(frozen=True, slots=True)
class Discarded:
    commit: str | None
    paths: tuple[str, ...]

    def row(self, seat: int | None) -> dict[str, Any]:
        """The stage row's ``discarded`` entry: the paths as many as the cap keeps (a
        reviewer chooses how many it leaves), ``paths_omitted`` counting the rest."""
        listed, omitted = quoting.listed_paths(self.paths)
        entry: dict[str, Any] = {"commit": self.commit, "paths": list(listed)}
        if omitted:
            entry["paths_omitted"] = omitted
        if seat is not None:
            entry["reviewer"] = seat
        return entry


class RunBranches:
    def __init__(
        self, layout: Layout, *, sandboxed: Callable[[str], bool], protected: tuple[Path, ...]
    ) -> None:
        self.layout = layout
        self._sandboxed = sandboxed
        self.common_dir = Path(os.path.realpath(git_common_dir(layout.repo)))
        self.protected = protected
        # The daemon's own commits (sync merges, commit = "auto") carry the repository's
        # identity, as a person's merge would, or Sloop's fallback on a bare CI host.
        self.identity = repository_identity(layout.repo)
        # Runs whose checkout ``create`` made and no child has entered yet: the first
        # execution may start in it as it is (it is exactly what ``fresh`` would make).
        self._untouched: dict[str, str] = {}
        # Per run, its last sync's commit and the main commit it was built on (which it
        # descends from, merged or rebased): what ``ff_only`` need not ask git about again.
        self._merged_onto: dict[str, tuple[str, str]] = {}
        # Checkouts set aside by ``fresh``, deleted off the stage's critical path.
        self.trash = layout.state_dir / "trash"
        self._sweeping: set[asyncio.Task[None]] = set()
        self._sweep_again = False
        self._stopping = threading.Event()  # set by stop_sweeping; read in the sweep's thread
        # Where sync's merges are computed: no checkout, no agent's settings.
        self.scratch = scratch.ScratchRepository(
            layout.state_dir / "merge.git", self.common_dir / "objects"
        )

    def isolation(self, facts: RunFacts) -> Isolation:
        home = self.layout.state_dir / "runs" / facts.run_id / "git-home"
        home.mkdir(parents=True, exist_ok=True)
        return Isolation(
            objects=self.common_dir / "objects",
            home=home,
            hide=self.protected,
            bwrap="bwrap" if self._sandboxed(facts.run_id) else None,
        )

    def places(self, facts: RunFacts) -> tuple[Path, ...]:
        """Where a run's git writes: its checkout, the main repository, the state directory
        (the run's git HOME, the store): the filesystems a full disk is looked for on."""
        return (facts.worktree, self.common_dir, self.layout.state_dir)

    @staticmethod
    def ref(facts: RunFacts, name: str) -> str:
        return f"refs/sloop/runs/{facts.run_id}/{name}"

    @staticmethod
    def execution_name(facts: RunFacts, stage: Stage, attempt: int, seat: int | None) -> str:
        # Stage names are free text; refs are not: name executions by flow position.
        index = facts.flow.index(stage.name)
        return f"{index}-{attempt}" + (f"-seat{seat}" if seat is not None else "")

    async def create(
        self,
        facts: RunFacts,
        main: str,
        *,
        timeout: float = GIT_TIMEOUT_S,
        interrupt: asyncio.Event | None = None,
    ) -> str:
        """The run's checkout and branch at main's tip now; returns that base commit.

        Making the branch runs the repository's ``reference-transaction`` hook: it has
        ``timeout`` (the repository's ``git_timeout``), and ``interrupt`` (an abort, a
        stopping daemon) kills it with its git at once (``GitInterrupted``)."""
        repo = self.layout.repo
        base = await gitops.rev_parse(repo, main)
        if base is None:
            raise gitops.GitError(f"cannot start the run: {main!r} names no commit in {repo}")
        branch = f"refs/heads/{facts.branch}"
        if await gitops.rev_parse(repo, branch) is not None:
            raise gitops.GitError(f"cannot start the run: branch {facts.branch} already exists")
        try:
            await checkout.create(repo, facts.worktree, facts.branch, base, timeout=GIT_TIMEOUT_S)
        except CheckoutError as exc:
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

    async def fresh(self, facts: RunFacts, commit: str) -> None:
        """The checkout the next execution starts in: made anew by the daemon from ``commit``.

        Nothing of the previous execution's ``.git`` survives (config, hooks, info,
        ``refs/replace``, grafts, index bits such as skip-worktree) nor its files: the
        only thing one stage hands the next is the commit brought back and checked.
        """
        if self._untouched.pop(facts.run_id, None) == commit:
            return
        if not self._set_aside(facts.worktree):
            await checkout.remove(facts.worktree)
        await checkout.create(
            self.layout.repo, facts.worktree, facts.branch, commit, timeout=GIT_TIMEOUT_S
        )

    def untouched(self, facts: RunFacts, commit: str) -> None:
        """Only the daemon's own git has worked in the checkout since ``fresh`` made it, and
        it stands at ``commit`` (a stage shipped back from a node): the next execution may
        start in it as it is."""
        self._untouched[facts.run_id] = commit

    def merged_onto_main(self, facts: RunFacts, tip: str) -> str | None:
        """The main commit ``tip`` descends from as this run's sync built it, if it did."""
        merged, onto = self._merged_onto.get(facts.run_id, ("", ""))
        return onto if merged == tip else None

    def forget(self, run_id: str) -> None:
        """The run's driver ended: nothing is kept for it (a run that merged right after
        a passing sync never asks for a fresh checkout again)."""
        self._untouched.pop(run_id, None)
        self._merged_onto.pop(run_id, None)

    def _set_aside(self, worktree: Path) -> bool:
        """Move a checkout (or a run's state folder) out of the way at once (a rename) and
        delete it, with whatever earlier ones a crash left there, off the loop and off the
        stage's path; False when it cannot be renamed (another file system): delete it."""
        if not worktree.exists() and not worktree.is_symlink():
            return True
        if worktree.is_symlink() or not worktree.is_dir():
            raise CheckoutError(f"refusing to delete {worktree}: it is not a directory.")
        self.trash.mkdir(mode=0o700, exist_ok=True)
        try:
            worktree.rename(self.trash / f"{worktree.name}-{uuid.uuid4().hex}")
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise
            return False
        # One sweeper at a time, which goes on while entries come: eight sweeps of the
        # same folder at once deleted the same trees in eight threads, all of them
        # holding the loop's GIL in turn.
        self._sweep_again = True
        if not self._sweeping:
            task = asyncio.get_running_loop().create_task(self._sweep_while_needed())
            self._sweeping.add(task)
            task.add_done_callback(self._sweeping.discard)
        return True

    def stop_sweeping(self) -> None:
        """The daemon stops: the sweep ends after the entry it is deleting. A backlog of
        set-aside checkouts (thousands of files each after a long drain) held the stop
        past systemd's and the benchmark's grace, until SIGKILL; what is left is swept
        with the next daemon's first set-aside."""
        self._stopping.set()

    async def _sweep_while_needed(self) -> None:
        while self._sweep_again and not self._stopping.is_set():
            self._sweep_again = False
            await asyncio.to_thread(self._sweep)

    def _sweep(self) -> None:
        for entry in self.trash.iterdir():
            if self._stopping.is_set():
                return
            with contextlib.suppress(OSError, trees.NotAFolder):
                trees.remove_blocking(entry)

    async def base(self, facts: RunFacts) -> str:
        if facts.base:
            return facts.base  # the driver's facts carry it from create: no git needed
        sha = await gitops.rev_parse(self.layout.repo, self.ref(facts, "base"))
        if sha is None:
            raise CheckoutError(f"{facts.run_id} has no recorded base commit")
        return sha

    async def bring_back(self, facts: RunFacts, name: str, *, advance: bool = False) -> str:
        """The checkout's branch as execution ``name``'s ref (``checkout.bring_back``);
        ``advance``: the run's branch moves to it in the same transaction."""
        checkout_edits.require_present(facts.worktree)
        isolation = self.isolation(facts)
        upload = (
            checkout.upload_pack_command(facts.worktree, isolation) if isolation.bwrap else None
        )
        return await self._fetch(facts, name, upload, advance)

    async def bring_back_listing(
        self, facts: RunFacts, name: str, *, advance: bool = False
    ) -> tuple[str, list[str]]:
        """``bring_back`` and ``uncommitted`` at once: the listing runs first in the
        sandbox that serves the fetch (one bwrap, the checkout read-only in both)."""
        isolation = self.isolation(facts)
        if not isolation.bwrap:
            sha = await self.bring_back(facts, name, advance=advance)
            return sha, await self.uncommitted(facts)
        checkout_edits.require_present(facts.worktree)
        upload = checkout_edits.listing_upload_pack(facts.worktree, facts.branch, isolation)
        checkout_edits.unlisted(isolation)
        try:
            sha = await self._fetch(facts, name, upload, advance)
        except CheckoutError as exc:
            # The listing's own failure first, as when it ran before the bring-back.
            checkout_edits.listed(facts.worktree, isolation, exc.said)
            raise
        return sha, checkout_edits.listed(facts.worktree, isolation)

    async def _fetch(
        self, facts: RunFacts, name: str, upload: list[str] | None, advance: bool
    ) -> str:
        return await checkout.bring_back(
            self.layout.repo,
            facts.worktree,
            facts.branch,
            self.ref(facts, name),
            await self.base(facts),
            sandboxed_upload_pack=upload,
            timeout=GIT_TIMEOUT_S,
            also=(f"refs/heads/{facts.branch}",) if advance else (),
        )

    async def uncommitted(self, facts: RunFacts) -> list[str]:
        return await checkout_edits.uncommitted(
            facts.worktree, facts.branch, self.isolation(facts), timeout=GIT_TIMEOUT_S
        )

    async def commit_all(self, facts: RunFacts, message: str) -> bool:
        return await checkout_edits.commit_all(
            facts.worktree,
            facts.branch,
            message,
            self.isolation(facts),
            identity=self.identity,
            timeout=GIT_TIMEOUT_S,
        )

    async def advance(self, facts: RunFacts, sha: str) -> None:
        """The run's branch in the main repository shows the work so far."""
        await gitops.update_ref(self.layout.repo, f"refs/heads/{facts.branch}", sha)

    async def review_leftovers(self, facts: RunFacts, pinned: str, name: str) -> Discarded | None:
        """What a reviewing execution changed on its pinned commit (recorded, never merged;
        the next execution starts from a fresh checkout anyway)."""
        tip, listed = await self.bring_back_listing(facts, name)
        paths = tuple(listed)
        if tip == pinned and not paths:
            return None
        return Discarded(tip if tip != pinned else None, paths)

    async def sync(
        self,
        facts: RunFacts,
        main: str,
        mode: Literal["merge", "rebase"],
        work: str,
        name: str,
        onto: tuple[str, tuple[str, ...]] | None = None,
    ) -> gitops.GitResult:
        """Bring main into the work (commit ``work``); the result's ``head`` is the commit
        recorded as execution ``name`` and now the run's branch.

        ``onto``: at a landing, the merge queue's commit to build on (main's tip, or the
        candidate of the run ahead) and the branches of the runs whose work it holds.

        Both modes are computed in the daemon's scratch repository
        (``sloopd.git.scratch``): no checkout, so nothing an agent left in one applies,
        and no driver, filter or attribute anyone named either, a ``.gitattributes`` the
        agent committed included.
        """
        sha = onto[0] if onto is not None else await gitops.rev_parse(self.layout.repo, main)
        if sha is None:
            raise gitops.GitError(f"cannot sync: {main!r} names no commit")
        ahead = onto[1] if onto is not None else ()
        # The queue's runs ahead are named: main's history says what each merge held.
        queued = f" with {', '.join(ahead)} queued ahead" if ahead else ""
        source = main + queued
        try:
            if mode == "merge":
                doing = f"merging {source} into the branch"
                merged = await self.scratch.merge(
                    work,
                    sha,
                    f"Merge branch '{main}'{queued} into {facts.branch}",
                    identity=self.identity,
                    timeout=GIT_TIMEOUT_S,
                )
            else:
                doing = f"rebasing the branch onto {source}"
                merged = await self.scratch.rebase(
                    work, sha, identity=self.identity, timeout=GIT_TIMEOUT_S
                )
        except scratch.ScratchError as exc:
            raise gitops.GitError(str(exc)) from exc
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
        await gitops.update_refs(self.layout.repo, moves, "sloop: sync")
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
                    merged.tree, path, conflicts.FILE_BYTES, GIT_TIMEOUT_S
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
            await gitops.remove_worktree(self.layout.repo, path)
            return
        if not self._set_aside(path):
            await checkout.remove(path)
