"""The files a child gets beside its checkout, made anew for each child: its HOME, its token.

Nothing an earlier stage or seat left in them (a ``.gitconfig`` naming a program, a
CLI's settings and hooks, shell start-up files, a symlink where a login is mounted,
a dead token) reaches the next child: only the commit flows between stages.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from sloopd.util import trees


class ChildFiles:
    """Each run's folder under ``<state>/runs/<run>``: the next child's HOME and token."""

    def __init__(self, state_dir: Path, identity: Callable[[], tuple[str, str]]) -> None:
        self.state_dir = state_dir
        self._read_identity = identity
        self._identity: tuple[str, str] | None = None

    @property
    def identity(self) -> tuple[str, str]:
        """The repository's git identity, read once (two blocking git calls, not per child)."""
        if self._identity is None:
            self._identity = self._read_identity()
        return self._identity

    def run_dir(self, run_id: str) -> Path:
        directory = self.state_dir / "runs" / run_id
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        return directory

    def home(self, run_id: str) -> Path:
        """A HOME made anew for each child: a git identity to commit with, nothing else."""
        home = self.run_dir(run_id) / "home"
        trees.remove_blocking(home)  # never following what the last child linked there
        home.mkdir(mode=0o700)
        name, email = self.identity
        (home / ".gitconfig").write_text(
            f'[user]\n\tname = "{_quoted(name)}"\n\temail = "{_quoted(email)}"\n',
            encoding="utf-8",
        )
        return home

    def token_file(self, run_id: str, token: str) -> Path:
        """The child's token in a file only the daemon user reads, made anew per child
        (the previous child's token is dead by now; its file goes with it)."""
        path = self.run_dir(run_id) / "token"
        path.unlink(missing_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(descriptor, "w", encoding="ascii") as out:
            out.write(token)
        return path


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
