"""Isolated checkouts on real repositories: creation, sandboxed git, bringing a branch back.

The hostile-checkout tests plant payloads in the checkout (``core.fsmonitor``, hooks,
``core.hooksPath``, a clean filter, ``include.path``, ``uploadpack.packObjectsHook``,
``commondir``) that would touch a marker in a host directory.  A control run of plain git on
the host shows the payloads are real; then every daemon-side operation runs, and the marker
directory must stay empty.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop

from sloopd.git import checkout, intake
from sloopd.git import checkout_edits as edits
from sloopd.git.checkout import CheckoutError, Isolation
from tests.support.daemon import wait_until
from tests.support.gitrepo import commit, git, head, make_repo

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")

T = TypeVar("T")
IDENTITY = ("sloop", "sloop@example.invalid")
BRANCH = "sloop/t1"
PRIVATE = "refs/sloop/runs/R1/implement-1"


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


@dataclass
class Setup:
    root: Path
    repo: Path
    work: Path
    base: str
    isolation: Isolation

    def upload_pack(self) -> list[str]:
        return checkout.upload_pack_command(self.work, self.isolation)

    def bring_back(self, runner: Callable[[Coroutine[Any, Any, str]], str] = run) -> str:
        return runner(
            intake.bring_back(
                self.repo,
                self.work,
                BRANCH,
                PRIVATE,
                self.base,
                sandboxed_upload_pack=self.upload_pack(),
                timeout=60,
            )
        )


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    repo = make_repo(tmp_path)
    base = commit(repo, {"c.txt": "c\n"}, "second")
    work = tmp_path / "co"
    run(checkout.create(repo, work, BRANCH, base, timeout=60))
    home = tmp_path / "git-home"
    home.mkdir()
    objects = run(checkout.objects_dir(repo, timeout=30))
    isolation = Isolation(objects=objects, home=home, hide=(repo / ".git",))
    return Setup(tmp_path, repo, work, base, isolation)


def refs(repo: Path) -> list[str]:
    return git(repo, "for-each-ref", "--format=%(refname)").splitlines()


# --- create ---------------------------------------------------------------------------


def test_create_borrows_the_objects_and_checks_out_the_branch(setup: Setup) -> None:
    alternates = setup.work / ".git" / "objects" / "info" / "alternates"
    assert alternates.read_text() == f"{(setup.repo / '.git' / 'objects').resolve()}\n"
    assert git(setup.work, "symbolic-ref", "HEAD") == f"refs/heads/{BRANCH}"
    assert head(setup.work) == setup.base
    assert git(setup.work, "status", "--porcelain") == ""
    assert sorted(p.name for p in setup.work.iterdir()) == [".git", "a.txt", "b.txt", "c.txt"]
    copied = [p for p in (setup.work / ".git" / "objects").rglob("*") if p.is_file()]
    assert copied == [alternates], "no object may be copied into the checkout"
    assert not (setup.work / ".git" / "hooks").exists()
    assert refs(setup.repo) == ["refs/heads/main"], "the main repository must not change"
    assert not (setup.repo / ".git" / "worktrees").exists()


def test_create_refuses_a_bad_base_a_bad_branch_and_a_used_directory(setup: Setup) -> None:
    with pytest.raises(CheckoutError, match="reading"):
        run(checkout.create(setup.repo, setup.root / "x", "b", "f" * 40, timeout=30))
    with pytest.raises(CheckoutError, match="not a valid ref name"):
        run(checkout.create(setup.repo, setup.root / "y", "bad..name", setup.base, timeout=30))
    with pytest.raises(CheckoutError, match="not empty"):
        run(checkout.create(setup.repo, setup.work, "other", setup.base, timeout=30))
    # A full sha of something that is no commit: refused by the reset, nothing left.
    tree = git(setup.repo, "rev-parse", f"{setup.base}^{{tree}}")
    with pytest.raises(CheckoutError, match="reading"):
        run(checkout.create(setup.repo, setup.root / "z", "c", tree, timeout=30))
    assert not (setup.root / "z").exists()


# --- sandboxed git in the checkout ----------------------------------------------------


def test_uncommitted_commit_all_and_bring_back(setup: Setup) -> None:
    (setup.work / "new file.txt").write_text("new\n")
    (setup.work / "a.txt").write_text("changed\n")
    paths = run(edits.uncommitted(setup.work, BRANCH, setup.isolation, timeout=60))
    assert sorted(paths) == ["a.txt", "new file.txt"]
    made = run(
        edits.commit_all(setup.work, BRANCH, "auto", setup.isolation, identity=IDENTITY, timeout=60)
    )
    assert made
    assert run(edits.uncommitted(setup.work, BRANCH, setup.isolation, timeout=60)) == []
    again = edits.commit_all(
        setup.work, BRANCH, "x", setup.isolation, identity=IDENTITY, timeout=60
    )
    assert run(again) is False
    tip = head(setup.work)
    assert (
        git(setup.work, "log", "-1", "--format=%an <%ae> %s")
        == "sloop <sloop@example.invalid> auto"
    )

    sha = setup.bring_back(uvloop.run)
    assert sha == tip
    assert head(setup.repo, PRIVATE) == tip
    assert head(setup.repo, "main") == setup.base
    assert refs(setup.repo) == ["refs/heads/main", PRIVATE], "no incoming ref may be left"
    assert git(setup.repo, "show", f"{PRIVATE}:a.txt") == "changed"


def test_bring_back_refuses_a_tip_that_does_not_descend_from_the_base(setup: Setup) -> None:
    (setup.work / "x.txt").write_text("x\n")
    run(
        edits.commit_all(setup.work, BRANCH, "good", setup.isolation, identity=IDENTITY, timeout=60)
    )
    good = setup.bring_back()
    # The agent rewrites its branch onto the base's parent: history the base is not part of.
    parent = head(setup.repo, "main~1")
    args = ["reset", "-q", "--hard", parent]
    assert (
        run(checkout.run_in_checkout(setup.work, args, setup.isolation, timeout=60)).returncode == 0
    )
    with pytest.raises(CheckoutError, match="does not descend from its base"):
        setup.bring_back()
    assert head(setup.repo, PRIVATE) == good, "a refused tip must not replace the earlier one"
    assert refs(setup.repo) == ["refs/heads/main", PRIVATE]


def test_bring_back_of_a_missing_branch_fails_with_a_reason(setup: Setup) -> None:
    git(setup.work, "branch", "-m", BRANCH, "renamed")
    with pytest.raises(CheckoutError, match="fetching"):
        setup.bring_back()
    assert refs(setup.repo) == ["refs/heads/main"]


def test_the_upload_pack_sandbox_sees_the_checkout_read_only(setup: Setup) -> None:
    argv = setup.upload_pack()
    pairs = list(zip(argv, argv[1:], argv[2:], strict=False))
    assert ("--ro-bind", str(setup.work), "/sloop/work") in pairs
    assert "--unshare-net" in argv
    assert "/sloop/worker.sock" not in argv


# --- a hostile checkout ---------------------------------------------------------------


PAYLOAD = """#!/bin/sh
touch "{markers}/$1" 2>/dev/null
echo "$1" >> .payload-ran
if [ "$1" = filter ]; then exec cat; fi
exit 0
"""
HOOKS = (
    "pre-commit",
    "post-commit",
    "commit-msg",
    "pre-merge-commit",
    "post-merge",
    "post-checkout",
    "reference-transaction",
    "pre-auto-gc",
    "post-rewrite",
)


def plant(setup: Setup, markers: Path) -> None:
    """Everything a hostile agent could leave in its checkout to run code on the host."""
    work = setup.work
    payload = work / ".sloop-payload"
    payload.write_text(PAYLOAD.format(markers=markers))
    payload.chmod(0o755)
    (work / ".git" / "info").mkdir(exist_ok=True)
    (work / ".git" / "info" / "exclude").write_text(".payload-ran\n.sloop-payload\n")
    for hooks_dir in (work / ".git" / "hooks", work / ".git" / "evil-hooks"):
        hooks_dir.mkdir(exist_ok=True)
        for name in HOOKS:
            hook = hooks_dir / name
            hook.write_text(f"#!/bin/sh\nsh .sloop-payload {name}\n")
            hook.chmod(0o755)
    (work / ".git" / "included").write_text("[core]\n\tfsmonitor = sh .sloop-payload include\n")
    (work / ".gitattributes").write_text("* filter=evil\n")
    config = {
        "core.fsmonitor": "sh .sloop-payload fsmonitor",
        "core.hooksPath": str(work / ".git" / "evil-hooks"),
        "filter.evil.clean": "sh .sloop-payload filter",
        "filter.evil.smudge": "sh .sloop-payload filter",
        "uploadpack.packObjectsHook": f"sh {payload} packhook",
        "include.path": "included",
    }
    for key, value in config.items():
        git(work, "config", key, value)


def test_a_hostile_checkout_runs_nothing_on_the_host(setup: Setup) -> None:
    markers = setup.root / "markers"
    markers.mkdir()
    plant(setup, markers)

    # Control: plain git on the host falls for it.
    subprocess.run(["git", "-C", str(setup.work), "status"], capture_output=True, check=False)
    subprocess.run(
        [
            "git",
            "-C",
            str(setup.work),
            "-c",
            "user.name=x",
            "-c",
            "user.email=x@x",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "control",
        ],
        capture_output=True,
        check=False,
    )
    # (the fsmonitor from include.path wins over the one set before it)
    assert {"include", "pre-commit", "filter"} <= {p.name for p in markers.iterdir()}
    for marker in markers.iterdir():
        marker.unlink()
    (setup.work / ".payload-ran").unlink()

    # Every daemon-side operation on the checkout.
    (setup.work / "work.txt").write_text("agent output\n")
    iso = setup.isolation
    # Status and the auto-commit read the files through the daemon's own git
    # directory: the agent's filter, fsmonitor, hooks and excludes play no part.
    paths = run(edits.uncommitted(setup.work, BRANCH, iso, timeout=60))
    assert "work.txt" in paths
    assert ".sloop-payload" in paths  # info/exclude is the agent's: not obeyed
    assert run(edits.commit_all(setup.work, BRANCH, "auto", iso, identity=IDENTITY, timeout=60))
    assert not (setup.work / ".payload-ran").exists()
    sha = setup.bring_back()

    assert list(markers.iterdir()) == [], "a payload ran outside the sandbox"
    assert head(setup.repo, PRIVATE) == sha
    assert git(setup.repo, "show", f"{sha}:work.txt") == "agent output"


def objects_of(work: Path) -> list[str]:
    return sorted(str(p) for p in (work / ".git" / "objects").rglob("*"))


def test_the_listing_bring_back_runs_nothing_of_the_agents_and_writes_nothing_there(
    setup: Setup,
) -> None:
    """The uncommitted listing runs in the upload-pack's sandbox (the checkout read-only):
    it sees what the agent left through the daemon's own git directory, obeys none of
    the agent's settings, and adds no object to the checkout; the run's branch moves in
    the bring-back's transaction."""
    markers = setup.root / "markers"
    markers.mkdir()
    plant(setup, markers)
    (setup.work / "work.txt").write_text("agent output\n")
    (setup.work / "c.txt").write_text("changed\n")
    before = objects_of(setup.work)
    upload = edits.listing_upload_pack(setup.work, BRANCH, setup.isolation)
    edits.unlisted(setup.isolation)
    also = (f"refs/heads/{BRANCH}",)
    sha = run(
        intake.bring_back(
            setup.repo,
            setup.work,
            BRANCH,
            PRIVATE,
            setup.base,
            sandboxed_upload_pack=upload,
            timeout=60,
            also=also,
        )
    )
    listed = edits.listed(setup.work, setup.isolation)
    assert {"work.txt", "c.txt", ".sloop-payload"} <= set(listed)  # info/exclude not obeyed
    assert list(markers.iterdir()) == [], "a payload ran outside the sandbox"
    assert not (setup.work / ".payload-ran").exists(), "a payload ran inside it"
    assert objects_of(setup.work) == before, "the listing wrote into the checkout"
    assert head(setup.repo, PRIVATE) == head(setup.repo, also[0]) == sha == head(setup.work)
    assert refs(setup.repo) == sorted(["refs/heads/main", also[0], PRIVATE])


