"""The one way the daemon starts git: a deadline, an output bound, one scrubbed environment.

Every git of ``sloopd`` starts here, so the rules below hold for all of them and
cannot drift between copies (they did: two copies scrubbed four variables, one nine,
and the call that moves ``main`` honoured an inherited ``GIT_OBJECT_DIRECTORY``):

- **One scrub list.**  ``REPO_LOCATING_VARS`` are the variables that point git at
  another repository, object store, namespace or history than its ``-C`` names.  A
  daemon started from a hook, a wrapper or a shell inside another repository inherits
  them; none reaches a git the daemon runs.  This module is the only one that names
  them (``tests/unit/test_git_runner.py`` checks it).
- **No prompt.**  ``GIT_TERMINAL_PROMPT=0``: a credential prompt would hang the walk.
- **No replace refs.**  ``GIT_NO_REPLACE_OBJECTS=1``: an agent's ``git replace X Y``
  must not show the daemon (nor a reviewer) a twin of the commit that merges.
- **No global or system config.**  ``NO_OPERATOR_CONFIG``: a daemon git reads the
  repository's own config and the daemon's ``-c`` settings, never the daemon user's
  ``~/.gitconfig`` or ``/etc/gitconfig`` (nor the system attributes).  A filter,
  hook path or driver defined there would otherwise run on the host for agent
  content: ``checkout.create``'s ``reset --hard`` of a commit whose ``.gitattributes``
  says ``* filter=lfs`` ran ``git lfs smudge`` (issue 34).  Two things are still read
  from the operator's config, on purpose: the identity agents commit as
  (``config_value``), and ``safe.directory``, carried over as a command-line setting
  so a repository the operator trusts stays trusted (the container image trusts
  ``*`` in ``/etc/gitconfig``).
- **A deadline and cancellation** (``sloopd.util.subproc``): a timeout, a cancelled
  caller or the caller's ``interrupt`` (an abort, a stopping daemon) kills git *and*
  the hooks it started; ``TimedOut`` and ``Interrupted`` say so.
- **An output bound** on what every git prints, whoever calls it: each stream's
  first and last part, the rest counted (``sloopd.util.subproc``); a tighter one on
  standard output for callers whose output is unbounded (a diff).

- **The layer's errors** (``sloopd.git.errors``): ``run_or_raise`` turns a deadline
  passed (or an interrupt) into the caller's kind of ``GitError``, worded by the caller;
  ``Git`` is that for a part of the layer with one kind and one fixed deadline.
- **The fixed deadlines, in one place** (below), each with why it is not configurable.

A caller that runs git inside the sandbox hands ``run`` the whole command line (bwrap
wrapping git) and its own environment; ``environment`` is the host one.  The blocking
``run_blocking`` is for the callers that need an answer before the loop runs (locating
the repository at start-up, surveying its refs); ``config_value`` reads the identity.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from sloopd.git.errors import GitError
from sloopd.util import subproc

# The git layer's fixed deadlines.  ``repo.git_timeout`` (the run's admitted
# configuration, handed to the layer by its callers: the layer reads no config) bounds
# the calls that run the main repository's hooks while a run starts, syncs or merges
# (docs/configuration.md).  Every other git has one of these:
#
# Reading refs or config, moving a ref outside those three: no work in proportion to
# the repository; a git that takes a minute for it is stuck, a setting would not help.
QUICK_S: Final = 60.0
# ``repo.git_timeout``'s own default (``git_timeout_ms`` in sloopd.core.config), for a
# caller with no run's configuration (a tool, a test); a run passes its admitted value.
HOOK_DEFAULT_S: Final = 120.0
# A run's checkout made, read (its status, the auto-commit) and brought back, and a
# sync conflict's files read: work in proportion to the repository's size, by the
# daemon's own git and the checkout's sandboxed git with hooks off (the bring-back's
# ref update in the main repository excepted).  Generous instead of configurable, so
# that ``git_timeout``, which is about hooks, need not grow with the repository.
CHECKOUT_S: Final = 300.0
# A stage on a Ray node: its bundles made and taken here (git.bundles), the node's
# cache and checkout (git.node_cache, remote.room).  A node reads no sloop.toml and its
# launch message (sloopd.remote.messages) carries no deadline; the daemon's side of the
# same bundles keeps the same one.
SHIPPING_S: Final = 120.0
# Removing the temporary ref a failed bring-back left: after its deadline passed too.
CLEANUP_S: Final = 10.0
# The operator's ``safe.directory`` entries, read once at start-up outside any repository.
TRUST_READ_S: Final = 30.0

# Inherited from a hook, a wrapper or a shell in another repository, these would point
# the daemon's git elsewhere than -C: another repository, index, object store,
# namespace, or a history rewritten by a graft or shallow file.
REPO_LOCATING_VARS: Final = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_SHALLOW_FILE",
    "GIT_GRAFT_FILE",
)

# No config or attributes of the daemon user's or the system's: a filter, driver or
# hook path defined there would run for agent content on the host.
NO_OPERATOR_CONFIG: Final = {
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_ATTR_NOSYSTEM": "1",
}

# Set for every git the daemon runs, on the host and in a checkout's sandbox alike.
DAEMON_GIT_ENV: Final = {
    "GIT_TERMINAL_PROMPT": "0",  # a credential prompt would hang the walk forever
    "GIT_NO_REPLACE_OBJECTS": "1",  # an object is what it is, never its replacement
    **NO_OPERATOR_CONFIG,
}

_NO_PROMPT: Final = {"GIT_TERMINAL_PROMPT": "0"}

TimedOut = subproc.TimedOut
Interrupted = subproc.Interrupted
Finished = subproc.Finished


def _scrubbed() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in REPO_LOCATING_VARS}


def environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The daemon's environment for a git on the host: scrubbed, no prompt, no global
    or system config (the operator's ``safe.directory`` carried over), ``extra`` on top."""
    env = _scrubbed()
    env.update(DAEMON_GIT_ENV)
    trusted = _trusted_directories()
    if trusted:
        # After any the daemon inherited: GIT_CONFIG_COUNT entries are one list.
        count = int(env.get("GIT_CONFIG_COUNT", "0") or "0")
        for n, directory in enumerate(trusted, start=count):
            env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"] = "safe.directory", directory
        env["GIT_CONFIG_COUNT"] = str(count + len(trusted))
    env.update(extra or {})
    return env


