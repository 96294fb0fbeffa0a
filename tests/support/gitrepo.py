"""Small synchronous git helpers for tests that build repositories by hand.

Commits made here carry a throwaway identity through ``-c``, never through the repository's
config, so a test can leave ``user.email`` unset and watch the code under test cope.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

_IDENTITY = ("-c", "user.name=test", "-c", "user.email=test@example.invalid")


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(cwd), *_IDENTITY, *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed in {cwd}: {done.stderr}")
    return done.stdout.strip()


def commit(cwd: Path, files: dict[str, str], message: str = "change") -> str:
    """Write ``files``, commit them all, and return the new commit."""
    for name, text in files.items():
        target = cwd / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    git(cwd, "add", "-A")
    git(cwd, "commit", "-q", "-m", message)
    return git(cwd, "rev-parse", "HEAD")


def make_repo(root: Path, identity: bool = True) -> Path:
    """A repository on ``main`` with one commit holding ``a.txt`` and ``b.txt``."""
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    if identity:
        git(repo, "config", "user.name", "Repo Owner")
        git(repo, "config", "user.email", "owner@example.invalid")
    commit(repo, {"a.txt": "a\n", "b.txt": "b\n"}, "init")
    return repo


def head(cwd: Path, rev: str = "HEAD") -> str:
    return git(cwd, "rev-parse", rev)


def in_progress(worktree: Path) -> list[str]:
    """Markers of a merge or rebase left half done in ``worktree``."""
    found = []
    for marker in ("MERGE_HEAD", "rebase-merge", "rebase-apply"):
        if Path(
            git(worktree, "rev-parse", "--path-format=absolute", "--git-path", marker)
        ).exists():
            found.append(marker)
    return found