def test_a_listing_that_fails_says_why_and_leaves_no_list(setup: Setup) -> None:
    git(setup.work, "branch", "-m", BRANCH, "renamed")
    upload = edits.listing_upload_pack(setup.work, BRANCH, setup.isolation)
    edits.unlisted(setup.isolation)
    with pytest.raises(CheckoutError, match="fetching"):
        run(
            intake.bring_back(
                setup.repo,
                setup.work,
                BRANCH,
                PRIVATE,
                setup.base,
                sandboxed_upload_pack=upload,
                timeout=60,
            )
        )
    with pytest.raises(CheckoutError, match="cannot read the files"):
        edits.listed(setup.work, setup.isolation)
    assert refs(setup.repo) == ["refs/heads/main"]


def test_a_commondir_pointing_at_the_main_repository_reaches_nothing(setup: Setup) -> None:
    (setup.work / ".git" / "commondir").write_text(f"{setup.repo / '.git'}\n")
    parent = head(setup.repo, "main~1")
    args = ["update-ref", "refs/heads/main", parent]
    run(checkout.run_in_checkout(setup.work, args, setup.isolation, timeout=60))
    assert head(setup.repo, "main") == setup.base
    assert refs(setup.repo) == ["refs/heads/main"]


# --- deadlines, cancellation, removal -------------------------------------------------


