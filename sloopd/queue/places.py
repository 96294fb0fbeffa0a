"""Where no ticket is ever read from: the git directory and the state directory.

Both can sit inside the repository's folder (the state directory is ``sloop/`` in
the git common directory by default) and neither holds the operator's tickets: the
git directory keeps hooks, config and a worktree's private files; the state
directory the store and every run's checkout, prompts and HOME, which agents write.
A post of a file there, directly or through a symlink, would turn a hook's or an
agent's text into work for the next agent.  ``refusal`` is asked with the file's
real path, after every symlink is resolved.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

from sloopd.core.paths import Layout, RepoError, git_common_dir, git_dir

GIT_DIRECTORY = "git_directory"
STATE_DIRECTORY = "state_directory"
GIT_FOLDER_NAME = ".git"


@dataclass(frozen=True, slots=True)
class Place:
    """A folder whose files are never tickets, and the rule that says so."""

    root: Path  # its real path
    rule: str  # GIT_DIRECTORY | STATE_DIRECTORY: details.rule of the refusal
    what: str  # the place for a person: "the git directory"


@functools.cache
def guarded(layout: Layout) -> tuple[Place, ...]:
    """The state directory, the repository's git directory and its common directory.

    Asked once per daemon (git answers for the directories, which do not move): a
    linked worktree's git directory is ``<common>/worktrees/<name>``, and one made
    with ``--separate-git-dir`` has any name, so neither is found by its name.
    """
    places = [Place(_real(layout.state_dir), STATE_DIRECTORY, "the state directory")]
    for locate in (git_dir, git_common_dir):
        try:
            found = locate(layout.repo)
        except RepoError:
            continue  # the repository check at start-up already passed; keep the rest
        places.append(Place(_real(found), GIT_DIRECTORY, "the git directory"))
    return tuple(places)


def refusal(real: Path, repo_root: Path, places: tuple[Place, ...]) -> Place | None:
    """The place ``real`` (a real path inside ``repo_root``) lies in, if any.

    Any ``.git`` component counts as well: another repository inside the working
    tree (a vendored checkout) has a git directory no question to git would name.
    """
    for place in places:
        if real == place.root or place.root in real.parents:
            return place
    parts = real.relative_to(repo_root).parts
    if GIT_FOLDER_NAME in parts:
        nested = repo_root.joinpath(*parts[: parts.index(GIT_FOLDER_NAME) + 1])
        return Place(nested, GIT_DIRECTORY, "a git directory")
    return None


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))
