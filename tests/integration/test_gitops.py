"""sloopd.git.ops against real repositories: worktrees, ``sync`` in both modes, and ``ff_only``."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from sloopd.git import ops as gitops
from sloopd.git.ops import GitError
from tests.support.gitrepo import commit, git, head, make_repo

Mode = Literal["merge", "rebase"]


@pytest.fixture
def root(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short temp dir, with no global or system git config and no identity in the env."""
    path = Path(tempfile.mkdtemp(prefix="g", dir="/tmp"))
    home = path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("EMAIL", "GIT_CONFIG_GLOBAL", "GIT_DIR", "GIT_WORK_TREE"):
        monkeypatch.delenv(var, raising=False)
    for role in ("AUTHOR", "COMMITTER"):
        monkeypatch.delenv(f"GIT_{role}_NAME", raising=False)
        monkeypatch.delenv(f"GIT_{role}_EMAIL", raising=False)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def repo(root: Path) -> Path:
    return make_repo(root)


def new_worktree(repo: Path, name: str = "w1", branch: str = "sloop/t/1") -> Path:
    path = repo.parent / name
    git(repo, "worktree", "add", "--quiet", "-b", branch, str(path), "main")
    return path


# -- worktrees -------------------------------------------------------------------------------


def test_remove_worktree_keeps_branch(repo: Path) -> None:
    path = new_worktree(repo)
    base = head(repo, "main")
    assert head(path) == base
    assert (path, "refs/heads/sloop/t/1") in asyncio.run(gitops.list_worktrees(repo))

    asyncio.run(gitops.remove_worktree(repo, path))
    assert not path.exists()
    assert asyncio.run(gitops.rev_parse(repo, "refs/heads/sloop/t/1")) == base
    assert [p for p, _ in asyncio.run(gitops.list_worktrees(repo))] == [repo]
    asyncio.run(gitops.remove_worktree(repo, path))  # already gone: no error


def test_remove_worktree_deletes_directory_git_forgot(repo: Path) -> None:
    path = new_worktree(repo)
    shutil.rmtree(Path(git(repo, "rev-parse", "--absolute-git-dir")) / "worktrees" / "w1")
    asyncio.run(gitops.remove_worktree(repo, path))
    assert not path.exists()


def test_remove_worktree_refuses_a_directory_that_is_not_a_worktree(root: Path, repo: Path) -> None:
    stranger = root / "stranger"
    stranger.mkdir()
    (stranger / "keep.txt").write_text("mine\n")
    with pytest.raises(GitError, match="refusing"):
        asyncio.run(gitops.remove_worktree(repo, stranger))
    assert (stranger / "keep.txt").exists()


# -- sync ------------------------------------------------------------------------------------


def test_ff_only_moves_main_when_not_checked_out(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "other")
    work = new_worktree(repo)
    tip = commit(work, {"branch.txt": "x\n"})

    result = asyncio.run(gitops.ff_only(repo, head(work), "main"))

    assert result == gitops.GitResult(ok=True, head=tip)
    assert head(repo, "main") == tip
    assert head(repo) != tip  # the checked-out branch "other" is untouched


def test_ff_only_moves_a_clean_checkout_of_main(repo: Path) -> None:
    work = new_worktree(repo)
    tip = commit(work, {"branch.txt": "x\n", "a.txt": "a, changed\n"})

    result = asyncio.run(gitops.ff_only(repo, head(work), "main"))

    assert result.ok
    assert result.head == tip
    assert head(repo, "main") == tip == head(repo)
    assert (repo / "branch.txt").read_text() == "x\n"
    assert (repo / "a.txt").read_text() == "a, changed\n"
    assert git(repo, "status", "--porcelain") == ""


def test_ff_only_refuses_a_dirty_checkout_of_main(repo: Path) -> None:
    old = head(repo, "main")
    work = new_worktree(repo)
    commit(work, {"branch.txt": "x\n"})
    (repo / "a.txt").write_text("someone is editing\n")

    result = asyncio.run(gitops.ff_only(repo, head(work), "main"))

    assert not result.ok
    assert result.head is None
    assert result.reason is not None
    assert f"checked out at {repo}" in result.reason
    assert "a.txt" in result.reason
    assert head(repo, "main") == old
    assert (repo / "a.txt").read_text() == "someone is editing\n"


