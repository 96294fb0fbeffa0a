"""What the daemon reads of a stage's own layer (``sloopd.git.layered``), and the
overlay's command line (``sloopd.proc.overlay``): from folders made by hand, as
overlayfs leaves them (a whiteout is a character device 0/0)."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from sloopd.git import layered
from sloopd.git.layered import Layered
from sloopd.proc import overlay
from sloopd.proc.overlay import Overlay

BRANCH = "sloop/t/1"
COMMIT = "a" * 40


def whiteout(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, stat.S_IFCHR | 0o000, os.makedev(0, 0))


@pytest.fixture
def made(tmp_path: Path) -> Layered:
    root = tmp_path / "trees"
    lower = root / "k" / "l"
    for name in ("src/a.txt", "src/b.txt", "docs/x.md", "top.txt"):
        (lower / name).parent.mkdir(parents=True, exist_ok=True)
        (lower / name).write_text(name)
    (lower / ".git").mkdir()
    upper, work = tmp_path / "up", tmp_path / "w"
    work.mkdir()
    (upper / ".git" / "refs" / "heads" / "sloop" / "t").mkdir(parents=True)
    (upper / ".git" / "HEAD").write_text(f"ref: refs/heads/{BRANCH}\n")
    (upper / ".git" / "refs" / "heads" / BRANCH).write_text(f"{COMMIT}\n")
    return Layered(COMMIT, ("k",), Overlay(root, ("k/l",), upper, work), tmp_path)


def test_a_layer_as_made_holds_no_change_and_an_untouched_git(made: Layered) -> None:
    assert layered.changes(made) == ()
    assert layered.git_untouched(made, BRANCH)
    assert layered.removed(made, Path("/co")) is None


@pytest.mark.parametrize(
    "touch",
    [
        lambda g: (g / "HEAD").write_text("ref: refs/heads/main\n"),
        lambda g: (g / "refs" / "heads" / BRANCH).write_text("b" * 40 + "\n"),
        lambda g: (g / "config").write_text("[core]\n"),
        lambda g: (g / "objects" / "ab").mkdir(parents=True),
        lambda g: (g / "packed-refs").write_text(""),
        lambda g: (g / "refs" / "heads" / BRANCH).unlink(),
    ],
)
def test_any_write_under_git_means_the_work_is_fetched(made: Layered, touch: object) -> None:
    touch(made.upper / ".git")  # type: ignore[operator]
    assert not layered.git_untouched(made, BRANCH)


def test_a_ref_turned_into_a_link_is_not_read_through(made: Layered, tmp_path: Path) -> None:
    ref = made.upper / ".git" / "refs" / "heads" / BRANCH
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text(f"{COMMIT}\n")
    ref.unlink()
    ref.symlink_to(elsewhere)
    assert not layered.git_untouched(made, BRANCH)


def test_changes_name_written_deleted_and_replaced_paths(made: Layered) -> None:
    upper = made.upper
    (upper / "src").mkdir()
    (upper / "src" / "a.txt").write_text("changed")
    whiteout(upper / "src" / "b.txt")
    whiteout(upper / "docs")
    (upper / "new" / "deep").mkdir(parents=True)
    (upper / "new" / "deep" / "n.txt").write_text("n")
    (upper / "link").symlink_to("/etc/passwd")
    (upper / "empty").mkdir()
    found = layered.changes(made)
    assert found is not None
    assert sorted(found) == sorted(
        ["src/a.txt", "src/b.txt", "docs", "new", "new/deep", "new/deep/n.txt", "link", "empty"]
    )


def test_too_many_changes_fall_back_to_the_whole_listing(made: Layered) -> None:
    for n in range(12):
        (made.upper / f"f{n}").write_text("x")
    assert layered.changes(made, limit=10) is None


def test_a_removed_git_and_a_removed_checkout_are_told_apart(made: Layered) -> None:
    git = made.upper / ".git"
    for entry in sorted(git.rglob("*"), reverse=True):
        entry.rmdir() if entry.is_dir() else entry.unlink()
    git.rmdir()
    whiteout(git)
    said = layered.removed(made, Path("/co"))
    assert said is not None
    assert "removed its checkout's .git" in said
    for name in ("src", "docs", "top.txt"):
        whiteout(made.upper / name)
    said = layered.removed(made, Path("/co"))
    assert said is not None
    assert "every file and its .git" in said


def test_the_overlay_options_name_layers_relative_to_their_root(tmp_path: Path) -> None:
    stack = Overlay(tmp_path, ("k1/l", "k0/l"), tmp_path / "up", tmp_path / "w")
    writable = overlay.options(stack, writable=True)
    assert writable.startswith(f"lowerdir=k1/l:k0/l,upperdir={tmp_path}/up,workdir={tmp_path}/w")
    reader = overlay.options(stack, writable=False)
    assert reader.startswith(f"lowerdir={tmp_path}/up:k1/l:k0/l,")
    assert "upperdir" not in reader
    assert ("userxattr" in writable) is (os.geteuid() != 0)
    argv = overlay.prefix(stack, tmp_path / "m", writable=True)
    assert argv[0] == "unshare"
    assert argv[-3:] == [str(tmp_path), writable, str(tmp_path / "m")]


def test_paths_overlayfs_cannot_be_given_are_refused() -> None:
    assert overlay.usable_path(Path("/var/lib/sloop/state"))
    for bad in ("/a,b", "/a:b", "/a\\b"):
        assert not overlay.usable_path(Path(bad))


def test_the_keeper_copies_one_at_a_time_and_lets_go_of_the_trees(
    made: Layered, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    running: list[Path] = []
    most = 0
    released: list[Layered] = []

    async def copy_out(made: Layered, worktree: Path, isolation: object) -> None:
        nonlocal most
        running.append(worktree)
        most = max(most, len(running))
        await asyncio.sleep(0.01)
        running.remove(worktree)
        (worktree / "copied").write_text("x")

    monkeypatch.setattr(layered, "copy_out", copy_out)

    async def go() -> None:
        keeper = layered.Keeper(released.append)
        for n in range(3):
            (tmp_path / f"k{n}").mkdir()
            keeper.keep(made, tmp_path / f"k{n}", None)  # type: ignore[arg-type]
        await keeper.cancel(tmp_path / "k2")  # its folder is about to be removed
        await keeper.settled()

    asyncio.run(go())
    assert most == 1
    assert [(tmp_path / f"k{n}" / "copied").exists() for n in range(3)] == [True, True, False]
    assert len(released) == 3  # a cancelled copy lets go of its trees too
