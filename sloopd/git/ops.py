"""Git operations for the walk on the main repository: worktrees, refs, the ``ff_only`` merge.

Every call is ``git -C <dir> …`` through ``asyncio.create_subprocess_exec`` (never a shell),
so a path or branch name is never interpreted. Expected outcomes of a stage (a conflict, a
moved ``main``, a dirty checkout) come back as a ``GitResult`` with a reason for a person;
``GitError`` is kept for git failing in a way the walk cannot explain.

Every call goes through ``sloopd.git.runner``: a deadline and cancellation (a hook that
hangs fails the stage with a reason instead of holding the run) and the one scrubbed
environment.  The call that moves ``main`` also takes the run's ``interrupt``: an
``abort`` or a stopping daemon kills it and its hooks at once, and the ref decides.

The walker calls it, and tests drive it on real repositories alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sloopd.git import runner
from sloopd.git.conflicts import Hunks
from sloopd.git.errors import GitError as GitError
from sloopd.git.errors import GitInterrupted as GitInterrupted
from sloopd.git.errors import GitTimeout as GitTimeout

# Fallback identity for the merge commits ``sync`` makes on CI hosts with no git identity
# (sloopd.git.run_branches.repository_identity).
FALLBACK_NAME = "sloop"
FALLBACK_EMAIL = "sloop@localhost"

# Deadlines: runner.QUICK_S unless the caller says; a run says for the calls its start,
# sync and merge make that may run hooks: its ``repo.git_timeout`` (ff_only's default,
# for a caller with no run, is that setting's own: runner.HOOK_DEFAULT_S).


@dataclass(frozen=True)
class GitResult:
    ok: bool
    reason: str | None = None  # one sentence for a person, set when not ok
    paths: tuple[str, ...] = ()  # conflicting paths for sync; empty otherwise
    head: str | None = None  # resulting commit sha when ok (branch tip / new main)
    final: bool = False  # no return_to can mend it: the run ends failed
    hunks: Hunks | None = None  # a sync conflict's marked regions, bounded (git.conflicts)


async def _git(
    cwd: Path,
    *args: str,
    check: bool = True,
    timeout: float = runner.QUICK_S,
    interrupt: asyncio.Event | None = None,
    settings: tuple[str, ...] = (),
) -> tuple[int, str, str]:
    """Run ``git -C cwd args``; raise ``GitError`` on a non-zero exit when ``check``.
    ``settings`` are ``key=value`` pairs given as ``-c`` before ``args``."""
    config = [part for setting in settings for part in ("-c", setting)]
    argv = runner.git(cwd, *config, *args)
    done = await runner.run_or_raise(
        argv,
        timeout=timeout,
        interrupt=interrupt,
        timed_out=lambda: GitTimeout(
            f"{shlex.join(argv)} did not finish within {timeout:.3g} s and was killed "
            "(a hook that waits for input or hangs?)"
        ),
        interrupted=lambda: _interrupted(argv),
    )
    code, stdout, stderr = done.returncode, done.stdout, done.stderr
    if check and code != 0:
        raise GitError(f"{shlex.join(argv)} exited {code}: {stderr.strip() or stdout.strip()}")
    return code, stdout, stderr


def _interrupted(argv: list[str]) -> GitInterrupted:
    return GitInterrupted(
        f"{shlex.join(argv)} was killed, with the hooks it ran, when the run was stopped"
    )


def _nul_split(text: str) -> list[str]:
    return [item for item in text.split("\0") if item]


async def _status_paths(worktree: Path, *options: str) -> list[str]:
    """Paths from ``git status --porcelain -z``; -z keeps odd file names unquoted."""
    _, out, _ = await _git(worktree, "status", "--porcelain", "-z", *options)
    items = _nul_split(out)
    paths: list[str] = []
    i = 0
    while i < len(items):
        entry = items[i]
        paths.append(entry[3:])
        # A rename or copy is followed by its source path as a separate item.
        i += 2 if entry[0] in "RC" or entry[1] in "RC" else 1
    return paths


async def rev_parse(repo: Path, rev: str) -> str | None:
    """The commit ``rev`` names, or None when it names none (callers decide if that is fatal)."""
    code, out, _ = await _git(
        repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False
    )
    return out.strip() if code == 0 and out.strip() else None


async def contains(repo: Path, ref: str, sha: str) -> bool:
    """Whether ``ref`` holds ``sha`` (is it or descends from it); GitError if git cannot say."""
    code, _, err = await _git(repo, "merge-base", "--is-ancestor", sha, ref, check=False)
    if code in (0, 1):
        return code == 0
    raise GitError(f"cannot tell whether {ref} holds {sha} in {repo}: {err.strip()}")


async def release_stale_locks(
    repo: Path, ref: str, *, since_ms: int, checkout: Path | None = None, wait: float = 2.0
) -> list[Path]:
    """Remove the lock files a killed merge left: ``<ref>.lock``, and in the checkout
    ``index.lock``, ``HEAD.lock`` and ``ORIG_HEAD.lock`` (``merge`` updates both refs).

    A live git holds such a lock for milliseconds, so one still there after ``wait``
    seconds and created after the merge was announced (``since_ms``) is the killed
    merge's own; older ones belong to someone else and are left alone.  Without this,
    every later merge would fail on "Unable to create '….lock': File exists".
    """
    candidates = [await _git_path(repo, f"{ref}.lock")]
    if checkout is not None:
        for name in ("index.lock", "HEAD.lock", "ORIG_HEAD.lock"):
            candidates.append(await _git_path(checkout, name))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while any(c.exists() for c in candidates) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    removed = []
    for lock in candidates:
        try:
            if lock.stat().st_mtime * 1000 >= since_ms - 1000:
                lock.unlink()
                removed.append(lock)
        except FileNotFoundError:
            continue
    return removed


async def _git_path(repo: Path, name: str) -> Path:
    _, out, _ = await _git(repo, "rev-parse", "--path-format=absolute", "--git-path", name)
    return Path(out.strip())


async def update_ref(repo: Path, ref: str, sha: str, expect: str | None = None) -> None:
    """Point ``ref`` at ``sha``; with ``expect`` only if it is there now ("" : absent)."""
    args = ["update-ref", "-m", "sloop", ref, sha]
    if expect is not None:
        args.append(expect or "0" * 40)
    await _git(repo, *args)


async def update_refs(
    repo: Path,
    moves: dict[str, str],
    message: str = "sloop",
    *,
    created: dict[str, str] | None = None,
    timeout: float = runner.QUICK_S,
    interrupt: asyncio.Event | None = None,
) -> None:
    """Point every ref at its sha in one transaction: all move, or none does.

    ``created`` are refs made in the same transaction that must not exist yet.
    ``interrupt`` (an abort, a stopping daemon) kills git and its hooks at once (a
    ``reference-transaction`` hook that hangs), as past ``timeout``; the lock files
    the killed git held are removed, and ``GitInterrupted`` or ``GitTimeout`` says so.
    What moved is for the caller to read from the refs: a hook killed after the
    ``committed`` state has let every ref move."""
    lines = "".join(f"update {ref} {sha}\n" for ref, sha in moves.items())
    lines += "".join(f"create {ref} {sha}\n" for ref, sha in (created or {}).items())
    argv = runner.git(repo, "update-ref", "-m", message, "--stdin")
    started_ms = int(time.time() * 1000)
    try:
        done = await runner.run_or_raise(
            argv,
            timeout=timeout,
            stdin=lines.encode(),
            interrupt=interrupt,
            timed_out=lambda: GitTimeout(f"{shlex.join(argv)} did not finish within {timeout:g} s"),
            interrupted=lambda: _interrupted(argv),
        )
    except (GitTimeout, GitInterrupted):
        # git and its hooks are dead: the locks they held can only be stale.
        for ref in (*moves, *(created or {})):
            await release_stale_locks(repo, ref, since_ms=started_ms, wait=0.0)
        raise
    if done.returncode != 0:
        raise GitError(f"{shlex.join(argv)} exited {done.returncode}: {done.stderr.strip()}")


async def list_worktrees(repo: Path) -> list[tuple[Path, str | None]]:
    """(path, branch ref or None when detached or bare), the main working tree first."""
    _, out, _ = await _git(repo, "worktree", "list", "--porcelain")
    entries: list[tuple[Path, str | None]] = []
    for block in out.strip().split("\n\n"):
        lines = block.splitlines()
        if not lines or not lines[0].startswith("worktree "):
            continue
        branch = next((ln[7:] for ln in lines if ln.startswith("branch ")), None)
        entries.append((Path(lines[0][9:]), branch))
    return entries


async def checkout_of(repo: Path, ref: str) -> Path | None:
    """The working tree where ``ref`` is checked out, if any."""
    return next((p for p, branch in await list_worktrees(repo) if branch == ref), None)


async def remove_worktree(repo: Path, path: Path) -> None:
    """Remove a run's worktree, keeping its branch; removing one already gone is fine.

    A directory git has forgotten (its admin entry pruned) is deleted too, but only when it
    still looks like a worktree (a ``.git`` file) or is empty, so a wrong path never wipes
    something that is not ours.
    """
    code, _, err = await _git(repo, "worktree", "remove", "--force", str(path), check=False)
    await _git(repo, "worktree", "prune")
    if code == 0:
        return
    target = path.resolve()
    if any(known.resolve() == target for known, _ in await list_worktrees(repo)):
        raise GitError(f"cannot remove worktree {path}: {err.strip()}")
    if not path.exists():
        return
    if (path / ".git").is_file() or not any(path.iterdir()):
        shutil.rmtree(path)
    else:
        raise GitError(f"refusing to delete {path}: git does not know it as a worktree")


def _main_moved(main: str, sha: str) -> GitResult:
    return GitResult(
        ok=False,
        reason=f"{main} moved since the branch was synced ({main} is at {sha[:12]}); sync again",
    )


# Told (main's sha now, tip) just before the ref moves; False keeps it where it is.
BeforeMove = Callable[[str, str], bool]


async def ff_only(
    repo: Path,
    tip: str,
    main: str,
    *,
    allow_empty: bool = False,
    timeout: float = runner.HOOK_DEFAULT_S,
    before_move: BeforeMove | None = None,
    interrupt: asyncio.Event | None = None,
    descends_from: str | None = None,
    moved: Callable[[], None] | None = None,
) -> GitResult:
    """Fast-forward ``main`` to ``tip``, never past a commit someone else added.

    ``descends_from``: a commit ``tip`` is known to descend from (the main ``sync`` just
    merged in: a parent of its merge); found at main, it spares the ancestry check.
    ``moved`` is told once main is at ``tip``, before the checkout's maintenance runs
    (the caller gives main's slot back there: a ``gc --auto`` held every run's merge).

    ``tip`` is the commit the run's last gating stage ran on (never a checkout's
    HEAD, which the agent controls).  A ``tip`` that is main itself is "nothing to
    merge", a failure unless ``allow_empty``: an agent that did nothing must not
    show up as merged.

    The ref moves by compare-and-swap against the sha read at the start, so a ``main`` that
    moved between the check and the write fails the stage (the flow returns to ``sync``)
    instead of silently dropping the other commit. Where ``main`` is checked out, that
    checkout moves with the ref, or a person's working tree would suddenly show the merged
    files as reverted changes.

    ``before_move`` runs once every check has passed, just before the one command that
    moves the ref: the caller records its intent there (so a crash after the move is
    recovered from the ref) or refuses (an abort that arrived in time).  After that
    command, killed by its deadline, killed because ``interrupt`` was set (an abort or
    a stopping daemon: no wait for a hook that hangs) or not, the ref itself says
    whether the merge happened.  What a killed command left is cleaned up first: its
    stale locks, and a checkout whose files it had moved while the ref stayed.
    """
    ref = f"refs/heads/{main}"
    planned = await _plan_fast_forward(repo, tip, main, ref, descends_from)
    if isinstance(planned, GitResult):
        if planned.ok or not allow_empty or planned.head != tip:
            return planned
        return GitResult(ok=True, head=tip)
    old, where, command = planned
    if before_move is not None and not before_move(old, tip):
        return GitResult(ok=False, reason=f"{main} was not moved: the run was stopped first")
    started_ms = int(time.time() * 1000)
    killed: GitTimeout | GitInterrupted | None = None
    try:
        # A fast-forward writes no commit (its reflog entry needs no strict identity), so
        # no identity lookup is spent inside main's slot.
        # A merge in main's checkout starts no maintenance of its own (it ran inside
        # main's slot); it runs below once the ref has moved, as the merge would have.
        quiet = ("maintenance.auto=false",) if command[0] == "merge" else ()
        code, _, err = await _git(
            where, *command, check=False, timeout=timeout, interrupt=interrupt, settings=quiet
        )
    except (GitTimeout, GitInterrupted) as exc:
        killed, code, err = exc, -1, str(exc)
    checkout = where if command[0] == "merge" else None
    if killed is not None:
        # git and its hooks are dead and collected: the locks they held can only be
        # stale, and a stale <ref>.lock or HEAD.lock would fail every later merge.
        await release_stale_locks(repo, ref, since_ms=started_ms, checkout=checkout)

    now = await rev_parse(repo, ref)
    if now == tip:
        if moved is not None:
            moved()
        if quiet and code == 0:
            await _maintain(where, timeout, interrupt)
        # Merged: the ref moved before the kill (a post-merge hook was still running).
        return GitResult(ok=True, head=tip, reason=None if killed is None else str(killed))
    if killed is not None:
        left = await put_back(checkout, old, tip) if checkout is not None and now == old else None
        detail = f"{killed}; {left}" if left else str(killed)
        if isinstance(killed, GitTimeout):
            raise GitTimeout(detail)
        return GitResult(ok=False, reason=f"{main} was not moved: {detail}")
    if now != old or code == 0:
        # Someone moved main between our read and the write (the CAS or the ff refused), or
        # the checkout's merge found main already past tip.
        return _main_moved(main, now or old)
    raise GitError(f"git -C {where} {shlex.join(command)} exited {code}: {err.strip()}")


async def _maintain(checkout: Path, timeout: float, interrupt: asyncio.Event | None) -> None:
    """The ``maintenance run --auto`` a merge runs after it; its failure fails no merge."""
    with contextlib.suppress(GitError):
        await _git(
            checkout, "maintenance", "run", "--auto", "--quiet", check=False,
            timeout=timeout, interrupt=interrupt,
        )  # fmt: skip


# Whether a repository is bare, asked once per path: a repository does not turn bare
# under a running daemon, and the question was one git per merge inside main's slot.
_BARE: dict[Path, bool] = {}


async def _is_bare(repo: Path) -> bool:
    if repo not in _BARE:
        _, bare, _ = await _git(repo, "rev-parse", "--is-bare-repository")
        _BARE[repo] = bare.strip() == "true"
    return _BARE[repo]


async def put_back(checkout: Path, old: str, tip: str) -> str | None:
    """Bring a checkout a killed ``merge --ff-only`` left behind back to ``old``; None
    once it is clean, else what is left, for the stage's reason.

    git moves the files and the index to ``tip`` before it moves the ref, so a merge
    killed in between (a ``reference-transaction`` hook that hangs) leaves main at
    ``old`` under a checkout showing the run's work as staged changes, and the next
    merge refuses that checkout as dirty.  The two-tree ``read-tree -m -u`` is the
    switch ``git checkout`` makes: it refuses to overwrite a change someone else made.
    """
    code, _, _ = await _git(checkout, "diff-index", "--cached", "--quiet", tip, check=False)
    if code == 0:
        await _git(checkout, "read-tree", "-m", "-u", tip, old, check=False)
    dirty = await _status_paths(checkout, "--untracked-files=no")
    if not dirty:
        return None
    return (
        f"the checkout {checkout} is left with changes the merge had started to make, "
        f"in: {', '.join(dirty)}"
    )


async def _plan_fast_forward(
    repo: Path, tip: str, main: str, ref: str, descends_from: str | None
) -> GitResult | tuple[str, Path, list[str]]:
    """Every check before the move: a result that ends the stage, or (old, where, command).

    "Nothing to merge" comes back with ``head`` set to ``tip`` so ``allow_empty`` can pass it.
    """
    if await _is_bare(repo):
        raise GitError(f"cannot fast-forward {main}: {repo} is a bare repository")
    old = await rev_parse(repo, ref)
    if old is None:
        raise GitError(f"cannot fast-forward {main}: no branch {main!r} in {repo}")
    if old == tip:
        return GitResult(
            ok=False,
            reason=f"nothing to merge: the branch has no commit beyond {main} ({tip[:12]})",
            head=tip,
            final=True,
        )
    # Commits do not change: once known, tip's descent from old holds for good.
    code, _, err = (
        (0, "", "")
        if old == descends_from
        else await _git(repo, "merge-base", "--is-ancestor", old, tip, check=False)
    )
    if code == 1:
        return _main_moved(main, old)
    if code != 0:
        raise GitError(f"cannot compare {main} with {tip} in {repo}: {err.strip()}")
    checkout = await checkout_of(repo, ref)
    if checkout is None:
        return old, repo, ["update-ref", "-m", f"sloop: fast-forward to {tip}", ref, tip, old]
    dirty = await _status_paths(checkout, "--untracked-files=no")
    if dirty:
        return GitResult(
            ok=False,
            reason=f"{main} is checked out at {checkout} with uncommitted changes: "
            f"{', '.join(dirty)}",
        )
    return old, checkout, ["merge", "--ff-only", "--quiet", tip]
