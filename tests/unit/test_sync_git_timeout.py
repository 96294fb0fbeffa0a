"""``repo.git_timeout`` bounds ``sync``'s merge or rebase (docs/configuration.md).

Until issue 35 only ``ff_only`` and the making of a run's branch read it; ``sync``
computed its merge or rebase under a fixed 300 s and recorded it under a fixed 60 s.
Here the run's admitted value is seen reaching the scratch repository's merge and
rebase; tests/integration/test_sync_git_timeout.py sees it bound the recording's hook.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from sloopd.git.scratch import Merged, ScratchRepository
from tests.support.machinery import Machinery

AGENT = {"name": "implement", "action": "agent"}
FLOWS = {
    "default": [AGENT, {"name": "sync", "action": "sync"}],
    "rebasing": [AGENT, {"name": "sync", "action": "sync", "mode": "rebase"}],
}


class RecordingScratch(ScratchRepository):
    """The daemon's scratch repository, telling what deadline each merge was given."""

    def __init__(self, path: Path, objects: Path) -> None:
        super().__init__(path, objects)
        self.timeouts: list[tuple[str, float]] = []

    async def merge(
        self, ours: str, theirs: str, message: str, *, identity: tuple[str, str], timeout: float
    ) -> Merged:
        self.timeouts.append(("merge", timeout))
        return await super().merge(ours, theirs, message, identity=identity, timeout=timeout)

    async def rebase(
        self, work: str, onto: str, *, identity: tuple[str, str], timeout: float
    ) -> Merged:
        self.timeouts.append(("rebase", timeout))
        return await super().rebase(work, onto, identity=identity, timeout=timeout)


@pytest.fixture
def machinery(sandbox: Path, repo: Path) -> Iterator[Machinery]:
    bench = Machinery.create(sandbox, repo, FLOWS, extra='[repo]\ngit_timeout = "7s"\n')
    try:
        yield bench
    finally:
        bench.close()


@pytest.mark.parametrize(("flow", "mode"), [(None, "merge"), ("rebasing", "rebase")])
def test_the_runs_git_timeout_bounds_the_syncs_merge_or_rebase(
    machinery: Machinery, flow: str | None, mode: str
) -> None:
    branches = machinery.runs.branches
    scratch = RecordingScratch(branches.scratch.path, branches.scratch.objects)
    branches.scratch = scratch

    async def scenario() -> None:
        active, facts = await machinery.prepared("synced", flow)
        sync = next(s for s in facts.flow.stages if s.name == "sync")
        result = await machinery.runs.executor.execute(active, facts, sync, 1)
        assert result.passed, result.reason

    asyncio.run(scenario())
    assert scratch.timeouts == [(mode, 7.0)]
