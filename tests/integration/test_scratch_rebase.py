"""``sync``'s rebase in the daemon's scratch repository, on real repositories.

The replay must make what ``git rebase`` makes (the same trees, authors and messages,
the same commits left out, the same conflicting paths) and obey no driver, filter or
attribute anyone named: not the agent's committed ``.gitattributes``, not the main
repository's config or ``info/attributes``, not the daemon user's global git config.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from sloopd.git.scratch import PINNED_ATTRIBUTES, Merged, ScratchRepository
from tests.support.gitrepo import commit, git, head, make_repo

IDENTITY = ("sloop", "sloop@example.invalid")
SHARED = "".join(f"line {n}\n" for n in range(1, 10))


def _scratch(repo: Path) -> ScratchRepository:
    objects = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-path", "objects"))
    return ScratchRepository(repo.parent / "state" / "merge.git", objects)


def _rebase(repo: Path, work: str, onto: str) -> Merged:
    scratch = _scratch(repo)
    return asyncio.run(scratch.rebase(work, onto, identity=IDENTITY, timeout=30))


def _git_rebase(repo: Path, work: str, onto: str) -> Merged:
    """What ``git rebase`` makes of the same commits, in a throw-away worktree."""
    where = repo.parent / "by-git"
    git(repo, "worktree", "add", "-q", "--detach", str(where), work)
    try:
        who = ["-c", "user.name=x", "-c", "user.email=x@x"]
        done = subprocess.run(
            ["git", "-C", str(where), *who, "rebase", "-q", onto],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 0:
            return Merged(head(where))
        # Stopped at a conflict, or refused to start (no paths then).
        listed = git(where, "diff", "--name-only", "--diff-filter=U").splitlines()
        subprocess.run(["git", "-C", str(where), "rebase", "--abort"], capture_output=True)
        return Merged(None, tuple(listed))
    finally:
        git(repo, "worktree", "remove", "--force", str(where))


def _line(repo: Path, onto: str, tip: str) -> list[tuple[str, str, str]]:
    """Each commit from ``onto`` to ``tip``: its tree, author line and raw message."""
    shas = git(repo, "rev-list", "--reverse", f"{onto}..{tip}").split()
    return [
        (
            git(repo, "rev-parse", f"{sha}^{{tree}}"),
            git(repo, "show", "-s", "--format=%an <%ae> %ad", "--date=raw", sha),
            git(repo, "cat-file", "commit", sha).partition("\n\n")[2],
        )
        for sha in shas
    ]


def _on(repo: Path, branch: str, at: str, *steps: Callable[[Path], object]) -> str:
    git(repo, "switch", "-q", "-C", branch, at)
    for step in steps:
        step(repo)
    tip = head(repo)
    git(repo, "switch", "-q", "main")
    return tip


def _files(files: dict[str, str], message: str = "work") -> Callable[[Path], object]:
    return lambda repo: commit(repo, files, message)


def _raw(*args: str) -> Callable[[Path], object]:
    return lambda repo: git(repo, *args)


def _as_is(repo: Path, parent: str | None, files: dict[str, str], message: str) -> str:
    """A commit of ``files`` on ``parent`` (None: a root commit), their bytes stored as
    they are (as an agent's own git may store them: no filter, no end-of-line
    conversion), made without the checkout's index or files."""
    env = {**os.environ, "GIT_INDEX_FILE": str(repo.parent / "as-is.index")}

    def run(*args: str, text: str | None = None) -> str:
        done = subprocess.run(
            ["git", "-C", str(repo), *args],
            input=None if text is None else text.encode(),
            env=env,
            capture_output=True,
            check=True,
        )
        return done.stdout.decode().strip()

    run("read-tree", *([parent] if parent is not None else ["--empty"]))
    for name, text in files.items():
        blob = run("hash-object", "-w", "--stdin", text=text)
        run("update-index", "--add", "--cacheinfo", f"100644,{blob},{name}")
    tree = run("write-tree")
    who = ["-c", "user.name=agent", "-c", "user.email=agent@example.invalid"]
    return run(*who, "commit-tree", tree, *(["-p", parent] if parent else []), "-m", message)