def test_ff_only_refuses_when_main_moved_then_sync_fixes_it(repo: Path) -> None:
    work = new_worktree(repo)
    commit(work, {"branch.txt": "x\n"})
    moved = commit(repo, {"main.txt": "y\n"})

    refused = asyncio.run(gitops.ff_only(repo, head(work), "main"))

    assert not refused.ok
    assert refused.reason == (
        f"main moved since the branch was synced (main is at {moved[:12]}); sync again"
    )
    assert head(repo, "main") == moved

    git(work, "merge", "-q", "--no-edit", "main")  # what sync makes, by other means
    merged = asyncio.run(gitops.ff_only(repo, head(work), "main"))
    assert merged.ok
    assert merged.head == head(work) == head(repo, "main")
    assert (repo / "branch.txt").exists()


@pytest.mark.parametrize("checked_out", [False, True])
def test_ff_only_loses_the_race_to_another_writer(
    repo: Path, monkeypatch: pytest.MonkeyPatch, checked_out: bool
) -> None:
    """Main moves between the ancestry check and the write: the CAS must not drop that commit."""
    if not checked_out:
        git(repo, "checkout", "-q", "-b", "other")
    work = new_worktree(repo)
    tip = commit(work, {"branch.txt": "x\n"})
    real_git = gitops._git
    raced: list[str] = []

    async def racing_git(cwd: Path, *args: str, **kw: Any) -> tuple[int, str, str]:
        if args[0] in ("update-ref", "merge") and "--no-edit" not in args and not raced:
            if checked_out:
                raced.append(commit(repo, {"race.txt": "r\n"}))
            else:
                racer = git(repo, "commit-tree", "main^{tree}", "-p", "main", "-m", "race")
                git(repo, "update-ref", "refs/heads/main", racer)
                raced.append(racer)
        return await real_git(cwd, *args, **kw)

    monkeypatch.setattr(gitops, "_git", racing_git)
    result = asyncio.run(gitops.ff_only(repo, head(work), "main"))

    assert raced, "the write was never attempted"
    assert not result.ok
    assert result.reason is not None
    assert result.reason.startswith(
        f"main moved since the branch was synced (main is at {raced[0][:12]}"
    )
    assert head(repo, "main") == raced[0] != tip


def test_ff_only_runs_the_merges_maintenance_once_main_moved_and_the_caller_knows(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The merge in main's checkout starts no maintenance inside the caller's slot: the
    caller is told main moved first (it gives the slot back), then maintenance runs."""
    work = new_worktree(repo)
    tip = commit(work, {"branch.txt": "x\n"})
    real_git = gitops._git
    calls: list[tuple[str, str, tuple[str, ...]]] = []

    async def recording_git(cwd: Path, *args: str, **kw: Any) -> tuple[int, str, str]:
        calls.append((args[0], head(repo, "main"), kw.get("settings", ())))
        return await real_git(cwd, *args, **kw)

    monkeypatch.setattr(gitops, "_git", recording_git)
    told: list[str] = []
    result = asyncio.run(
        gitops.ff_only(repo, tip, "main", moved=lambda: told.append(head(repo, "main")))
    )

    assert result.ok
    assert told == [tip]
    assert [settings for kind, _, settings in calls if kind == "merge"] == [
        ("maintenance.auto=false",)
    ]
    assert calls[-1][:2] == ("maintenance", tip)


def test_ff_only_with_nothing_beyond_main_is_nothing_to_merge(repo: Path) -> None:
    work = new_worktree(repo)
    result = asyncio.run(gitops.ff_only(repo, head(work), "main"))
    assert not result.ok
    assert result.reason is not None
    assert result.reason.startswith("nothing to merge")
    allowed = asyncio.run(gitops.ff_only(repo, head(work), "main", allow_empty=True))
    assert allowed == gitops.GitResult(ok=True, head=head(repo, "main"))


def test_ff_only_git_errors(root: Path, repo: Path) -> None:
    work = new_worktree(repo)
    with pytest.raises(GitError, match="no branch"):
        asyncio.run(gitops.ff_only(repo, head(work), "trunk"))
    bare = root / "bare.git"
    git(root, "init", "-q", "--bare", str(bare))
    with pytest.raises(GitError, match="bare"):
        asyncio.run(gitops.ff_only(bare, head(work), "main"))


def test_rev_parse_names_commits_only(repo: Path) -> None:
    assert asyncio.run(gitops.rev_parse(repo, "main")) == head(repo)
    assert asyncio.run(gitops.rev_parse(repo, "missing")) is None
    assert asyncio.run(gitops.rev_parse(repo, "HEAD^{tree}")) is None
