"""An isolated checkout per run: its own repository, borrowing the main one's objects.

Why not ``git worktree``: a worktree's ``.git`` names the main repository's
``.git/worktrees/<id>``, whose ``commondir`` leads back to the main ``.git``, so refs,
config, hooks and objects are shared and writable.  An agent in a worktree can move
``main``, install a hook the daemon runs later, or set ``core.fsmonitor`` in the shared
config.  Here each run gets a new repository whose ``objects/info/alternates`` names the main
repository's objects directory: it reads every commit without copying one, and whatever it
writes (objects, refs, config, hooks) stays in the checkout.  In the sandbox the main objects
are read-only, so even a hostile ``git`` cannot add to or corrupt them.

**Trust boundary.**  Once an agent has run, everything under the checkout is hostile:
``.git/config`` may set ``core.fsmonitor``, ``core.hooksPath``, ``include.path``, filters;
``.git`` may become a gitfile or grow a ``commondir``.  So the daemon never runs git in a
checkout outside the sandbox: ``run_in_checkout`` and its wrappers run git in bwrap (no
network, no worker socket, checkout-level hardening through ``-c`` and ``GIT_CONFIG_*``),
and ``intake.bring_back`` runs git only in repositories of the daemon's: a ``git fetch``
whose upload-pack side runs in a sandbox that sees the checkout and the objects
read-only.  The receiving side gets a pack over a pipe, as from any untrusted remote,
checks its objects (``fetch.fsckObjects``) and accepts the tip only if it descends from
the base.
``create`` runs git in the checkout before any agent has touched it, which is safe.

Every git call has a deadline (the function's ``timeout`` covers all its calls) and is
killed with its process group on timeout or cancellation (``sloopd.git.runner``).  Imports:
the runner, the error family (``sloopd.git.errors``) and ``sloopd.proc.sandbox``, whose
bubblewrap command line its git runs in.

**Caveats.**  A checkout depends on the main repository keeping the objects it borrows: if
``main`` is force-moved and the main repository is pruned, a running checkout's base may
vanish, so pin each base with a ref (e.g. ``refs/sloop/runs/<id>/base``) for the run's life.
Alternates of the main repository itself (a main made by ``clone --shared``) are followed
by git but not bound into the sandbox: add those directories to ``visible_paths``.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sloopd.git import runner
from sloopd.git.errors import CheckoutError as CheckoutError
from sloopd.proc.overlay import Overlay
from sloopd.proc.sandbox import CHECKOUT_PATH, HOME_PATH, SandboxSpec, command
from sloopd.util import names, quoting, trees

# Settings that make git in a checkout run nothing the checkout's own config asks for.
HARDENING = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("protocol.allow", "never"),
)


@dataclass(frozen=True)
class GitRun:
    returncode: int
    stdout: str
    stderr: str
    # The caller's ``stdout_limit`` was reached: the output is cut, the command was killed.
    truncated: bool = False


@dataclass(frozen=True)
class Isolation:
    """The sandbox pieces every daemon-side git call in a checkout shares.

    ``objects`` is the main repository's objects directory (see ``objects_dir``); ``home`` a
    daemon-owned directory used as HOME inside (an empty one is best: whatever config it
    holds is read); ``hide`` the host paths to mask: the main repository (the whole working
    tree, not only ``.git``: the objects come back anyway), the state and socket
    directories, other checkouts.
    """

    objects: Path
    home: Path
    hide: tuple[Path, ...] = ()
    # None: ``sandbox = "none"``, git runs on the host in the checkout (hardened by -c
    # and GIT_CONFIG_* only; the operator chose to trust the agents).
    bwrap: str | None = "bwrap"
    # A copy-on-write checkout (``sloopd.proc.overlay``): every sandboxed git in it mounts
    # these layers first; the daemon's git never reads the checkout's folder directly.
    overlay: Overlay | None = None


class _Deadline:
    def __init__(self, timeout: float) -> None:
        self.end = asyncio.get_running_loop().time() + timeout
        self.timeout = timeout

    def left(self, what: str) -> float:
        remaining = self.end - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise CheckoutError(f"{what} did not finish within {self.timeout:g} s.")
        return remaining


# A line of git's quoted in a reason is cut to this many characters: an agent's
# repository chooses what git says (a path in its alternates file, 4 KiB long).
REASON_LINE_CHARS = 300


def git_reason(text: str) -> str:
    """git's own reason, for a ``CheckoutError``'s sentence: its first ``fatal:`` line
    (what made it give up), else its first ``error:`` line, else its last line; cut in
    its middle if long."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    fatal = [ln for ln in lines if ln.startswith("fatal:")]
    errors = [ln for ln in lines if ln.startswith("error:")]
    said = (fatal or errors or lines[-1:] or ["no message"])[0].rstrip(".")
    return quoting.clip_middle(said, REASON_LINE_CHARS)