SCENARIOS: dict[str, Callable[[Path, str], str]] = {
    # Two commits beside main's change, a message git would have cleaned kept as is.
    "beside": lambda repo, base: _on(
        repo,
        "w",
        base,
        _files({"w.txt": "w\n"}, "first"),
        _raw("commit", "-q", "--allow-empty", "--cleanup=verbatim", "-m", "  odd \n\n\nmsg  "),
        _files({"w2.txt": "w2\n"}, "third\n\nwith a body"),
    ),
    # Both edit shared.txt, far apart: a clean three-way merge.
    "same file": lambda repo, base: _on(
        repo, "w", base, _files({"shared.txt": SHARED.replace("line 2\n", "agent 2\n")})
    ),
    # The agent's change is main's already (same patch): git leaves the commit out.
    "upstream already": lambda repo, base: _on(
        repo,
        "w",
        base,
        _files({"shared.txt": SHARED.replace("line 8\n", "main 8\n")}, "same as main"),
        _files({"w.txt": "w\n"}),
    ),
    # A commit the replay empties (main made the change with more): dropped.
    "becomes empty": lambda repo, base: _on(
        repo,
        "w",
        base,
        _files({"m.txt": "main\n"}, "part of main's change"),
        _files({"w.txt": "w\n"}),
    ),
    # A merge commit in the branch: left out, the side branch's commits replayed.
    "a merge": lambda repo, base: (
        _on(repo, "side", base, _files({"side.txt": "side\n"}, "side")),
        _on(
            repo,
            "w",
            base,
            _files({"w.txt": "w\n"}),
            _raw("merge", "-q", "--no-ff", "-m", "merge side", "side"),
        ),
    )[1],
    # A root commit merged in: replayed over the empty tree.
    "a root": lambda repo, base: _on(
        repo,
        "w",
        base,
        lambda repo: git(
            repo,
            "merge",
            "-q",
            "--allow-unrelated-histories",
            "-m",
            "lone",
            _as_is(repo, None, {"lone.txt": "lone\n"}, "a root"),
        ),
    ),
    # Main renamed the file the agent edits: the edit follows the rename.
    "rename": lambda repo, base: _on(repo, "w", base, _files({"b.txt": "b\nagent\n"})),
    # A real conflict: the first commit that conflicts names its paths.
    "conflict": lambda repo, base: _on(
        repo,
        "w",
        base,
        _files({"w.txt": "w\n"}),
        _files({"shared.txt": SHARED.replace("line 5\n", "agent 5\n"), "a.txt": "agent\n"}),
    ),
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_rebases_like_git_rebase(tmp_path: Path, scenario: str) -> None:
    repo = make_repo(tmp_path)
    commit(repo, {"shared.txt": SHARED}, "shared")
    base = head(repo)
    work = SCENARIOS[scenario](repo, base)
    git(repo, "mv", "b.txt", "renamed.txt")
    git(repo, "commit", "-q", "-m", "main renames b.txt")
    edited = SHARED.replace("line 8\n", "main 8\n")
    commit(repo, {"shared.txt": edited}, "the same change as the agent's")
    edited = edited.replace("line 5\n", "main 5\n")
    onto = commit(repo, {"shared.txt": edited, "m.txt": "main\n", "a.txt": "main\n"}, "main")

    ours, theirs = _rebase(repo, work, onto), _git_rebase(repo, work, onto)
    assert ours.conflicts == theirs.conflicts
    if theirs.commit is None:
        assert ours.commit is None
        return
    assert ours.commit is not None
    assert _line(repo, onto, ours.commit) == _line(repo, onto, theirs.commit)
    assert ours.commit != work
    who = git(repo, "show", "-s", "--format=%cn <%ce>", ours.commit)
    assert who == "sloop <sloop@example.invalid>"


def test_up_to_date_and_behind(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    base = head(repo)
    work = _on(repo, "w", base, _files({"w.txt": "w\n"}))
    # The work holds main already: nothing is made.
    assert _rebase(repo, work, base) == Merged(work)
    # The work has nothing of its own: main's tip, as git's fast-forward.
    onto = commit(repo, {"m.txt": "m\n"}, "main")
    assert _rebase(repo, base, onto) == Merged(onto)
    # Commits already on main's tip are taken as they are.
    on_top = _on(repo, "w2", onto, _files({"w.txt": "w\n"}))
    assert _rebase(repo, on_top, onto) == Merged(on_top)


def _rig(repo: Path, home: Path, marker: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Name driver ``x`` for every path in every place git reads settings from: the main
    repository's config and ``info/attributes``, the daemon user's global config and
    attributes file (the merge-driver rigging of issue 22)."""
    driver = f"touch {marker}; git merge-file %A %O %B; printf BACKDOOR >> %A"
    filtering = f"touch {marker}; cat"
    git(repo, "config", "merge.x.driver", driver)
    git(repo, "config", "filter.x.clean", filtering)
    git(repo, "config", "filter.x.smudge", filtering)
    (repo / ".git" / "info" / "attributes").write_text("* merge=x filter=x\n")
    home.mkdir()
    (home / "attributes").write_text("* merge=x filter=x\n")
    (home / ".gitconfig").write_text(
        f'[merge "x"]\n\tdriver = {driver}\n[filter "x"]\n\tclean = {filtering}\n'
        f"\tsmudge = {filtering}\n[core]\n\tattributesFile = {home / 'attributes'}\n"
        "[merge]\n\trenormalize = true\n"
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)


def test_the_agents_union_and_every_named_driver_are_not_obeyed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34: the agent's committed ``shared.txt merge=union`` unioned a real conflict
    away in the rebase; nor may a driver named in any config git reads run."""
    marker = tmp_path / "driver-ran"
    repo = make_repo(tmp_path)
    commit(repo, {"shared.txt": SHARED, "notes.txt": "notes\n"}, "shared")
    base = head(repo)
    # As in the issue: the attributes first, then the edit (a rebase in a checkout obeys
    # the attributes of what it has replayed so far).
    attributes = _files({".gitattributes": "shared.txt merge=union\nnotes.txt merge=x\n"})
    clean = _on(repo, "clean", base, attributes, _files({"notes.txt": "notes\nagent\n"}))
    agents = SHARED.replace("line 5\n", "line 5, as the agent wrote it\n")
    clash = _on(repo, "clash", base, attributes, _files({"shared.txt": agents}))
    fixed = SHARED.replace("line 5\n", "line 5, as the operator fixed it on main\n")
    onto = commit(repo, {"shared.txt": fixed, "notes.txt": "main\nnotes\n"}, "main")
    # Control: git's own rebase obeys the committed union (0.8.0's rebase merged this).
    unioned = _git_rebase(repo, clash, onto)
    assert unioned.commit is not None, "the rigging is not real: git did not union"
    assert "as the agent wrote it" in git(repo, "show", f"{unioned.commit}:shared.txt")
    _rig(repo, tmp_path / "home", marker, monkeypatch)

    assert _rebase(repo, clash, onto) == Merged(None, ("shared.txt",))
    replayed = _rebase(repo, clean, onto)
    assert replayed.commit is not None
    assert git(repo, "show", f"{replayed.commit}:notes.txt") == "main\nnotes\nagent"
    assert not marker.exists(), "a driver or filter ran in the daemon's rebase"


def test_text_and_eol_attributes_convert_nothing_replayed(tmp_path: Path) -> None:
    """The agent commits ``text``/``eol`` attributes with blobs its own git stored as they
    are (CRLF and LF): the replayed commit holds the same blobs, byte for byte."""
    repo = make_repo(tmp_path)
    commit(repo, {"m.txt": "m\n"}, "a file main edits")
    base = head(repo)
    files = {
        ".gitattributes": "* text eol=crlf\nlf.txt eol=lf\nauto.txt text=auto\n",
        "crlf.txt": "one\r\ntwo\r\n",
        "lf.txt": "one\r\ntwo\n",
        "auto.txt": "mixed\r\nends\n",
        "m.txt": "m\nagent\n",
    }

    attributes = _as_is(repo, base, {".gitattributes": files.pop(".gitattributes")}, "attrs")
    work = _as_is(repo, attributes, files, "as they are")
    onto = commit(repo, {"m.txt": "main\nm\n"}, "main")

    replayed = _rebase(repo, work, onto)
    assert replayed.commit is not None
    for name in ("crlf.txt", "lf.txt", "auto.txt", ".gitattributes"):
        ours = git(repo, "rev-parse", f"{replayed.commit}:{name}")
        assert ours == git(repo, "rev-parse", f"{work}:{name}"), name
    assert git(repo, "show", f"{replayed.commit}:m.txt") == "main\nm\nagent"
    # Control: git's own rebase, in a checkout those attributes convert, does not make it.
    by_git = _git_rebase(repo, work, onto)
    assert by_git.commit is None or any(
        git(repo, "rev-parse", f"{by_git.commit}:{name}")
        != git(repo, "rev-parse", f"{work}:{name}")
        for name in ("crlf.txt", "lf.txt", "auto.txt")
    )


def test_the_pinned_attributes_outrank_a_trees(tmp_path: Path) -> None:
    """gitattributes(5): ``$GIT_DIR/info/attributes`` has the highest precedence, above
    every ``.gitattributes`` of the tree; so the scratch's pins hold even for a git that
    would read a tree's attributes.  Shown where a tree's are read (a checkout)."""
    repo = make_repo(tmp_path)
    base = head(repo)
    clash = _on(repo, "clash", base, _files({"a.txt": "agent\n"}))
    commit(repo, {"a.txt": "main\n"}, "main")
    (repo / ".gitattributes").write_text(
        "* merge=union filter=x text eol=crlf ident working-tree-encoding=UTF-16\n"
    )
    (repo / "sub").mkdir()
    (repo / "sub" / ".gitattributes").write_text("* merge=x -text\n")
    names = ["merge", "filter", "text", "eol", "ident", "working-tree-encoding"]
    said = git(repo, "check-attr", *names, "--", "a.txt", "sub/s").splitlines()
    assert "a.txt: merge: union" in said  # the tree's say, until pinned
    assert "sub/s: merge: x" in said
    (repo / ".git" / "info" / "attributes").write_text(PINNED_ATTRIBUTES)
    for path in ("a.txt", "sub/s"):
        said = git(repo, "check-attr", *names, "--", path).splitlines()
        assert said == [
            f"{path}: merge: set",
            f"{path}: filter: unset",
            f"{path}: text: unset",
            f"{path}: eol: unset",
            f"{path}: ident: unset",
            f"{path}: working-tree-encoding: unset",
        ]
    # And a real merge in that checkout: the tree's union no longer applies.
    done = subprocess.run(
        ["git", "-C", str(repo), "merge", "-q", "--no-edit", clash],
        capture_output=True,
        check=False,
    )
    assert done.returncode == 1
    assert git(repo, "diff", "--name-only", "--diff-filter=U") == "a.txt"


def test_a_scratch_from_an_older_daemon_gets_its_pins(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    base = head(repo)
    work = _on(repo, "w", base, _files({"w.txt": "w\n"}))
    onto = commit(repo, {"m.txt": "m\n"}, "main")
    # As 0.8.0 left it: made, its objects linked, no info/attributes.
    scratch = _scratch(repo)
    asyncio.run(scratch.merge(work, onto, "m", identity=IDENTITY, timeout=30))
    pinned = scratch.path / "info" / "attributes"
    pinned.unlink()
    assert _rebase(repo, work, onto).commit is not None
    assert pinned.read_text() == PINNED_ATTRIBUTES
