"""Runs and their processes: abort, leftovers of a finished agent, a daemon killed mid-stage.

A process belongs to a run when its environment holds the run's ``SLOOP_RUN``
and ``SLOOP_WORKTREE`` (the worktree path is unique to the test's sandbox, so
runs of other daemons on the machine never count).  A zombie has an empty
environment and counts as gone.
"""

from __future__ import annotations

import pytest

from tests.support.agents import (
    Bench,
    alive_with,
    processes_with,
    read_pid,
    sloop_toml,
    stage_table,
    tagged,
    ticket_text,
)
from tests.support.daemon import wait_until


def run_env(bench: Bench, run_id: str) -> tuple[str, str]:
    return bench.run_env(run_id)


@pytest.mark.on_ray
def test_hanging_agent_is_aborted(bench: Bench) -> None:
    # The first run's agent hangs; after `ready`, the next attempt's agent finishes.
    agent = bench.argv(
        "--pidfile",
        bench.flag("{run}.pid"),
        "--trap-term",
        bench.flag("term-{run}.log"),  # SIGTERM is noted and ignored: only SIGKILL ends it
        "--grandchild",
        bench.flag("grandchild-{run}.pid"),
        "--hang-run",
        "R1",
        "--write",
        "{ticket}.txt=x",
    )
    bench.setup(sloop_toml(agent), {"hang": ticket_text("Hang forever")})
    bench.start()
    bench.post("hang")
    in_flight = bench.wait_stage_running("hang#1", "implement")
    mine = run_env(bench, "R1")
    agent_pid = read_pid(bench.path("R1.pid"))
    grandchild = read_pid(bench.path("grandchild-R1.pid"))  # written after the trap is set
    assert alive_with(agent_pid, *mine)
    assert alive_with(grandchild, *mine)

    # A run in flight, as show gives it.
    assert in_flight["state"] == "running"
    assert in_flight["terminal"] is False
    assert in_flight["finished_at_ms"] is None
    assert in_flight["reason"] is None
    assert in_flight["halt"] is None
    assert in_flight["agent_exit_code"] is None
    assert in_flight["worktree"] == str(bench.worktree_of("R1"))
    running = in_flight["stages"][0]
    assert (running["stage"], running["attempt"], running["state"]) == ("implement", 1, "running")
    assert running["finished_at_ms"] is None
    assert running["duration_ms"] is None
    assert isinstance(running["silent_for_ms"], int)
    assert running["silent_for_ms"] >= 0
    assert [r["silent_for_ms"] for r in in_flight["stages"][1:]] == [None, None]
    assert [r["id"] for r in bench.dashboard()["runs"]] == ["R1"]
    ticket = bench.ticket("hang")
    assert ticket["state"] == "running"
    assert ticket["waiting"] is None
    assert ticket["runs"][0]["finished_at_ms"] is None
    assert ticket["runs"][0]["stages"][0]["state"] == "running"

    aborted = bench.ok("abort", {"run": "hang#1"})["run"]

    assert aborted["id"] == "R1"
    assert aborted["state"] == "aborted"
    assert aborted["terminal"]
    assert aborted["reason"], aborted
    assert "abort" in aborted["reason"], aborted
    assert processes_with(*mine) == []
    # SIGTERM came first; the agent survived it and was killed after the grace.
    assert bench.path("term-R1.log").read_text().splitlines() == ["TERM"]
    run = bench.show_run("R1")
    assert run is not None
    assert run["state"] == "aborted"
    assert run["halt"] is None
    assert run["reason"] == aborted["reason"]
    assert stage_table(run) == [
        ("implement", 1, "failed"),
        ("sync", 0, "pending"),
        ("merge", 0, "pending"),
    ]
    assert run["stages"][0]["exit_code"] == -9, run["stages"][0]
    ticket = bench.ticket("hang")
    assert ticket["state"] == "held"
    assert ticket["waiting"]["reason"] == "held"
    assert bench.event_kinds("R1") == ["run_claimed", "run_started", "run_aborted"]
    # A settled run cannot be aborted again.
    assert bench.client.error("abort", {"run": "R1"})["code"] == "conflict"
    assert bench.dashboard()["runs"] == []

    # `ready` releases the held ticket: its next attempt runs.
    bench.ok("ready", {"ref": "hang"})
    second = bench.wait_run("hang#2")
    assert second["state"] == "merged", second
    assert bench.ticket("hang")["state"] == "merged"
    assert not bench.worktree_of("R1").exists()


