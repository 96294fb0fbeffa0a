"""Commits shipped to a Ray node and back, without Ray: the bundles and their checks.

The daemon bundles only what the node's cache lacks; the node's cache takes it and
keeps it as a have; the work comes back as a bundle of the new commits and becomes
the run's ref only once it descends from the run's base (sloopd.git.bundles).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from sloopd.git import bundles
from sloopd.git.node_cache import Cache, CacheError
from tests.support.daemon import git

LIMIT = 512 << 20  # [executor] max_bundle's default


def _commit(repo: Path, name: str, text: str) -> str:
    (repo / name).write_text(text)
    git(repo, "add", name)
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", name)
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def daemon_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for index in range(3):
        _commit(repo, f"f{index}.txt", os.urandom(20_000).hex())  # incompressible
    return repo


def test_the_second_bundle_to_a_node_holds_only_what_it_lacks(
    daemon_repo: Path, tmp_path: Path
) -> None:
    async def scenario() -> tuple[int, int | None, list[str]]:
        cache = await Cache.of(tmp_path / "node")
        first_commit = git(daemon_repo, "rev-parse", "HEAD").strip()
        first = await bundles.bundle_for(daemon_repo, tmp_path / "ship", first_commit, [], LIMIT)
        assert first is not None
        await cache.take(first.read_bytes(), first_commit)
        second_commit = _commit(daemon_repo, "more.txt", "small")
        second = await bundles.bundle_for(
            daemon_repo, tmp_path / "ship", second_commit, await cache.haves(), LIMIT
        )
        again = await bundles.bundle_for(
            daemon_repo, tmp_path / "ship", first_commit, await cache.haves(), LIMIT
        )
        assert again is None  # the node has it: nothing is shipped
        assert second is not None
        await cache.take(second.read_bytes(), second_commit)
        return first.stat().st_size, second.stat().st_size, await cache.haves()

    first_size, second_size, haves = asyncio.run(scenario())
    assert second_size is not None
    assert second_size * 10 < first_size, (first_size, second_size)
    assert len(haves) == 2


def test_work_that_does_not_descend_from_the_base_is_refused_and_no_ref_moves(
    daemon_repo: Path, tmp_path: Path
) -> None:
    base = git(daemon_repo, "rev-parse", "HEAD").strip()
    node = tmp_path / "node-clone"
    git(tmp_path, "clone", "-q", str(daemon_repo), str(node))
    good = _commit(node, "work.txt", "the agent's work")
    git(node, "bundle", "create", "-q", str(tmp_path / "good.bundle"), "HEAD", f"^{base}")
    git(node, "checkout", "-q", "--orphan", "elsewhere")
    git(node, "rm", "-rfq", ".")
    _commit(node, "unrelated.txt", "history of its own")
    git(node, "bundle", "create", "-q", str(tmp_path / "bad.bundle"), "elsewhere")
    ref = "refs/sloop/runs/R1/0-1"

    async def scenario() -> tuple[str, str]:
        ship = tmp_path / "ship"
        ship.mkdir()
        taken = await bundles.adopt(
            daemon_repo, ship, tmp_path / "good.bundle", branch="b", ref=ref, base=base,
            limit=LIMIT,
        )  # fmt: skip
        with pytest.raises(bundles.ShippingError, match="does not descend"):
            await bundles.adopt(
                daemon_repo, ship, tmp_path / "bad.bundle", branch="b", ref=ref, base=base,
                limit=LIMIT,
            )  # fmt: skip
        return taken, git(daemon_repo, "rev-parse", ref).strip()

    taken, recorded = asyncio.run(scenario())
    assert taken == good
    assert recorded == good  # the refused bundle moved nothing
    leftovers = git(daemon_repo, "for-each-ref", "refs/sloop/incoming", "refs/sloop/ship")
    assert leftovers == ""


def test_a_node_that_holds_the_start_commit_is_shipped_nothing_without_asking_git(
    daemon_repo: Path, tmp_path: Path
) -> None:
    """The node's ``prepare`` names the start commit alone when its cache holds it."""
    head = git(daemon_repo, "rev-parse", "HEAD").strip()
    gone = tmp_path / "not-a-repository"  # git would fail here: it is never asked
    shipped = asyncio.run(bundles.bundle_for(gone, tmp_path / "ship", head, [head], LIMIT))
    assert shipped is None
    assert not (tmp_path / "ship").exists()


def test_a_stage_that_made_nothing_is_recorded_at_its_commit_and_a_stranger_is_not(
    daemon_repo: Path, tmp_path: Path
) -> None:
    """``record``: the base itself (a first stage that made no commit) and a commit
    after it are recorded; a commit of another history is refused, no ref moved."""
    base = git(daemon_repo, "rev-parse", "HEAD~1").strip()
    after = git(daemon_repo, "rev-parse", "HEAD").strip()
    git(daemon_repo, "checkout", "-q", "--orphan", "elsewhere")
    git(daemon_repo, "rm", "-rfq", ".")
    stranger = _commit(daemon_repo, "unrelated.txt", "history of its own")
    ref = "refs/sloop/runs/R1/0-1"

    async def scenario() -> list[str]:
        recorded = [await bundles.record(daemon_repo, ref, base, base)]
        recorded.append(await bundles.record(daemon_repo, ref, after, base))
        with pytest.raises(bundles.ShippingError, match="does not descend"):
            await bundles.record(daemon_repo, ref, stranger, base)
        return recorded

    assert asyncio.run(scenario()) == [base, after]
    assert git(daemon_repo, "rev-parse", ref).strip() == after


def test_a_bundle_past_the_bound_travels_neither_way_and_the_reason_names_the_bound(
    daemon_repo: Path, tmp_path: Path
) -> None:
    """Each of the three repository's commits holds 40 KB of incompressible text."""
    start = git(daemon_repo, "rev-parse", "HEAD~1").strip()
    tip = git(daemon_repo, "rev-parse", "HEAD").strip()
    limit = 16 << 10
    ship = tmp_path / "ship"

    async def scenario() -> list[str]:
        said = []
        # Out: the daemon does not make a bundle for the node past the bound.
        with pytest.raises(bundles.ShippingError) as out:
            await bundles.bundle_for(daemon_repo, ship, tip, [], limit)
        said.append(str(out.value))
        # Back, on the node: its cache does not bundle work past the bound.
        cache = await Cache.of(tmp_path / "node")
        whole = await bundles.bundle_for(daemon_repo, ship, tip, [], LIMIT)
        assert whole is not None
        await cache.take(whole.read_bytes(), tip)
        with pytest.raises(CacheError) as back:
            await cache.bundle(tip, start, limit)
        said.append(str(back.value))
        assert await cache.bundle(tip, start, LIMIT)  # under the bound it does
        # Back, on the daemon's host: a bundle past the bound is not taken.
        with pytest.raises(bundles.ShippingError) as taken:
            await bundles.adopt(
                daemon_repo, ship, whole, branch="b", ref="refs/sloop/runs/R1/0-1",
                base=start, limit=limit,
            )  # fmt: skip
        said.append(str(taken.value))
        assert not whole.exists()  # removed: nothing past the bound stays in ship/
        return said

    said = asyncio.run(scenario())
    for reason in said:
        assert "more than [executor] max_bundle (16.0 KiB)" in reason, said
    assert said[0].startswith("the bundle of the stage's start commit is "), said
    assert said[1].startswith("the bundle of the work is "), said
    assert list(ship.glob("*.bundle")) == []
    assert git(daemon_repo, "for-each-ref", "refs/sloop").strip() == ""
