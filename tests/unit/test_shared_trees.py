"""The shared trees of copy-on-write checkouts (``sloopd.git.shared_trees``) on a real
repository: made whole once, stacked as differences, bounded, never half-made."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from sloopd.git.shared_trees import MAX_DEPTH, SharedTrees
from sloopd.proc.overlay_probe import probe
from sloopd.util.trash import Trash

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


def skip_without_overlays(tmp_path: Path) -> None:
    """A difference is made through an overlay: where none mounts, say why."""
    problem = probe(tmp_path / "probe")
    if problem is not None:
        pytest.skip(f"no overlay mounts here: {problem}")


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for n in range(50):
        (repo / f"f{n}.txt").write_text(f"{n}\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def commit(repo: Path, name: str, text: str = "x\n", remove: str | None = None) -> str:
    (repo / name).write_text(text)
    git(repo, "add", "-A")
    if remove:
        git(repo, "rm", "-q", remove)
    git(repo, "commit", "-q", "-m", name)
    return git(repo, "rev-parse", "HEAD")


def shared(tmp_path: Path, repo: Path, limit: Callable[[], int] = lambda: 1 << 30) -> SharedTrees:
    return SharedTrees(
        tmp_path / "trees", repo, repo / ".git" / "objects", (),
        limit=limit, trash=Trash(tmp_path / "trash"),
    )  # fmt: skip


def files_of(layer: Path) -> set[str]:
    return {
        str(p.relative_to(layer))
        for p in layer.rglob("*")
        if not p.is_dir() and ".git" not in p.relative_to(layer).parts
    }


def test_a_commit_of_a_run_stacks_only_its_difference(tmp_path: Path, repo: Path) -> None:
    skip_without_overlays(tmp_path)
    base = git(repo, "rev-parse", "HEAD")
    work = commit(repo, "new.txt", remove="f3.txt")

    async def go() -> tuple[tuple[str, ...], tuple[str, ...]]:
        trees = shared(tmp_path, repo)
        first = await trees.hold(base)
        second = await trees.hold(work, (base,))
        return first, second

    first, second = asyncio.run(go())
    assert len(first) == 1
    assert second[1:] == first
    top = tmp_path / "trees" / second[0] / "l"
    assert files_of(top) == {"new.txt", "f3.txt"}  # the new file and a whiteout
    assert (top / "f3.txt").is_char_device()
    meta = json.loads((tmp_path / "trees" / second[0] / "meta").read_text())
    assert meta["parent"] == first[0]
    assert meta["depth"] == 2


def test_a_stack_is_made_whole_again_past_its_depth(tmp_path: Path, repo: Path) -> None:
    skip_without_overlays(tmp_path)

    async def go() -> list[int]:
        trees = shared(tmp_path, repo)
        depths = []
        previous = git(repo, "rev-parse", "HEAD")
        for n in range(MAX_DEPTH + 2):
            sha = commit(repo, f"n{n}.txt")
            chain = await trees.hold(sha, (previous,))
            trees.release(chain)
            depths.append(len(chain))
            previous = sha
        return depths

    depths = asyncio.run(go())
    assert max(depths) == MAX_DEPTH
    assert depths[-1] < MAX_DEPTH  # a whole tree again, then stacked on


def test_past_the_limit_the_least_recently_used_unheld_trees_go(tmp_path: Path, repo: Path) -> None:
    commits = [commit(repo, f"c{n}.txt", f"{n}\n" * 2000) for n in range(3)]

    async def go() -> tuple[SharedTrees, list[tuple[str, ...]]]:
        trees = shared(tmp_path, repo, limit=lambda: 1)
        held = await trees.hold(commits[0])
        others = []
        for sha in commits[1:]:
            chain = await trees.hold(sha)  # no ``near``: whole trees
            trees.release(chain)
            others.append(chain)
        return trees, [held, *others]

    trees, chains = asyncio.run(go())
    # The held one stays whatever the limit; every other went when let go.
    assert len(trees) == 1
    left = {p.name for p in (tmp_path / "trees").iterdir()}
    assert left == {chains[0][0]}


def test_half_made_and_unreadable_layers_are_never_used(tmp_path: Path, repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD")
    root = tmp_path / "trees"
    (root / ".building-1234" / "l").mkdir(parents=True)
    tree = git(repo, "rev-parse", "HEAD^{tree}")
    (root / tree / "l").mkdir(parents=True)  # a layer with no meta: a crash's remains
    orphan = root / ("b" * 40)
    (orphan / "l").mkdir(parents=True)
    (orphan / "meta").write_text(json.dumps(
        {"parent": "c" * 40, "depth": 2, "size": 1, "entries": 1}))  # fmt: skip

    async def go() -> tuple[str, ...]:
        return await shared(tmp_path, repo).hold(base)

    chain = asyncio.run(go())
    assert chain == (tree,)
    names = {p.name for p in root.iterdir()}
    assert names == {tree}
    assert files_of(root / tree / "l") == {f"f{n}.txt" for n in range(50)}


def test_a_tree_being_stacked_keeps_its_parent_though_the_parent_is_let_go(
    tmp_path: Path, repo: Path
) -> None:
    # Over the limit from the start: the parent goes as soon as no one holds it, but
    # the difference being made over it holds it until it is made.
    skip_without_overlays(tmp_path)
    base = git(repo, "rev-parse", "HEAD")
    work = commit(repo, "new.txt")

    async def go() -> tuple[tuple[str, ...], tuple[str, ...]]:
        trees = shared(tmp_path, repo, limit=lambda: 1)
        first = await trees.hold(base)
        stacking = asyncio.get_running_loop().create_task(trees.hold(work, (base,)))
        root = tmp_path / "trees"
        while not any((p / "w").is_dir() for p in root.glob(".building-*")):
            await asyncio.sleep(0.001)  # the difference's overlay is being made
        trees.release(first)  # eviction runs now, with the parent unheld by any stage
        return first, await stacking

    first, second = asyncio.run(go())
    assert second[1:] == first
    assert all((tmp_path / "trees" / key / "l").is_dir() for key in second)
