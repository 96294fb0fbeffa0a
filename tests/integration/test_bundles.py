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
from sloopd.git.node_cache import Cache
from tests.support.daemon import git


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
        first = await bundles.bundle_for(daemon_repo, tmp_path / "ship", first_commit, [])
        assert first is not None
        await cache.take(first.read_bytes(), first_commit)
        second_commit = _commit(daemon_repo, "more.txt", "small")
        second = await bundles.bundle_for(
            daemon_repo, tmp_path / "ship", second_commit, await cache.haves()
        )
        again = await bundles.bundle_for(
            daemon_repo, tmp_path / "ship", first_commit, await cache.haves()
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
            daemon_repo, ship, tmp_path / "good.bundle", branch="b", ref=ref, base=base
        )
        with pytest.raises(bundles.ShippingError, match="does not descend"):
            await bundles.adopt(
                daemon_repo, ship, tmp_path / "bad.bundle", branch="b", ref=ref, base=base
            )
        return taken, git(daemon_repo, "rev-parse", ref).strip()

    taken, recorded = asyncio.run(scenario())
    assert taken == good
    assert recorded == good  # the refused bundle moved nothing
    leftovers = git(daemon_repo, "for-each-ref", "refs/sloop/incoming", "refs/sloop/ship")
    assert leftovers == ""
