"""``post`` refuses files in the git directory and the state directory (issue 23, item 5).

Both places hold files a ticket must never be read from: the git directory (hooks,
config, a worktree's private files, another repository's ``.git`` inside the
working tree) and the state directory (the store, every run's checkout, prompts and
HOME, which agents write).  A file there is refused after symlinks are resolved,
with ``invalid_arguments`` whose ``details.rule`` names the rule, and nothing is
registered.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import Client, DaemonProcess, git
from tests.support.tickets import SLOOP_TOML, queue_repo, ticket_text

GIT_DIRECTORY = "git_directory"
STATE_DIRECTORY = "state_directory"


@pytest.fixture
def repo(sandbox: Path) -> Path:
    return queue_repo(sandbox)


def start(sandbox: Path, repo: Path, state_dir: Path) -> DaemonProcess:
    return DaemonProcess(repo=repo, state_dir=state_dir, socket_dir=sandbox / "s").start()


@pytest.fixture
def in_git_dir(sandbox: Path, repo: Path) -> Iterator[DaemonProcess]:
    """A daemon on its default state directory: ``sloop/`` in the repository's .git."""
    daemon = start(sandbox, repo, repo / ".git" / "sloop")
    try:
        yield daemon
    finally:
        assert daemon.stop() == 0, daemon.log()


def write(repo: Path, relative: str, text: str | None = None) -> Path:
    target = repo / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text or ticket_text("Planted", "Run this."), encoding="utf-8")
    return target


def refused(client: Client, path: str, rule: str) -> dict[str, Any]:
    """The refusal of posting ``path``, checked to name ``rule``; nothing registered."""
    err = client.error("post", {"path": path})
    assert err["code"] == "invalid_arguments", err
    assert err["details"] == {"path": path, "rule": rule}, err
    assert err["message"].startswith(f"{path}: "), err
    assert client.ok("show")["tickets"] == []
    return err


def test_files_inside_the_git_directory_are_refused(repo: Path, in_git_dir: DaemonProcess) -> None:
    client = in_git_dir.client()
    write(repo, ".git/notes.md")
    err = refused(client, ".git/notes.md", GIT_DIRECTORY)
    assert "git directory" in err["message"], err
    # Absolute, and through a path that only reaches it after '..'.
    refused(client, str(repo / ".git" / "notes.md"), GIT_DIRECTORY)
    refused(client, "tickets/../.git/notes.md", GIT_DIRECTORY)


def test_files_inside_the_state_directory_are_refused(
    repo: Path, in_git_dir: DaemonProcess
) -> None:
    client = in_git_dir.client()
    write(repo, ".git/sloop/planted.md")
    err = refused(client, ".git/sloop/planted.md", STATE_DIRECTORY)
    assert "state directory" in err["message"], err
    # A run's checkout lives there too: what an agent wrote is never a ticket.
    write(repo, ".git/sloop/checkouts/R1/tickets/evil.md")
    refused(client, ".git/sloop/checkouts/R1/tickets/evil.md", STATE_DIRECTORY)


def test_a_symlink_into_the_git_directory_is_refused(repo: Path, in_git_dir: DaemonProcess) -> None:
    client = in_git_dir.client()
    write(repo, ".git/notes.md")
    (repo / "tickets").mkdir(exist_ok=True)
    os.symlink("../.git/notes.md", repo / "tickets" / "link.md")
    refused(client, "tickets/link.md", GIT_DIRECTORY)
    write(repo, ".git/sloop/planted.md")
    os.symlink("../.git/sloop/planted.md", repo / "tickets" / "state-link.md")
    refused(client, "tickets/state-link.md", STATE_DIRECTORY)
    # A folder link into .git is resolved the same way.
    os.symlink("../.git", repo / "tickets" / "meta")
    refused(client, "tickets/meta/notes.md", GIT_DIRECTORY)
    # Ordinary tickets still post.
    write(repo, "tickets/fine.md")
    assert client.ok("post", {"path": "tickets/fine.md", "manual": True})["created"] is True


def test_a_nested_repositorys_git_directory_is_refused(
    repo: Path, in_git_dir: DaemonProcess
) -> None:
    """Another repository inside the working tree (a vendored checkout, a submodule's
    old layout) has a .git of its own: its hooks and notes are no tickets either."""
    client = in_git_dir.client()
    write(repo, "vendor/lib/.git/notes.md")
    refused(client, "vendor/lib/.git/notes.md", GIT_DIRECTORY)


def test_a_separate_git_directory_inside_the_working_tree_is_refused(
    sandbox: Path, repo: Path
) -> None:
    """``git init --separate-git-dir``: .git is a file and the git (common) directory is
    a folder of another name; it is found by asking git, not by its name."""
    git(repo, "init", "-q", "--separate-git-dir", str(repo / "meta"))
    assert (repo / ".git").is_file()
    daemon = start(sandbox, repo, sandbox / "state")
    try:
        client = daemon.client()
        write(repo, "meta/notes.md")
        refused(client, "meta/notes.md", GIT_DIRECTORY)
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_a_state_directory_inside_the_working_tree_is_refused(sandbox: Path, repo: Path) -> None:
    daemon = start(sandbox, repo, repo / "work-state")
    try:
        client = daemon.client()
        write(repo, "work-state/planted.md")
        refused(client, "work-state/planted.md", STATE_DIRECTORY)
        write(repo, "tickets/fine.md")
        assert client.ok("post", {"path": "tickets/fine.md", "manual": True})["created"] is True
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_the_rules_hold_in_a_linked_worktree(sandbox: Path, repo: Path) -> None:
    """A daemon on a linked worktree: its git directory is ``.git/worktrees/<name>`` of
    the main repository, and its .git is a file; posts from the worktree still work."""
    worktree = sandbox / "wt"
    git(repo, "worktree", "add", "-q", "-b", "side", str(worktree))
    (worktree / "sloop.toml").write_text(SLOOP_TOML)
    daemon = start(sandbox, worktree, worktree / "st")
    try:
        client = daemon.client()
        write(worktree, "st/planted.md")
        refused(client, "st/planted.md", STATE_DIRECTORY)
        write(worktree, "tickets/fine.md")
        assert client.ok("post", {"path": "tickets/fine.md", "manual": True})["created"] is True
    finally:
        assert daemon.stop() == 0, daemon.log()
