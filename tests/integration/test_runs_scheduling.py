"""The scheduler: ``parallel`` respected under load; highest priority, then oldest, first."""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import uvloop

from sloopd.core.config import Config
from sloopd.core.paths import Layout
from sloopd.core.state import Daemon
from sloopd.queue.scheduler import Scheduler
from sloopd.store import Store
from tests.support.agents import (
    Bench,
    read_json,
    sloop_toml,
    ticket_text,
)
from tests.support.daemon import git, wait_until


def reasons(dashboard: dict[str, Any]) -> dict[str, str | None]:
    return {t["name"]: (t["waiting"] or {}).get("reason") for t in dashboard["tickets"]}


def test_parallel_limit_holds_with_many_tickets(bench: Bench) -> None:
    count = bench.path("count.json")
    agent = bench.argv(
        "--concurrency",
        str(count),
        "--wait-for",
        bench.flag("go"),
        "--sleep",
        "0.1",
        "--write",
        "{ticket}.txt=x",
    )
    names = [f"t{i}" for i in range(1, 7)]
    bench.setup(sloop_toml(agent, parallel=2), {n: ticket_text(n.upper()) for n in names})
    bench.start()
    for name in names:
        bench.post(name)

    # Two agents are in (held at the flag); the other four wait for a slot.
    def two_in_flight() -> dict[str, Any] | None:
        dashboard = bench.dashboard()
        both = len(dashboard["runs"]) == 2 and count.exists() and read_json(count)["now"] == 2
        return dashboard if both else None

    dashboard = wait_until(two_in_flight, timeout=20)
    waiting = reasons(dashboard)
    settled = [(r["alias"], r["state"], r["reason"]) for r in dashboard["recent"]]
    assert Counter(waiting.values()) == {"parallel_limit": 4, None: 2}, (waiting, settled)
    assert len(dashboard["queued_triggers"]) == 4
    bench.release("go")

    runs = [bench.wait_run(f"{name}#1", timeout=60) for name in names]
    assert [r["state"] for r in runs] == ["merged"] * 6, [(r["alias"], r["reason"]) for r in runs]
    state = read_json(count)
    assert state["now"] == 0
    assert state["max"] == 2  # never more than `parallel` agents at once
    for name in names:
        ticket_id = bench.ticket(name)["id"]
        assert (bench.repo / f"{ticket_id}.txt").exists()
    assert len(git(bench.repo, "log", "--format=%s", "--grep", "^agent ", "main").split("\n")) == 6


def test_priority_then_oldest(bench: Bench) -> None:
    write = ("--write", "{ticket}.txt=x")
    flows: dict[str, list[dict[str, Any]]] = {
        "default": [
            {"name": "implement", "action": "agent", "command": bench.argv(*write)},
            {"name": "sync", "action": "sync"},
            {"name": "merge", "action": "ff_only", "return_to": "sync", "returns": 3},
        ],
        "blocking": [
            {
                "name": "implement",
                "action": "agent",
                "command": bench.argv("--wait-for", bench.flag("go"), *write),
            },
            {"name": "sync", "action": "sync"},
            {"name": "merge", "action": "ff_only", "return_to": "sync", "returns": 3},
        ],
    }
    bench.setup(
        sloop_toml(bench.argv(), parallel=1, flows=flows),
        {
            "blocker": ticket_text("Blocker", flow="blocking"),
            "low-a": ticket_text("Low A"),
            "low-b": ticket_text("Low B"),
            "high": ticket_text("High", priority=5),
        },
    )
    bench.start()
    bench.post("blocker")
    bench.wait_stage_running("blocker#1", "implement")
    for name in ("low-a", "low-b", "high"):  # oldest first; the high one last
        bench.post(name)
    waiting = reasons(bench.dashboard())
    assert waiting == {
        "blocker": None,
        "low-a": "parallel_limit",
        "low-b": "parallel_limit",
        "high": "parallel_limit",
    }
    bench.release("go")

    runs = {name: bench.wait_run(f"{name}#1") for name in ("high", "low-a", "low-b")}
    assert all(r["state"] == "merged" for r in runs.values()), runs
    assert [runs[n]["id"] for n in ("high", "low-a", "low-b")] == ["R2", "R3", "R4"]
    claimed = [runs[n]["claimed_at_ms"] for n in ("high", "low-a", "low-b")]
    assert claimed == sorted(claimed)
    blocker = bench.wait_run("blocker#1")
    assert blocker["state"] == "merged"
    assert blocker["finished_at_ms"] <= runs["high"]["claimed_at_ms"]  # parallel = 1


def test_sighup_raising_parallel_starts_waiting_work(bench: Bench) -> None:
    agent = bench.argv("--wait-for", bench.flag("go"), "--write", "{ticket}.txt=x")
    tickets = {"one": ticket_text("One"), "two": ticket_text("Two")}
    bench.setup(sloop_toml(agent, parallel=1), tickets, commit_config=False)
    bench.start()
    bench.post("one")
    bench.wait_stage_running("one#1", "implement")
    bench.post("two")
    assert reasons(bench.dashboard())["two"] == "parallel_limit"

    bench.write_config(sloop_toml(agent, parallel=2))
    assert bench.daemon is not None
    bench.daemon.signal(signal.SIGHUP)
    wait_until(lambda: "configuration reloaded" in bench.log())
    assert reasons(bench.dashboard())["two"] is None  # the dashboard says it is about to run
    try:
        # Both agents wait on the flag: "two" can only start because parallel is now 2.
        bench.wait_stage_running("two#1", "implement", timeout=5)
    finally:
        bench.release("go")
        bench.wait_run("one#1")


@pytest.mark.parametrize("runner", ["asyncio", "uvloop"])
def test_scheduler_stops_when_cancelled_as_it_is_poked(
    sandbox: Path, repo: Path, runner: str
) -> None:
    """The daemon's shutdown cancels the scheduler; a run settling just then pokes it.

    In-process, with the real store, so the poke and the cancel can land in the
    same turn of the event loop; the scheduler must still stop.
    """
    state_dir = sandbox / "state"
    state_dir.mkdir()
    store = Store.open(state_dir, migrate=True)
    layout = Layout(repo=repo, state_dir=state_dir, socket_dir=sandbox / "s")
    daemon = Daemon(layout=layout, config=Config(), store=store)

    async def scenario() -> bool:
        scheduler = Scheduler(daemon, lambda run_id: None)
        task = asyncio.get_running_loop().create_task(scheduler.loop())
        await asyncio.sleep(0.05)  # it claimed nothing and sleeps until poked
        scheduler.poke()  # a run settled ...
        task.cancel()  # ... as the daemon stops
        done, _ = await asyncio.wait({task}, timeout=1.0)
        stopped = task in done
        task.cancel()  # the second cancel gets through; let the loop close cleanly
        await asyncio.gather(task, return_exceptions=True)
        return stopped

    try:
        stopped = asyncio.run(scenario()) if runner == "asyncio" else uvloop.run(scenario())
    finally:
        store.close()
    assert stopped, "the scheduler kept running after it was cancelled"