async def run_bounded(
    argv: Sequence[str],
    *,
    timeout: float,
    what: str,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    cwd: Path | None = None,
    stdout_limit: int | None = None,
) -> GitRun:
    """Run ``argv`` (git, or a sandbox running git; never through a shell); the caller
    reads the exit status.  Past ``timeout`` or on cancellation its tree is killed, and
    a ``CheckoutError`` says ``what`` did not finish in time.

    A sandboxed command dies with it too: bwrap runs with --die-with-parent.
    ``stdout_limit``: as ``runner.run``'s (the output is cut there, the command killed).
    """
    done = await runner.run_or_raise(
        argv,
        timeout=timeout,
        timed_out=lambda: CheckoutError(f"{what} did not finish within {timeout:.3g} s."),
        env=env,
        stdin=stdin,
        cwd=cwd,
        stdout_limit=stdout_limit,
    )
    return GitRun(done.returncode, done.stdout, done.stderr, done.truncated)


async def _git(repo: Path | None, *args: str, deadline: _Deadline, what: str) -> str:
    """``git -C repo args`` on the host (main repository or a fresh checkout); stdout."""
    where = ["-C", str(repo)] if repo is not None else []
    done = await run_bounded(["git", *where, *args], timeout=deadline.left(what), what=what)
    if done.returncode != 0:
        said = done.stderr or done.stdout
        raise CheckoutError(f"{what} failed: {git_reason(said)}.", said)
    return done.stdout.strip()


# Ref names of plain ASCII only: for these ``names.ref_problem`` is git's own rule (the
# test suite checks the two agree), so no ``git check-ref-format`` is started for the
# names the daemon makes; any other name is still put to git.
_PLAIN_REF = re.compile(r"refs/[A-Za-z0-9/._-]+\Z")


async def _check_ref(ref: str, deadline: _Deadline) -> None:
    what = f"checking the ref name {ref!r}"
    if ref.startswith("-") or not ref.startswith("refs/"):
        raise CheckoutError(f"{ref!r} is not a valid full ref name.")
    if _PLAIN_REF.match(ref) and names.ref_problem(ref) is None:
        return
    done = await run_bounded(
        ["git", "check-ref-format", ref], timeout=deadline.left(what), what=what
    )
    if done.returncode != 0:
        raise CheckoutError(f"{ref!r} is not a valid ref name.")


async def check_ref(ref: str, timeout: float) -> None:
    """``CheckoutError`` unless ``ref`` is a full ref name git accepts."""
    await _check_ref(ref, _Deadline(timeout))


async def objects_dir(repo: Path, *, timeout: float) -> Path:
    """The main repository's objects directory, absolute and resolved (the alternates line)."""
    deadline = _Deadline(timeout)
    out = await _git(
        repo,
        "rev-parse",
        "--path-format=absolute",
        "--git-path",
        "objects",
        deadline=deadline,
        what=f"finding the objects of {repo}",
    )
    return Path(out).resolve()


# Each main repository's objects directory (resolved) and object format, read with the
# first checkout made from it or the first bring-back into it: neither changes under a
# running daemon, and asking again was one git per checkout.
_STORES: dict[Path, tuple[str, str]] = {}
FULL_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?\Z")


async def store_of(repo: Path, *, timeout: float) -> tuple[Path, str]:
    """The main repository's objects directory, resolved, and its object format."""
    known = _STORES.get(repo)
    if known is None:
        out = await _git(
            repo, "rev-parse", "--path-format=absolute", "--git-path", "objects",
            "--show-object-format", deadline=_Deadline(timeout),
            what=f"finding the objects of {repo}",
        )  # fmt: skip
        objects, object_format = out.splitlines()
        known = _STORES[repo] = (str(Path(objects).resolve()), object_format)
    return Path(known[0]), known[1]


async def create(repo: Path, checkout: Path, branch: str, base_sha: str, *, timeout: float) -> None:
    """A new repository at ``checkout`` on ``branch`` at ``base_sha``, objects borrowed.

    ``git init`` without templates (no sample hooks), the alternates line, then
    ``reset --hard``, which on the unborn branch makes the branch ref and writes the
    files and an index with their stat data, as ``read-tree -u --reset`` and
    ``update-ref`` did (valid inside the sandbox too: a bind mount keeps device and
    inode numbers).  ``reset`` takes a commit only: a full sha naming anything else, or
    nothing, fails there, and the half-made checkout goes.  Measured as fast as ``git
    worktree add`` of the same tree (see benchmarks/sandbox_start.py).
    """
    deadline = _Deadline(timeout)
    await _check_ref(f"refs/heads/{branch}", deadline)
    what = f"reading {base_sha!r} in {repo}"
    known = _STORES.get(repo)
    verified = known is None or not FULL_SHA.match(base_sha)
    if verified:
        out = await _git(
            repo,
            "rev-parse",
            "--path-format=absolute",
            "--git-path",
            "objects",
            "--show-object-format",
            "--verify",
            "--end-of-options",
            f"{base_sha}^{{commit}}",
            deadline=deadline,
            what=what,
        )
        objects, object_format, sha = out.splitlines()
        objects = str(Path(objects).resolve())
        _STORES[repo] = (objects, object_format)
    else:
        assert known is not None
        (objects, object_format), sha = known, base_sha
    if checkout.exists() and any(checkout.iterdir()):
        raise CheckoutError(f"cannot create a checkout in {checkout}: it is not empty.")
    init = ["init", "-q", "--template=", f"--object-format={object_format}", "-b", branch]
    await _git(None, *init, "--", str(checkout), deadline=deadline, what=f"creating {checkout}")
    info = checkout / ".git" / "objects" / "info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "alternates").write_text(f"{objects}\n", encoding="utf-8")
    if verified:
        what = f"checking out {sha[:12]} in {checkout}"
    try:
        await _git(checkout, "reset", "-q", "--hard", sha, deadline=deadline, what=what)
    except CheckoutError:
        if not verified:
            await remove(checkout)  # only the daemon's git has been in it
        raise


