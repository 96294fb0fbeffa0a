"""StageExecutor over a recording launcher: what each stage starts, and what it records.

Nothing is spawned: every child is a ``Script`` played by ``tests.support.fakes``;
git makes the run's checkout and brings its work back, as in the daemon.  The
assertions read the fakes' records and the stage log as stored (replayed), not
the executor's return value.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sloopd.wire.api import ProtocolError
from tests.support.fakes import Script, Spawn
from tests.support.gitrepo import commit, git
from tests.support.machinery import Machinery

AGENT = {"name": "implement", "action": "agent"}
REVIEW = {"name": "review", "action": "agent", "result_check": "reported", "command": ["rev"]}
PANEL = {
    "name": "panel",
    "action": "agent",
    "result_check": "panel",
    "quorum": 2,
    "reviewers": [
        {"target": "claude", "command": ["seat-a", "--look"]},
        {"target": "codex", "command": ["seat-b"]},
    ],
}


@pytest.fixture
def machinery(sandbox: Path, repo: Path) -> Iterator[Machinery]:
    bench = Machinery.create(sandbox, repo, {"default": [AGENT, REVIEW], "panel": [PANEL]})
    try:
        yield bench
    finally:
        bench.close()


def test_an_agent_stage_whose_child_exits_0_passes(machinery: Machinery) -> None:
    machinery.launcher.script(Script(exit_code=0))

    async def scenario() -> None:
        active, facts = await machinery.prepared("one")
        execution = await machinery.execute(active, facts, "implement")
        assert (execution.passed, execution.exit_code, execution.reason) == (True, 0, None)
        (launch,) = machinery.launcher.launches
        assert launch.argv == ("agent", "--go")
        assert launch.commit == facts.base  # the run's first stage starts at its base
        assert launch.checkout == facts.worktree
        assert launch.owner == f"{facts.run_id}/implement#1"
        (spawn,) = machinery.groups.spawns
        assert spawn.cwd == facts.worktree
        assert not spawn.sandboxed
        assert spawn.env["SLOOP_STAGE"] == "implement"
        assert spawn.env["SLOOP_WORKTREE"] == str(facts.worktree)
        assert spawn.child is not None
        assert spawn.child.reaped

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("code", "reason"), [(3, "exited with code 3"), (-9, "killed by signal 9")]
)
def test_a_nonzero_exit_fails_with_its_reason(machinery: Machinery, code: int, reason: str) -> None:
    machinery.launcher.script(Script(exit_code=code))

    async def scenario() -> None:
        active, facts = await machinery.prepared("one")
        execution = await machinery.execute(active, facts, "implement")
        assert (execution.passed, execution.exit_code, execution.reason) == (False, code, reason)

    asyncio.run(scenario())


def test_a_child_that_cannot_start_fails_the_stage_with_why(machinery: Machinery) -> None:
    machinery.launcher.script(Script(refuse="cannot start agent: No such file or directory"))

    async def scenario() -> None:
        active, facts = await machinery.prepared("one")
        execution = await machinery.execute(active, facts, "implement")
        assert (execution.passed, execution.exit_code) == (False, None)
        assert execution.reason == "cannot start agent: No such file or directory"
        assert machinery.groups.spawns == []
        # The credential minted for it died with it.
        token = machinery.launcher.launches[0].token
        with pytest.raises(ProtocolError):
            machinery.runs.credentials.check(facts.run_id, token)

    asyncio.run(scenario())


def test_its_lines_reach_the_log_sink(machinery: Machinery) -> None:
    lines = (("stdout", "working on it"), ("stderr", "a warning"), ("stdout", "done"))
    machinery.launcher.script(Script(lines=lines))

    async def scenario() -> str:
        active, facts = await machinery.prepared("one")
        await machinery.execute(active, facts, "implement")
        assert list(active.recent_output) == [text for _, text in lines]  # for the diagnosis
        return facts.run_id

    run_id = asyncio.run(scenario())
    assert machinery.log_texts(run_id, "stdout") == ["working on it", "done"]
    assert machinery.log_texts(run_id, "stderr") == ["a warning"]


def test_the_work_a_child_commits_is_brought_back_and_reviewed_from_there(
    machinery: Machinery,
) -> None:
    def work(spawn: Spawn) -> None:
        commit(spawn.cwd, {"new.txt": "made by the agent\n"}, "the agent's work")

    machinery.launcher.script(Script(act=work), Script())

    async def scenario() -> None:
        active, facts = await machinery.prepared("one")
        produced = await machinery.execute(active, facts, "implement")
        assert produced.passed
        assert produced.commit not in (None, facts.base)
        repo = machinery.daemon.layout.repo
        assert git(repo, "rev-parse", f"refs/heads/{facts.branch}") == produced.commit
        await machinery.execute(active, facts, "review")
        # The reviewer starts from the commit the work produced.
        assert [launch.commit for launch in machinery.launcher.launches] == [
            facts.base,
            produced.commit,
        ]

    asyncio.run(scenario())


def test_each_panel_seat_gets_its_own_credential(machinery: Machinery) -> None:
    seen: list[dict[str, Any]] = []

    def seat(verdict: str) -> Script:
        def act(spawn: Spawn) -> None:
            credential = machinery.credential_of(spawn)
            seen.append({"seat": credential.seat, "token": credential.token})
            if seen[:-1]:  # an earlier seat's credential stopped validating
                with pytest.raises(ProtocolError):
                    machinery.runs.credentials.check(credential.run, seen[0]["token"])
            machinery.report(spawn, verdict)

        return Script(act=act)

    machinery.launcher.script(seat("pass"), seat("pass"))

    async def scenario() -> None:
        active, facts = await machinery.prepared("one", flow="panel")
        execution = await machinery.execute(active, facts, "panel")
        assert execution.passed, execution.reason
        assert [s["verdict"] for s in execution.seats.values()] == ["pass", "pass"]
        launches = machinery.launcher.launches
        assert [launch.argv for launch in launches] == [("seat-a", "--look"), ("seat-b",)]
        assert [launch.owner for launch in launches] == [
            f"{facts.run_id}/panel#1/seat0",
            f"{facts.run_id}/panel#1/seat1",
        ]
        assert {launch.commit for launch in launches} == {facts.base}  # the pinned commit

    asyncio.run(scenario())
    assert [s["seat"] for s in seen] == [0, 1]
    assert seen[0]["token"] != seen[1]["token"]


def test_a_panel_short_of_its_quorum_fails(machinery: Machinery) -> None:
    def seat(verdict: str) -> Script:
        return Script(act=lambda spawn: machinery.report(spawn, verdict))

    machinery.launcher.script(seat("pass"), seat("fail"))

    async def scenario() -> None:
        active, facts = await machinery.prepared("one", flow="panel")
        execution = await machinery.execute(active, facts, "panel")
        assert not execution.passed
        # The rule, then the failing seat (numbered as show numbers it) with its reason.
        assert execution.reason == (
            "1 of 2 reviewers passed (quorum 2): seat 1 (codex): fail: looked at it"
        )

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        # stderr's last non-empty line first, whatever stdout printed after it.
        (
            (
                ("stdout", "noise"),
                ("stderr", "FAILED: answer.txt WANT=Z1a2b GOT=guess"),
                ("stderr", "   "),
                ("stdout", "more noise"),
            ),
            "FAILED: answer.txt WANT=Z1a2b GOT=guess",
        ),
        # No stderr: stdout's last non-empty line, its escapes and controls removed.
        (
            (("stdout", "\x1b[31mFAILED\x1b[0m: 2 tests\x1b]0;title\x07"), ("stdout", "\x1b[0m")),
            "FAILED: 2 tests",
        ),
        # A long line is cut to a line's quote.
        ((("stderr", "x" * 100_000),), "x" * 199 + "\u2026"),
    ],
)
def test_a_nonzero_exit_quotes_what_the_child_said_last(
    machinery: Machinery, lines: tuple[tuple[str, str], ...], said: str
) -> None:
    machinery.launcher.script(Script(lines=lines, exit_code=1))

    async def scenario() -> None:
        active, facts = await machinery.prepared("one")
        execution = await machinery.execute(active, facts, "implement")
        assert execution.reason == f"exited with code 1: {said}"

    asyncio.run(scenario())


def test_a_passing_child_quotes_nothing(machinery: Machinery) -> None:
    machinery.launcher.script(Script(lines=(("stderr", "a warning"),), exit_code=0))

    async def scenario() -> None:
        active, facts = await machinery.prepared("one")
        execution = await machinery.execute(active, facts, "implement")
        assert (execution.passed, execution.reason) == (True, None)

    asyncio.run(scenario())
