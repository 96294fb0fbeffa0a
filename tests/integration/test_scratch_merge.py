"""``sync``'s merge in the daemon's scratch repository, on real repositories.

The merge must be the one ``git merge`` makes (already up to date, fast-forward, a
two-parent commit, the conflicting paths) and obey no driver, filter or attribute that
anyone named: not the agent's committed ``.gitattributes``, not the main repository's
``info/attributes`` or config, not the daemon user's global git config.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sloopd.git.scratch import Merged, ScratchRepository
from tests.support.gitrepo import commit, git, head, make_repo

IDENTITY = ("sloop", "sloop@example.invalid")


def _scratch(repo: Path, root: Path) -> ScratchRepository:
    objects = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-path", "objects"))
    return ScratchRepository(root / "state" / "merge.git", objects)


def _merge(scratch: ScratchRepository, ours: str, theirs: str) -> Merged:
    return asyncio.run(scratch.merge(ours, theirs, "Merge main", identity=IDENTITY, timeout=30))


def _branch(repo: Path, name: str, files: dict[str, str], at: str = "main") -> str:
    git(repo, "branch", name, at)
    git(repo, "switch", "-q", name)
    sha = commit(repo, files, f"{name} work")
    git(repo, "switch", "-q", "main")
    return sha


def test_merges_like_git_merge(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    scratch = _scratch(repo, tmp_path)
    base = head(repo, "main")
    work = _branch(repo, "work", {"w.txt": "work\n"})
    # Main has not moved: the work already holds it, nothing is made.
    assert _merge(scratch, work, base) == Merged(work)
    # The work is behind main (nothing of its own): a fast-forward, as git merge does.
    moved = commit(repo, {"m.txt": "main\n"}, "main moves")
    assert _merge(scratch, base, moved) == Merged(moved)
    # Both moved: a two-parent commit with both sides' files, by the daemon's identity.
    merged = _merge(scratch, work, moved)
    assert merged.commit is not None
    assert merged.conflicts == ()
    parents = git(repo, "show", "-s", "--format=%P", merged.commit).split()
    assert parents == [work, moved]
    assert git(repo, "show", f"{merged.commit}:w.txt") == "work"
    assert git(repo, "show", f"{merged.commit}:m.txt") == "main"
    who = git(repo, "show", "-s", "--format=%an <%ae>|%s", merged.commit)
    assert who == "sloop <sloop@example.invalid>|Merge main"
    # The scratch is the daemon's: a bare repository whose objects are main's own.
    assert (tmp_path / "state" / "merge.git" / "objects").is_symlink()
    assert git(repo, "cat-file", "-t", merged.commit) == "commit"


def test_a_conflict_lists_each_path_once_and_makes_nothing(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    scratch = _scratch(repo, tmp_path)
    work = _branch(repo, "work", {"a.txt": "work's a\n", "b.txt": "work's b\n"})
    moved = commit(repo, {"a.txt": "main's a\n", "b.txt": "main's b\n"}, "main edits")
    before = git(repo, "for-each-ref")
    assert _merge(scratch, work, moved) == Merged(None, ("a.txt", "b.txt"))
    assert git(repo, "for-each-ref") == before


def test_no_driver_filter_or_attribute_anyone_named_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The merge-driver rigging of issue 22, aimed at every place git reads settings from."""
    marker = tmp_path / "driver-ran"
    driver = f"touch {marker}; git merge-file %A %O %B; printf BACKDOOR >> %A"
    repo = make_repo(tmp_path)
    scratch = _scratch(repo, tmp_path)
    # The implementer committed a .gitattributes that unions every conflict away.
    work = _branch(repo, "work", {".gitattributes": "* merge=union\n", "w.txt": "w\n"})
    clash = _branch(repo, "clash", {".gitattributes": "* merge=union\n", "m.txt": "work\n"})
    moved = commit(repo, {"m.txt": "main\n"}, "main moves")
    # The main repository's own config and attributes name the driver for every path...
    git(repo, "config", "merge.x.driver", driver)
    git(repo, "config", "filter.x.clean", f"touch {marker}; cat")
    git(repo, "config", "filter.x.smudge", f"touch {marker}; cat")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text("* merge=x filter=x\n")
    (repo / ".gitattributes").write_text("* merge=x filter=x\n")
    # ... and so do the daemon user's global config and attributes file.
    home = tmp_path / "home"
    home.mkdir()
    (home / "attributes").write_text("* merge=x\n")
    (home / ".gitconfig").write_text(
        f'[merge "x"]\n\tdriver = {driver}\n[core]\n\tattributesFile = {home / "attributes"}\n'
        "[merge]\n\trenormalize = true\n"
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    merged = _merge(scratch, work, moved)
    assert merged.commit is not None
    assert git(repo, "show", f"{merged.commit}:m.txt") == "main"
    assert not marker.exists(), "a driver or filter ran in the daemon's merge"
    # A real conflict stays a conflict: no union driver and no custom one resolved it.
    assert _merge(scratch, clash, moved).conflicts == ("m.txt",)
    assert not marker.exists(), "a driver or filter ran in the daemon's merge"
    # Control: the same rigging does run for a plain git merge in the main repository.
    (repo / ".gitattributes").unlink()
    git(repo, "merge", "-q", "--no-edit", "work")
    assert marker.exists(), "the rigging is not real: plain git ignored it"


def test_a_half_made_scratch_is_made_again(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    scratch = _scratch(repo, tmp_path)
    (tmp_path / "state" / "merge.git" / "objects").mkdir(parents=True)
    work = _branch(repo, "work", {"w.txt": "w\n"})
    moved = commit(repo, {"m.txt": "m\n"}, "main moves")
    assert _merge(scratch, work, moved).commit is not None
    assert (tmp_path / "state" / "merge.git" / "objects").is_symlink()