def hardened_git() -> list[str]:
    """``git`` with ``HARDENING``'s settings: the argv every git in a checkout starts with."""
    argv = ["git"]
    for key, value in HARDENING:
        argv += ["-c", f"{key}={value}"]
    return argv


def _sandbox_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    git = shutil.which("git")
    path = "/usr/local/bin:/usr/bin:/bin"
    if git is not None and os.path.dirname(git) not in path.split(":"):
        path = f"{os.path.dirname(git)}:{path}"
    env = {"PATH": path, "HOME": HOME_PATH, "LANG": "C.UTF-8", **runner.DAEMON_GIT_ENV}
    # The same settings through the environment reach every git a script or alias starts.
    env["GIT_CONFIG_COUNT"] = str(len(HARDENING))
    for i, (key, value) in enumerate(HARDENING):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    env.update(extra or {})
    return env


def _spec(
    checkout: Path, isolation: Isolation, env: Mapping[str, str] | None, *, writable: bool
) -> SandboxSpec:
    return SandboxSpec(
        checkout=checkout,
        home=isolation.home,
        objects=isolation.objects,
        hide=isolation.hide,
        network=False,
        env=_sandbox_env(env),
        checkout_writable=writable,
        overlay=isolation.overlay,
    )


def in_checkout(
    checkout: Path, argv: Sequence[str], isolation: Isolation, env: Mapping[str, str] | None
) -> tuple[list[str], dict[str, str], Path | None]:
    """(argv, environment, cwd) running ``argv`` in the checkout, sandboxed unless told not
    (``isolation.bwrap`` None): what ``run_bounded`` is handed for a command in it."""
    if isolation.bwrap is None:
        host = {**runner.environment(), **_sandbox_env(env), "HOME": str(isolation.home)}
        host["PATH"] = os.environ.get("PATH", host["PATH"])
        return list(argv), host, checkout
    spec = _spec(checkout, isolation, env, writable=True)
    return command(spec, argv, bwrap=isolation.bwrap), runner.environment(), None


def upload_pack_command(
    checkout: Path,
    isolation: Isolation,
    *,
    before: str = "",
    env: Mapping[str, str] | None = None,
) -> list[str]:
    """An ``--upload-pack`` command serving ``checkout`` from a read-only sandbox.

    git runs the command through ``sh`` and appends the remote's host path; the sandbox
    serves ``/sloop/work/.git`` instead and ignores that argument (``$1``).  ``--strict``
    takes that path as the git directory itself: a ``.git`` the agent turned into a gitfile
    is refused rather than followed.  ``before`` is shell the same sandbox runs first
    (reading nothing from standard input, writing nothing to standard output: those are
    the fetch's), with ``env`` on top of the sandbox's own environment.
    """
    script = f'{before}exec {shlex.join(hardened_git())} upload-pack --strict "$0"'
    spec = _spec(checkout, isolation, env, writable=False)
    argv = ["sh", "-c", script, f"{CHECKOUT_PATH}/.git"]
    assert isolation.bwrap is not None, "without a sandbox, bring_back uses git's own"
    return command(spec, argv, bwrap=isolation.bwrap)


async def run_in_checkout(
    checkout: Path,
    git_args: Sequence[str],
    isolation: Isolation,
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    stdout_limit: int | None = None,
) -> GitRun:
    """Run hardened git in the sandboxed checkout; the caller reads the exit status."""
    argv, run_env, cwd = in_checkout(checkout, [*hardened_git(), *git_args], isolation, env)
    what = f"git {shlex.join(git_args)} in {checkout}"
    return await run_bounded(
        argv, timeout=timeout, what=what, env=run_env, cwd=cwd, stdout_limit=stdout_limit
    )


async def remove(checkout: Path) -> None:
    """Delete the checkout off the event loop; one already gone is fine."""
    try:
        await trees.remove(checkout)
    except trees.NotAFolder as exc:
        raise CheckoutError(str(exc)) from None
