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

from sloopd.git import shared_trees as shared_trees_module
from sloopd.git.shared_trees import SharedTrees
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


def make_line(
    tmp_path: Path, repo: Path, trees: int, *, named_near: bool = True
) -> list[tuple[str, ...]]:
    """``trees`` commits made one after another, each adding a file ``n<k>.txt`` (a
    drain's ``main``s), each held after the one before it, named as ``near`` or (as a
    stage starting at a run's base does) not; each one's chain."""

    async def go() -> list[tuple[str, ...]]:
        shared_trees = shared(tmp_path, repo)
        chains = []
        previous = git(repo, "rev-parse", "HEAD")
        await shared_trees.hold(previous)  # the line's whole tree, numbered 0
        for n in range(1, trees + 1):
            sha = commit(repo, f"n{n}.txt")
            chain = await shared_trees.hold(sha, (previous,) if named_near else ())
            shared_trees.release(chain)
            chains.append(chain)
            previous = sha
        return chains

    return asyncio.run(go())


@pytest.mark.parametrize("named_near", [True, False])
def test_a_line_of_trees_stacks_as_a_skip_list(
    tmp_path: Path, repo: Path, named_near: bool
) -> None:
    # Observed before (benchmarks/RESULTS.md, drain): a stage's base held with nothing
    # near stacked every new main over the line's whole tree (the first of the layers
    # used last), so each layer wrote every file added since (up to 512) and every
    # stage's ``git add`` hashed and wrote them all again: O(history) a run.
    skip_without_overlays(tmp_path)
    assert_a_skip_list(tmp_path, make_line(tmp_path, repo, 40, named_near=named_near))


def test_a_line_stays_a_skip_list_when_its_whole_tree_is_far_behind(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Observed in a 600-ticket drain (2026-12-07): the skip list's layer was held to
    # what a nearest layer may differ by (512 paths or a quarter of the tree), so at
    # the 512th tree the whole one was "too far", that tree stacked over the last one
    # and every one after it a layer deeper: layers 12 to 16 deep, then whole trees
    # (7 in 600 runs, each writing every file).  Here 4 paths stand for 512, over a
    # whole tree of 3 files, as the drain's: the 32nd tree is 32 files from it.
    skip_without_overlays(tmp_path)
    monkeypatch.setattr(shared_trees_module, "SMALL_DIFF", 4)
    small = tmp_path / "small"
    small.mkdir()
    git(small, "init", "-q", "-b", "main")
    for name in ("README", "sloop.toml", ".gitignore"):
        (small / name).write_text(f"{name}\n")
    git(small, "add", "-A")
    git(small, "commit", "-q", "-m", "base")
    assert_a_skip_list(tmp_path, make_line(tmp_path, small, 40))


def assert_a_skip_list(tmp_path: Path, chains: list[tuple[str, ...]]) -> None:
    for n, chain in enumerate(chains, start=1):
        lowest_bit = n & -n
        # The n-th tree stacks over the (n - lowest_bit)-th: 1 + popcount(n) layers deep,
        assert len(chain) == 1 + bin(n).count("1"), n
        meta = json.loads((tmp_path / "trees" / chain[0] / "meta").read_text())
        assert meta["number"] == n
        # and it holds the files of the trees since that one, no other.
        added = {f"n{k}.txt" for k in range(n - lowest_bit + 1, n + 1)}
        assert files_of(tmp_path / "trees" / chain[0] / "l") == added, n
    assert max(len(chain) for chain in chains) <= 1 + (40).bit_length()


def test_a_stack_is_made_whole_again_past_its_depth(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    skip_without_overlays(tmp_path)
    monkeypatch.setattr(shared_trees_module, "MAX_DEPTH", 3)
    depths = [len(chain) for chain in make_line(tmp_path, repo, 10)]
    # Numbers 1-6 fit in 3 layers; the 7th would be a 4th: a whole tree, then a new line.
    assert depths == [2, 2, 3, 2, 3, 3, 1, 2, 2, 3]


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


def test_a_nearest_layer_evicted_while_compared_is_passed_over(tmp_path: Path, repo: Path) -> None:
    # A stage letting go of its trees evicts what no one holds, also while a build is
    # comparing a candidate parent with ``diff-tree``: that candidate is then gone.
    skip_without_overlays(tmp_path)
    base = git(repo, "rev-parse", "HEAD")
    first = commit(repo, "one.txt")
    second = commit(repo, "two.txt")

    async def go() -> tuple[str, tuple[str, ...]]:
        trees = shared(tmp_path, repo)
        trees.release(await trees.hold(base))
        top = (await trees.hold(first, (base,)))[0]
        trees.release(trees.chain(top))
        compare = trees._changes

        async def evicting(key: str, tree: str) -> int:
            found = await compare(key, tree)
            if key == top:
                trees._layers.pop(top)  # as ``_evict`` does for a layer no one holds
            return found

        trees._changes = evicting  # type: ignore[method-assign,assignment]
        return top, await trees.hold(second, (first,))

    gone, chain = asyncio.run(go())
    assert gone not in chain
    made = set().union(*(files_of(tmp_path / "trees" / key / "l") for key in chain))
    assert {"one.txt", "two.txt"} <= made
