"""Where a daemon keeps its state and its sockets (DESIGN "Two commands")."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sloopd.git import runner
from sloopd.wire import api


class RepoError(Exception):
    """The path given is not a usable git repository."""


def git_toplevel(start: Path) -> Path:
    return Path(_git(start, "rev-parse", "--show-toplevel"))


def git_common_dir(repo: Path) -> Path:
    return Path(_git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))


def git_dir(repo: Path) -> Path:
    """The repository's own git directory: a linked worktree's is not its common one."""
    return Path(_git(repo, "rev-parse", "--absolute-git-dir"))


def _git(cwd: Path, *args: str) -> str:
    try:
        done = runner.run_blocking(runner.git(None, *args), cwd=cwd)
    except (FileNotFoundError, NotADirectoryError, runner.TimedOut) as exc:
        raise RepoError(f"{cwd}: {exc}") from exc
    if done.returncode != 0:
        raise RepoError(f"{cwd} is not inside a git repository: {done.stderr.strip()}")
    return done.stdout.strip()


@dataclass(frozen=True, slots=True)
class Layout:
    repo: Path
    state_dir: Path
    socket_dir: Path

    @property
    def operator_socket(self) -> Path:
        return self.socket_dir / api.OPERATOR_SOCKET_NAME

    @property
    def worker_socket_dir(self) -> Path:
        return self.socket_dir / api.WORKER_SOCKET_DIR_NAME

    @property
    def daemon_info(self) -> Path:
        return self.state_dir / api.DAEMON_INFO_NAME


def resolve(repo: Path | None, state_dir: Path | None, socket_dir: Path | None) -> Layout:
    top = git_toplevel(repo or Path.cwd())
    top = Path(os.path.realpath(top))
    state = state_dir or git_common_dir(top) / "sloop"
    sockets = socket_dir or api.default_socket_dir(top)
    return Layout(repo=top, state_dir=state.absolute(), socket_dir=sockets.absolute())


def make_private_dir(path: Path) -> None:
    """Create ``path`` (and a missing parent) owner-only; refuse one we cannot trust.

    The parent is checked too: it is the fallback ``/tmp/sloop-<uid>`` (or
    ``$XDG_RUNTIME_DIR/sloop``) that another user could have created first.
    """
    for directory in (path.parent, path):
        reason = api.untrusted_directory(directory)
        if reason is not None:
            raise RepoError(reason)
        if not directory.exists():
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(directory, 0o700)
    if path.stat().st_uid != os.getuid():
        raise RepoError(f"socket directory {path} belongs to another user")
    os.chmod(path, 0o700)