def slow_bwrap(root: Path) -> tuple[str, Path]:
    """A stand-in for bwrap that records its pid and hangs."""
    pidfile = root / "slow.pid"
    script = root / "slow-bwrap"
    script.write_text(f"#!/bin/sh\necho $$ > {pidfile}\nexec sleep 300\n")
    script.chmod(0o755)
    return str(script), pidfile


def gone(pidfile: Path) -> bool:
    pid = int(pidfile.read_text())
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return state[state.rfind(")") + 2] == "Z"


def test_a_git_call_past_its_timeout_is_killed(setup: Setup) -> None:
    bwrap, pidfile = slow_bwrap(setup.root)
    iso = Isolation(setup.isolation.objects, setup.isolation.home, bwrap=bwrap)
    with pytest.raises(CheckoutError, match="did not finish within"):
        run(checkout.run_in_checkout(setup.work, ["status"], iso, timeout=0.5))
    assert gone(pidfile)


def test_a_cancelled_git_call_is_killed(setup: Setup) -> None:
    bwrap, pidfile = slow_bwrap(setup.root)
    iso = Isolation(setup.isolation.objects, setup.isolation.home, bwrap=bwrap)

    async def scenario() -> None:
        task = asyncio.create_task(
            checkout.run_in_checkout(setup.work, ["status"], iso, timeout=60)
        )
        # The pid written, not only the file made: a kill in between leaves it empty.
        while not pidfile.exists() or not pidfile.read_text().strip():
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(scenario())
    # A tool cancelled while its start was still under way (the pid file can be written
    # before the starter's thread returns) is killed and collected from that thread, a
    # moment after the caller's cancel: gone then, not left to sleep its 300 s (seen
    # still alive right after the cancel under load).
    wait_until(lambda: gone(pidfile), timeout=10)


def test_remove_deletes_what_an_agent_left_without_following_links(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = setup.root / "outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    locked = setup.work / "locked" / "deeper"
    locked.mkdir(parents=True)
    (locked / "f").write_text("f")
    (setup.work / "link").symlink_to(outside)
    os.chmod(locked, 0)
    os.chmod(locked.parent, stat.S_IRUSR | stat.S_IXUSR)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # the unprivileged path: undo chmods
    run(checkout.remove(setup.work))
    assert not setup.work.exists()
    assert (outside / "keep").read_text() == "keep"
    run(checkout.remove(setup.work))  # already gone: fine
