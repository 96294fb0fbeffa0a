"""RunManager over a recording launcher: runs walked to their settle, aborted, stopped.

The graph is ``sloopd.compose``'s, with ``tests.support.fakes.FakeLauncher`` in
place of the local launchers: git makes and merges the run's branch, no child is
spawned.  What is asserted is what was recorded: the fakes' records, the run as
``show`` reports it, the repository's refs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sloopd.core.model import derive
from sloopd.core.rows import Gate
from sloopd.runs.runstate import ActiveRun
from sloopd.vendor.usage import Usage
from sloopd.views import board
from tests.support.fakes import Script, Spawn
from tests.support.gitrepo import commit, git
from tests.support.machinery import Machinery

FLOW: list[dict[str, Any]] = [
    {"name": "implement", "action": "agent"},
    {"name": "test", "action": "command", "command": ["make", "test"]},
    {"name": "sync", "action": "sync"},
    {"name": "merge", "action": "ff_only"},
]


@pytest.fixture
def machinery(sandbox: Path, repo: Path) -> Iterator[Machinery]:
    bench = Machinery.create(sandbox, repo, {"default": FLOW})
    try:
        yield bench
    finally:
        bench.close()


def work(spawn: Spawn) -> None:
    commit(spawn.cwd, {"feature.txt": "done\n"}, "the agent's work")


def test_the_walk_reaches_settle_and_merges_the_work(machinery: Machinery) -> None:
    machinery.launcher.script(Script(act=work), Script(lines=(("stdout", "tests pass"),)))
    run_id = asyncio.run(machinery.drive("one"))

    shown = machinery.shown(run_id)
    assert (shown["state"], shown["reason"]) == ("merged", None)
    assert [s["stage"] for s in shown["stages"]] == ["implement", "test", "sync", "merge"]
    launches = machinery.launcher.launches
    assert [launch.argv for launch in launches] == [("agent", "--go"), ("make", "test")]
    produced = machinery.walk(run_id).executions[0].commit
    assert launches[1].commit == produced  # the command ran on the agent's work
    assert git(machinery.daemon.layout.repo, "rev-parse", "main") == produced
    assert machinery.runs.active == {}  # the driver is done and gone from the registry
    # Nor does the run leave a reusable-checkout mark behind (its sync passed last).
    assert machinery.runs.branches._untouched == {}
    assert machinery.log_texts(run_id, "stdout") == ["tests pass"]


def test_a_failing_agent_settles_the_run_failed(machinery: Machinery) -> None:
    machinery.launcher.script(Script(exit_code=2, lines=(("stderr", "it broke"),)))
    run_id = asyncio.run(machinery.drive("one"))

    shown = machinery.shown(run_id)
    assert shown["state"] == "failed"
    assert [s["stage"] for s in shown["stages"] if s["state"] != "pending"] == ["implement"]
    assert "exited with code 2" in (shown["stages"][0]["reason"] or "")
    assert len(machinery.launcher.launches) == 1  # nothing after the failed stage ran
    assert machinery.log_texts(run_id, "stderr") == ["it broke"]


def test_abort_stops_the_running_child_through_the_groups(machinery: Machinery) -> None:
    machinery.launcher.script(Script(lines=(("stdout", "thinking"),), until_stopped=True))

    async def scenario() -> str:
        run_id = machinery.claim("one")
        machinery.runs.start(run_id)
        child = await machinery.groups.started()
        # In flight, the run is the daemon's too, and show reads its live child.
        assert machinery.daemon.active_runs[run_id] is machinery.runs.active[run_id]
        assert isinstance(machinery.shown(run_id)["stages"][0]["silent_for_ms"], int)
        await machinery.runs.abort(run_id, "aborted by the test")
        assert child.stopped
        assert child.reaped
        return run_id

    run_id = asyncio.run(scenario())
    assert machinery.groups.stopped() == [f"{run_id}/implement#1"]
    shown = machinery.shown(run_id)
    assert (shown["state"], shown["reason"]) == ("aborted", "aborted by the test")
    assert len(machinery.launcher.launches) == 1


def test_a_stopping_daemon_stops_every_child_and_leaves_the_run_to_continue(
    machinery: Machinery,
) -> None:
    machinery.launcher.script(Script(until_stopped=True))

    async def scenario() -> str:
        run_id = machinery.claim("one")
        machinery.runs.start(run_id)
        await machinery.groups.started()
        await machinery.runs.stop_all()
        return run_id

    run_id = asyncio.run(scenario())
    assert machinery.groups.stopped() == [f"{run_id}/implement#1"]
    shown = machinery.shown(run_id)
    # Issue 38: still in flight, its execution cut short: the next start continues it.
    assert shown["state"] == "running"
    (implement,) = [s for s in shown["stages"] if s["stage"] == "implement"]
    assert (implement["state"], implement["ended_by"]) == ("failed", "interrupted")
    assert implement["reason"] == "interrupted: the daemon stopped"
    assert not machinery.runs.active


def test_each_child_gets_the_runs_own_home_and_worker_socket(machinery: Machinery) -> None:
    machinery.launcher.script(Script(act=work), Script())
    run_id = asyncio.run(machinery.drive("one"))

    state_dir = machinery.daemon.layout.state_dir
    socket = machinery.daemon.layout.worker_socket_dir / f"{run_id}.sock"
    for launch, spawn in zip(machinery.launcher.launches, machinery.groups.spawns, strict=True):
        assert launch.home == state_dir / "runs" / run_id / "home"
        assert launch.worker_socket == socket
        assert launch.token
        assert spawn.env["HOME"] == str(launch.home)
        assert spawn.env["SLOOP_SOCKET"] == str(socket)
        assert spawn.env["SLOOP_TOKEN"] == launch.token
    tokens = {launch.token for launch in machinery.launcher.launches}
    assert len(tokens) == 2  # one credential per child


def test_a_launcher_that_cannot_start_children_fails_the_run_before_anything_is_made(
    sandbox: Path, repo: Path
) -> None:
    # Asked only when runs are sandboxed: that is what the probe is about.
    bench = Machinery.create(sandbox, repo, {"default": FLOW}, sandbox="bwrap")
    bench.launcher.problem = "bubblewrap is not installed."
    try:
        run_id = asyncio.run(bench.drive("one"))
        shown = bench.shown(run_id)
        assert shown["state"] == "failed"
        assert "bubblewrap is not installed." in shown["reason"]
        assert bench.daemon.sandbox_problem == "bubblewrap is not installed."
        assert bench.launcher.launches == []
        assert not (bench.daemon.layout.state_dir / "checkouts" / run_id).exists()
    finally:
        bench.close()


RACE_FLOW: list[dict[str, Any]] = [
    {"name": "implement", "action": "agent"},
    {"name": "sync", "action": "sync"},
    {"name": "merge", "action": "ff_only", "return_to": "sync", "returns": 20},
]


def test_runs_at_once_each_merge_after_one_sync(sandbox: Path, repo: Path) -> None:
    """A sync followed by ff_only keeps main's slot until the merge: no run loses the race
    to another and goes back to sync (0.8.0 before the slot: 5.5 syncs per run)."""
    bench = Machinery.create(sandbox, repo, {"default": RACE_FLOW}, extra="[repo]\nparallel = 6")
    try:
        names = [f"t{i}" for i in range(6)]

        def own_file(spawn: Spawn) -> None:
            commit(spawn.cwd, {f"{spawn.env['SLOOP_RUN']}.txt": "x\n"}, "work")

        bench.launcher.script(*(Script(act=own_file) for _ in names))

        async def scenario() -> list[str]:
            ids = [bench.claim(name) for name in names]
            for run_id in ids:
                bench.runs.start(run_id)
            tasks = [bench.runs.active[run_id].task for run_id in ids]
            await asyncio.gather(*(t for t in tasks if t is not None))
            return ids

        ids = asyncio.run(scenario())
        for run_id in ids:
            assert bench.shown(run_id)["state"] == "merged"
            syncs = [e for e in bench.walk(run_id).executions if e.stage.name == "sync"]
            assert len(syncs) == 1, f"{run_id} synced {len(syncs)} times"
        main = bench.daemon.layout.repo
        for run_id in ids:
            assert git(main, "cat-file", "-t", f"main:{run_id}.txt") == "blob"
        assert bench.runs.executor.merge_slot.holder is None
    finally:
        bench.close()


def test_a_run_stopped_between_sync_and_merge_gives_main_back(sandbox: Path, repo: Path) -> None:
    """The slot is held across one stage boundary only: a run that ends there (here its
    ff_only fails: nothing beyond main) leaves it free for the next run."""
    flow = [{"name": "sync", "action": "sync"}, {"name": "merge", "action": "ff_only"}]
    bench = Machinery.create(sandbox, repo, {"default": flow})
    try:

        async def scenario() -> tuple[str, str]:
            first = await bench.drive("one")
            assert bench.runs.executor.merge_slot.holder is None
            second = await asyncio.wait_for(bench.drive("two"), timeout=60)
            return first, second

        for run_id in asyncio.run(scenario()):
            assert bench.shown(run_id)["state"] == "failed"
    finally:
        bench.close()


def test_a_settled_run_whose_driver_has_not_let_go_is_counted_once(machinery: Machinery) -> None:
    """The dashboard's usage total counted a run twice (3,600 tokens for 1,800) while its
    driver, after the settle, still awaited the close of its worker socket."""

    machinery.launcher.script(Script(act=work), Script())
    run_id = asyncio.run(machinery.drive("one"))
    snapshot = derive(machinery.store, 10)
    settled_sum = board.live_total(machinery.daemon, snapshot)
    lingering = ActiveRun(run_id, machinery.daemon.config)
    lingering.spent = Usage(input_tokens=1800)
    machinery.runs.active[run_id] = lingering  # settled, its driver not gone yet
    assert board.live_total(machinery.daemon, snapshot) == settled_sum


def test_a_limit_probe_starts_over_only_once_an_agents_vendor_answered(
    machinery: Machinery,
) -> None:
    """Issue 24: an agent that got through resets the probe's doubling; one whose
    vendor was unreachable says nothing of the limit and leaves it, and one more
    limit with no named reset counts a probe (the gate was open)."""
    daemon = machinery.daemon
    daemon.limit_probes = 3
    unreachable = "stream disconnected before completion: stream closed before response.completed"
    machinery.launcher.script(Script(exit_code=1, lines=(("stderr", unreachable),)))
    network = machinery.shown(asyncio.run(machinery.drive("one")))
    assert network["classification"] == "network", network
    assert daemon.limit_probes == 3
    limited = "exceeded retry limit, last status: 429 Too Many Requests"
    machinery.launcher.script(Script(exit_code=1, lines=(("stderr", limited),)))
    run = machinery.shown(asyncio.run(machinery.drive("two")))
    assert run["classification"] == "rate_limited", run
    assert daemon.limit_probes == 4
    assert daemon.gate.state == "cooldown"
    assert (daemon.gate.reason or "").endswith("(no reset named: trying again after 8m)")
    daemon.gate = Gate()  # reopened
    machinery.launcher.script(Script(act=work), Script(lines=(("stdout", "tests pass"),)))
    assert machinery.shown(asyncio.run(machinery.drive("three")))["state"] == "merged"
    assert daemon.limit_probes == 0