@functools.cache
def _trusted_directories() -> tuple[str, ...]:
    """The ``safe.directory`` entries of the daemon user's global and system config.

    git honours ``safe.directory`` only from protected config (system, global, the
    command line), so it is carried over as command-line config: without it a
    repository owned by another user that the operator trusts would be refused as
    "dubious ownership" once the global and system files are no longer read.  Read
    once, outside any repository (a repository's own entries are never honoured)."""
    try:
        done = subproc.run_blocking(
            ["git", "config", "--show-scope", "--get-all", "safe.directory"],
            timeout=TRUST_READ_S,
            env={**_scrubbed(), "GIT_DIR": "/dev/null"},
            cwd=Path("/"),
        )
    except (OSError, subproc.TimedOut):
        return ()
    trusted = []
    for line in done.stdout.splitlines():
        scope, _, value = line.partition("\t")
        if scope in ("global", "system"):
            trusted.append(value)
    return tuple(trusted)


def config_value(repo: Path, key: str) -> str:
    """``git config --get key`` as the operator's git resolves it for ``repo``, global
    and system config included: the one read of them (the identity agents commit as).
    ``git config --get`` runs no filter, hook or driver.  Empty when unset."""
    done = subproc.run_blocking(
        git(repo, "config", "--get", key), timeout=QUICK_S, env={**_scrubbed(), **_NO_PROMPT}
    )
    return done.stdout.strip() if done.returncode == 0 else ""


def git(repo: Path | None, *args: str) -> list[str]:
    """``git -C repo args`` as an argument vector (``repo`` None: no ``-C``)."""
    return ["git", *(["-C", str(repo)] if repo is not None else []), *args]


async def run(
    argv: Sequence[str],
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    cwd: Path | None = None,
    stdout_limit: int | None = None,
    interrupt: asyncio.Event | None = None,
) -> subproc.Finished:
    """Run a git command line (never through a shell); ``TimedOut`` past ``timeout``,
    ``Interrupted`` once ``interrupt`` is set (git and its hooks killed either way).

    ``env`` None is ``environment()``; a sandboxed caller passes the sandbox's own,
    which never holds the host's variables at all.
    """
    return await subproc.run(
        argv,
        timeout=timeout,
        env=environment() if env is None else env,
        stdin=stdin,
        cwd=cwd,
        stdout_limit=stdout_limit,
        interrupt=interrupt,
    )


async def run_or_raise(
    argv: Sequence[str],
    *,
    timeout: float,
    timed_out: Callable[[], GitError],
    interrupted: Callable[[], GitError] | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    cwd: Path | None = None,
    stdout_limit: int | None = None,
    interrupt: asyncio.Event | None = None,
) -> Finished:
    """``run``, ending in the git layer's errors: past ``timeout`` ``timed_out()`` is
    raised, once ``interrupt`` is set ``interrupted()`` (``Interrupted`` itself when the
    caller gave none); git and its hooks are killed either way.  The caller words both:
    stage reasons, logs and tests quote them as they are."""
    try:
        return await run(
            argv,
            timeout=timeout,
            env=env,
            stdin=stdin,
            cwd=cwd,
            stdout_limit=stdout_limit,
            interrupt=interrupt,
        )
    except TimedOut:
        raise timed_out() from None
    except Interrupted:
        if interrupted is None:
            raise
        raise interrupted() from None


@dataclass(frozen=True, slots=True)
class Git:
    """The git of one part of the layer: ``git -C repo <settings> args`` on the host, in
    the daemon's environment, with that part's kind of error and fixed deadline."""

    error: Callable[[str], GitError]
    timeout: float
    settings: tuple[str, ...] = ()

    async def run(self, repo: Path | None, *args: str, stdin: bytes | None = None) -> Finished:
        """Its exit status is the caller's to read; past the deadline, this part's error
        says ``git <args[0]> did not finish within <timeout> s``."""
        return await run_or_raise(
            git(repo, *self.settings, *args),
            timeout=self.timeout,
            timed_out=lambda: self.error(
                f"git {args[0]} did not finish within {self.timeout:.0f} s"
            ),
            stdin=stdin,
        )


def run_blocking(
    argv: Sequence[str], *, cwd: Path | None = None, timeout: float = QUICK_S
) -> Finished:
    """The same rules, blocking: for start-up, before the event loop serves anything.

    ``FileNotFoundError``/``NotADirectoryError`` (no git, no ``cwd``) reach the caller;
    a git past ``timeout`` is killed with what it started and reported as ``TimedOut``.
    """
    return subproc.run_blocking(argv, timeout=timeout, env=environment(), cwd=cwd)
