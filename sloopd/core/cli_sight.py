"""Whether an agent's CLI is there inside the sandbox, and what to do when it is not.

A preset runs its CLI by name from ``PATH`` (``sh -c "exec claude …"``), and the
sandbox shows the daemon's ``PATH`` but not every folder on it: an install under the
service user's home (``npm -g --prefix ~/.local``, nvm, ``~/.cache``) is hidden like
the rest of that home (sloopd.proc.sandbox).  The shell inside then prints ``sh: 1:
exec: claude: not found`` and exits 127, which read as ``exited with code 127``.
Here that is told before and after:

* ``configured_unseen``: at the daemon's start and on each reload, every preset the
  configuration runs whose CLI would not resolve inside (a warning in the log, and
  ``daemon.sandbox.clis`` on the dashboard, which ``sloopctl doctor`` reads);
* ``explain_exit_127``: after a child exited 127, the sentence its stage's reason
  carries: which program the sandbox could not see, where the daemon's ``PATH``
  finds it, and the ``agent.ro_mounts`` entry that shows it;
* ``refused_by_main``: with the same rows, each preset the configuration runs that
  refuses to start its CLI beside a file ``main`` holds (the gemini preset and a
  committed ``.env``): every run's checkout holds it too, so every stage of that
  preset would fail ``refused`` (issue 34).

What the sandbox shows is read from the same rules the launcher applies
(``sandbox.hidden_by_default`` and the operator's mounts at their own paths); the
CLI's interpreter (``#!/usr/bin/env node``) is checked with it, since an nvm install
hides both (``sloopd.proc.sight``, which takes plain values).  Only reads: ``which``,
``realpath``, the first line of the CLI, and one ``git ls-tree`` of ``main``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from sloopd.core.config import Config
from sloopd.flows.presets import preset_of
from sloopd.flows.uses import preset_uses
from sloopd.git import runner
from sloopd.proc.environment import child_path
from sloopd.proc.sight import not_found, unseen


def explain_exit_127(
    output: Iterable[str], command: Sequence[str], mounts: Sequence[str], *, sandboxed: bool
) -> str | None:
    """Why a child exited 127, when a program it ran is one the sandbox could not see.

    The programs tried are those the shell said it could not find, then the CLI of
    the preset the command is; None when each of them resolves inside (127 was the
    child's own answer).
    """
    names = [n for line in output for n in not_found(line)]
    chosen = preset_of(tuple(command))
    if chosen is not None and chosen.cli:
        names.append(chosen.cli)
    path_env = child_path(os.environ.get("PATH"))
    for name in dict.fromkeys(names):
        found = unseen(name, path_env, mounts, sandboxed=sandboxed)
        if found is not None:
            return found.problem
    return None


def configured_unseen(config: Config) -> list[dict[str, Any]]:
    """Each preset the configuration runs whose CLI the sandbox would not find."""
    agent = config.agent
    mounts = (*agent.ro_mounts, *agent.rw_mounts)
    path_env = child_path(os.environ.get("PATH"))
    rows: list[dict[str, Any]] = []
    checked: set[str] = set()
    for use in preset_uses(agent, config.flows.values()):
        cli = use.preset.cli
        if cli is None or use.preset.name in checked:
            continue
        checked.add(use.preset.name)
        found = unseen(cli, path_env, mounts, sandboxed=config.sandbox != "none")
        if found is not None:
            rows.append(found.row(use.preset.name))
    return rows


def checked(config: Config, repo: Path) -> list[dict[str, Any]]:
    """``daemon.sandbox.clis``: each configured preset that the sandbox hides, or that
    refuses every checkout of ``main``."""
    return [*configured_unseen(config), *refused_by_main(config, repo)]


def refused_by_main(config: Config, repo: Path) -> list[dict[str, Any]]:
    """Each preset the configuration runs whose own check refuses a file ``main`` holds.

    A row of ``daemon.sandbox.clis`` with ``file``, the path main holds (``path`` is
    null: the CLI may well be there).  Nothing when main cannot be read.
    """
    main = config.repo.main
    rows: list[dict[str, Any]] = []
    checked: set[str] = set()
    for use in preset_uses(config.agent, config.flows.values()):
        chosen = use.preset
        if not chosen.refuses or chosen.name in checked:
            continue
        checked.add(chosen.name)
        held = _held_by(repo, main, chosen.refuses)
        if held:
            problem = (
                f"{main} holds {held}, and the {chosen.name} preset refuses to start its CLI "
                f"in a checkout that holds it: every run's checkout does, so every "
                f"{chosen.name} stage will fail 'refused' (\"sloop: not starting … the "
                f'checkout holds {held}"); remove {held} from {main}, or give those stages a '
                "command of your own (docs/agents.md)"
            )
            rows.append(
                {"preset": chosen.name, "cli": chosen.cli, "path": None, "problem": problem}
                | {"file": held}
            )
    return rows


def _held_by(repo: Path, main: str, paths: Sequence[str]) -> str | None:
    """The first of ``paths`` that ``main``'s tree holds (a file, a link or a folder)."""
    argv = runner.git(repo, "ls-tree", "-z", "--name-only", f"refs/heads/{main}", "--", *paths)
    try:
        done = runner.run_blocking(argv, timeout=10.0)
    except (OSError, runner.TimedOut):
        return None
    if done.returncode != 0:
        return None
    held = set(done.stdout.split("\0"))
    return next((path for path in paths if path in held), None)
