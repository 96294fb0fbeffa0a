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

A caller that runs git inside the sandbox hands ``run`` the whole command line (bwrap
wrapping git) and its own environment; ``environment`` is the host one.  The blocking
``run_blocking`` is for the callers that need an answer before the loop runs (locating
the repository at start-up, surveying its refs); ``config_value`` reads the identity.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from sloopd.util import subproc

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
            timeout=30.0,
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
        git(repo, "config", "--get", key), timeout=60.0, env={**_scrubbed(), **_NO_PROMPT}
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


def run_blocking(
    argv: Sequence[str], *, cwd: Path | None = None, timeout: float = 60.0
) -> Finished:
    """The same rules, blocking: for start-up, before the event loop serves anything.

    ``FileNotFoundError``/``NotADirectoryError`` (no git, no ``cwd``) reach the caller;
    a git past ``timeout`` is killed with what it started and reported as ``TimedOut``.
    """
    return subproc.run_blocking(argv, timeout=timeout, env=environment(), cwd=cwd)