def test_grandchild_outliving_its_agent_is_killed(bench: Bench) -> None:
    agent = bench.argv("--grandchild", bench.flag("grandchild.pid"), "--write", "x.txt=x")
    bench.setup(sloop_toml(agent), {"fork": ticket_text("Fork and leave")})
    bench.start()
    bench.post("fork")
    run = bench.wait_run("fork#1")

    assert run["state"] == "merged", run
    assert stage_table(run)[0] == ("implement", 1, "passed")
    assert run["stages"][0]["exit_code"] == 0
    assert tagged(bench.path("grandchild.pid")) == []  # it died with its sandbox
    assert processes_with(*run_env(bench, "R1")) == []


def test_daemon_killed_mid_stage_then_restarted(bench: Bench) -> None:
    # The first execution's agent waits for a flag the test sets after the restart.
    agent = bench.argv(
        "--pidfile",
        bench.flag("{run}-{attempt}.pid"),
        "--wait-for",
        bench.flag("go"),
        "--write",
        "{ticket}.txt=x",
    )
    bench.setup(sloop_toml(agent), {"crash": ticket_text("Crash midway")})
    bench.start()
    bench.post("crash")
    bench.wait_stage_running("crash#1", "implement")
    mine = run_env(bench, "R1")
    agent_pid = read_pid(bench.path("R1-1.pid"))
    assert bench.daemon is not None
    bench.daemon.kill9()
    # The sandbox dies with its daemon (bwrap --die-with-parent): nothing of the run is
    # left running unsupervised, even before a new daemon starts.
    wait_until(lambda: not alive_with(agent_pid, *mine))
    assert processes_with(*mine) == []

    bench.start()  # same state and socket directories
    bench.release("go")

    # Issue 38: the run continues at its interrupted stage instead of being redone.
    first = bench.wait_run("R1")
    assert first["state"] == "merged", first
    assert first["finished_at_ms"] is not None
    assert stage_table(first) == [
        ("implement", 1, "failed"),
        ("implement", 2, "passed"),
        ("sync", 1, "passed"),
        ("merge", 1, "passed"),
    ]
    assert first["stages"][0]["ended_by"] == "interrupted"
    assert "restart" in first["stages"][0]["reason"]
    ticket = bench.ticket("crash")
    assert ticket["state"] == "merged"
    assert [(r["id"], r["state"]) for r in ticket["runs"]] == [("R1", "merged")]
    kinds = bench.event_kinds("R1")
    assert kinds == ["run_claimed", "run_started", "run_continued", "run_finished"], kinds
    assert bench.rev("main") == bench.rev("sloop/crash/1")


@pytest.mark.on_ray
def test_daemon_stopped_mid_stage_continues_the_run(bench: Bench) -> None:
    agent = bench.argv(
        "--pidfile",
        bench.flag("{run}-{attempt}.pid"),
        "--wait-for",
        bench.flag("go"),
        "--write",
        "x.txt=x",
    )
    bench.setup(sloop_toml(agent), {"stop": ticket_text("Stop midway")})
    bench.start()
    bench.post("stop")
    bench.wait_stage_running("stop#1", "implement")
    mine = run_env(bench, "R1")
    agent_pid = read_pid(bench.path("R1-1.pid"))

    assert bench.stop() == 0, bench.log()
    assert not alive_with(agent_pid, *mine)  # a stopping daemon stops every group
    assert processes_with(*mine) == []

    bench.start()
    bench.release("go")
    first = bench.wait_run("R1")
    assert first["state"] == "merged", first
    (cut, again) = [r for r in first["stages"] if r["stage"] == "implement"]
    assert (cut["ended_by"], cut["reason"]) == ("interrupted", "interrupted: the daemon stopped")
    assert (again["attempt"], again["state"]) == (2, "passed")
    assert [r["id"] for r in bench.ticket("stop")["runs"]] == ["R1"]
