"""What the daemon itself does inside a run's checkout: status, auto-commit, sync.

Every one of these runs hardened git in the checkout's sandbox (see
``sloopd.git.checkout``: once an agent has run, the checkout is hostile), so
a hook, filter or fsmonitor the agent planted runs nothing on the host.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from sloopd.git.checkout import (
    CheckoutError,
    Isolation,
    _Deadline,
    _hardened_git,
    _in_checkout,
    _reason,
    _run,
    run_in_checkout,
)


async def uncommitted(checkout: Path, isolation: Isolation, *, timeout: float) -> list[str]:
    """Paths ``git status`` reports (untracked included); ``-z`` keeps odd names intact."""
    args = ["status", "--porcelain", "-z", "--untracked-files=all"]
    done = await run_in_checkout(checkout, args, isolation, timeout=timeout)
    if done.returncode != 0:
        raise CheckoutError(f"git status failed in {checkout}: {_reason(done.stderr)}.")
    items = [item for item in done.stdout.split("\0") if item]
    paths: list[str] = []
    i = 0
    while i < len(items):
        paths.append(items[i][3:])
        # A rename or copy is followed by its source path as a separate item.
        i += 2 if items[i][0] in "RC" or items[i][1] in "RC" else 1
    return paths


def _identity_env(identity: tuple[str, str]) -> dict[str, str]:
    name, email = identity
    env: dict[str, str] = {}
    for role in ("AUTHOR", "COMMITTER"):
        env[f"GIT_{role}_NAME"], env[f"GIT_{role}_EMAIL"] = name, email
    return env


async def commit_all(
    checkout: Path,
    message: str,
    isolation: Isolation,
    *,
    identity: tuple[str, str],
    timeout: float,
) -> bool:
    """``git add -A`` and commit in one sandbox; False when there was nothing to commit."""
    git = shlex.join(_hardened_git())
    script = (
        f"set -e\n{git} add -A\nif {git} diff --cached --quiet; then exit 3; fi\n"
        f'exec {git} commit -q --no-verify -m "$1"\n'
    )
    argv, run_env, cwd = _in_checkout(
        checkout, ["sh", "-c", script, "sh", message], isolation, _identity_env(identity)
    )
    done = await _run(argv, timeout=timeout, what=f"committing in {checkout}", env=run_env, cwd=cwd)
    if done.returncode == 3:
        return False
    if done.returncode != 0:
        raise CheckoutError(f"cannot commit in {checkout}: {_reason(done.stderr)}.")
    return True


async def merge(
    checkout: Path,
    sha: str,
    isolation: Isolation,
    *,
    identity: tuple[str, str],
    timeout: float,
) -> list[str]:
    """Merge ``sha`` (main's tip, read through alternates); the conflicting paths, if any.

    A conflict is aborted, so the branch stays as the agent left it.
    """
    args = ["merge", "--no-edit", "--no-verify", "-q", sha]
    what = f"merging {sha[:12]} in {checkout}"
    return await _bring_in(checkout, args, isolation, what, identity=identity, timeout=timeout)


async def rebase(
    checkout: Path,
    sha: str,
    isolation: Isolation,
    *,
    identity: tuple[str, str],
    timeout: float,
) -> list[str]:
    """Rebase the branch onto ``sha``; the conflicting paths (the rebase aborted), if any."""
    args = ["rebase", "--no-verify", "-q", sha]
    what = f"rebasing onto {sha[:12]} in {checkout}"
    return await _bring_in(checkout, args, isolation, what, identity=identity, timeout=timeout)


async def _bring_in(
    checkout: Path,
    args: list[str],
    isolation: Isolation,
    what: str,
    *,
    identity: tuple[str, str],
    timeout: float,
) -> list[str]:
    """Run a merge or rebase; on a conflict list the paths and abort it."""
    deadline = _Deadline(timeout)
    env = _identity_env(identity)
    done = await run_in_checkout(checkout, args, isolation, timeout=deadline.left(what), env=env)
    if done.returncode == 0:
        return []
    listing = ["diff", "--name-only", "-z", "--diff-filter=U"]
    listed = await run_in_checkout(checkout, listing, isolation, timeout=deadline.left(what))
    conflicts = [p for p in listed.stdout.split("\0") if p]
    abort = [args[0], "--abort"]
    await run_in_checkout(checkout, abort, isolation, timeout=deadline.left(what))
    if not conflicts:
        raise CheckoutError(f"{what} failed: {_reason(done.stderr or done.stdout)}.")
    return conflicts
