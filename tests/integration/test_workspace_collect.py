"""The stage contract's collect, ``git.workspace.take_back``: one value, whichever way.

It is the one collect of a stage on the daemon's host (into the main repository) and
on a Ray node (into the node's cache): what an agent committed and what it left are
read into ``Collected`` the same with or without the sandbox, ``commit = "auto"``
commits the leftovers with the daemon's identity on top of the agent's commit, a
producing command's leftovers are not listed, and a reviewer's leftovers are what
``Collected.discarded`` says against its pinned commit.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from sloopd.git import checkout
from sloopd.git.checkout import Isolation
from sloopd.git.workspace import take_back
from sloopd.proc.stage_io import Collected
from tests.support.gitrepo import commit, git, make_repo

IDENTITY = ("sloop", "sloop@example.invalid")
BRANCH = "sloop/t1"
REF = "refs/sloop/runs/R1/0-1"
SANDBOXES = [
    None,
    pytest.param(
        "bwrap",
        marks=pytest.mark.skipif(shutil.which("bwrap") is None, reason="no bubblewrap"),
    ),
]


def _place(tmp_path: Path, bwrap: str | None) -> tuple[Path, Path, str, Isolation]:
    repo = make_repo(tmp_path)
    base = commit(repo, {"c.txt": "c\n"}, "second")
    work = tmp_path / "co"
    asyncio.run(checkout.create(repo, work, BRANCH, base, timeout=60))
    home = tmp_path / "git-home"
    home.mkdir()
    objects = asyncio.run(checkout.objects_dir(repo, timeout=30))
    return repo, work, base, Isolation(objects, home, hide=(repo / ".git",), bwrap=bwrap)


def _agent(work: Path) -> str:
    """An agent's stage: one commit, one file edited after it, one new file."""
    (work / "agent.txt").write_text("agent\n")
    git(work, "add", "agent.txt")
    git(work, "commit", "-qm", "agent")
    (work / "c.txt").write_text("changed\n")
    (work / "new.txt").write_text("new\n")
    return git(work, "rev-parse", "HEAD")


def _take(repo: Path, work: Path, base: str, isolation: Isolation, **how: object) -> Collected:
    listing = bool(how.get("listing", True))
    auto = how.get("auto_commit")
    return asyncio.run(
        take_back(
            repo, work, BRANCH, REF, base, isolation,
            listing=listing, auto_commit=str(auto) if auto else None,
            identity=IDENTITY, timeout=60,
        )
    )  # fmt: skip


@pytest.mark.parametrize("bwrap", SANDBOXES)
def test_the_commit_and_the_leftovers_are_one_value(tmp_path: Path, bwrap: str | None) -> None:
    repo, work, base, isolation = _place(tmp_path, bwrap)
    tip = _agent(work)
    collected = _take(repo, work, base, isolation)
    assert collected == Collected(tip, ("c.txt", "new.txt"))
    assert git(repo, "rev-parse", REF) == tip  # recorded in the daemon's repository


@pytest.mark.parametrize("bwrap", SANDBOXES)
def test_auto_commit_commits_the_leftovers_on_the_agents_commit(
    tmp_path: Path, bwrap: str | None
) -> None:
    repo, work, base, isolation = _place(tmp_path, bwrap)
    tip = _agent(work)
    collected = _take(repo, work, base, isolation, auto_commit="sloop: auto")
    assert collected.uncommitted == ()
    assert collected.tip != tip
    assert git(repo, "rev-parse", f"{collected.tip}^") == tip
    assert git(repo, "log", "-1", "--format=%an|%s", collected.tip) == "sloop|sloop: auto"
    assert git(repo, "rev-parse", REF) == collected.tip


def test_a_producing_commands_leftovers_are_not_listed(tmp_path: Path) -> None:
    repo, work, base, isolation = _place(tmp_path, None)
    tip = _agent(work)
    assert _take(repo, work, base, isolation, listing=False) == Collected(tip, ())


def test_a_reviewer_that_left_nothing_discarded_nothing() -> None:
    pinned = "a" * 40
    assert Collected(pinned).discarded(pinned) is None
    assert Collected(pinned, ("x",)).discarded(pinned) == (None, ("x",))
    assert Collected("b" * 40).discarded(pinned) == ("b" * 40, ())
