"""Stalled agents: ``silent_for_ms``, ``stall`` past ``stall_after``, stopped past the kill.

DESIGN "Stall", issue 8.  With ``stall_after = "1s"`` and ``stall_kill_after = "3s"``
an agent that sleeps without a word shows a non-null ``stall`` after a second,
is stopped (its whole process group) after three, and its stage fails with
classification ``stalled``; an agent that talks every half second is never
stalled, however long it works.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import pytest

from tests.support.agents import (
    Bench,
    alive_with,
    processes_with,
    read_pid,
    sloop_toml,
    start_with_args,
    ticket_text,
)
from tests.support.daemon import free_loopback_port, metrics_sample, wait_until

STALL_CONFIG = 'stall_after = "1s"\nstall_kill_after = "3s"\n'
# Prints a line every 0.5 s for 4 s: longer than stall_kill_after, never silent for 1 s.
CHATTY = (
    "import time\nfor i in range(8):\n    print(f'step {i}', flush=True)\n    time.sleep(0.5)\n"
)


def config(bench: Bench) -> str:
    quiet = bench.argv(
        "--pidfile",
        bench.flag("quiet.pid"),
        "--grandchild",
        bench.flag("grandchild.pid"),
        "--sleep",
        "60",
    )
    chatty: list[dict[str, Any]] = [
        {"name": "implement", "action": "agent", "command": [sys.executable, "-c", CHATTY]},
        {"name": "sync", "action": "sync"},
        # The chatty agent commits nothing: this test is about silence, not merging.
        {"name": "merge", "action": "ff_only", "allow_empty": True},
    ]
    text = sloop_toml(quiet, flows={"chatty": chatty})
    return text.replace("[agent]\n", "[agent]\n" + STALL_CONFIG)


def running_row(run: dict[str, Any]) -> dict[str, Any] | None:
    rows = [r for r in run["stages"] if r["state"] == "running"]
    return rows[0] if rows else None


# In the Ray run too (issue 34): the stall clock of a child on a node is its node's, so a
# loaded host's relay delay no longer shows the chatty one stalled.
@pytest.mark.on_ray
def test_silent_agent_is_stalled_then_stopped_while_a_chatty_one_is_not(bench: Bench) -> None:
    bench.setup(
        config(bench),
        {"quiet": ticket_text("Quiet"), "chatty": ticket_text("Chatty", flow="chatty")},
    )
    port = free_loopback_port()
    start_with_args(bench, "--metrics", f"127.0.0.1:{port}")
    bench.post("quiet")
    bench.post("chatty")
    agent_pid = read_pid(bench.path("quiet.pid"))
    grandchild_pid = read_pid(bench.path("grandchild.pid"))

    # Watch both while they run: the quiet one stalls, the chatty one never does.
    stalled: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
    live: dict[str, dict[str, Any]] = {}
    chatty_seen: list[tuple[Any, Any]] = []
    while True:
        chatty = bench.show_run("chatty#1")
        if chatty is not None and not chatty["terminal"]:
            row = running_row(chatty)
            chatty_seen.append((chatty["stall"], row["silent_for_ms"] if row else None))
        quiet = bench.show_run("quiet#1")
        assert quiet is not None
        if stalled is None and quiet["stall"] is not None:
            stalled = quiet
            summary = bench.ticket("quiet")["runs"][0]
            live = {r["alias"]: r for r in bench.dashboard()["runs"]}
            assert metrics_sample(port, "sloop_runs_stalled") == 1
        if quiet["terminal"] and chatty is not None and chatty["terminal"]:
            break
        time.sleep(0.1)

    # While it ran: stall non-null with where and how long; the stage row agrees.
    assert stalled is not None, "the silent agent never showed a stall"
    stall = stalled["stall"]
    assert stall["stage"] == "implement", stall
    assert stall["attempt"] == 1, stall
    assert stall["silent_for_ms"] >= 1000, stall
    assert stall["stall_after_ms"] == 1000, stall
    row = running_row(stalled)
    assert row is not None, stalled
    assert row["stage"] == "implement", stalled
    assert row["silent_for_ms"] >= 1000, row
    # The ticket's run history carries the same stall (protocol "Read a ticket's run history").
    assert summary is not None, summary
    assert summary["stall"] is not None, summary
    assert summary["stall"]["stage"] == "implement", summary
    # So do the dashboard's runs in flight.
    assert live["quiet#1"]["stall"] is not None, live
    assert live["quiet#1"]["stall"]["stage"] == "implement", live

    # Stopped at the kill threshold: the stage failed, the run failed as 'stalled'.
    quiet = bench.wait_run("quiet#1")
    assert quiet["state"] == "failed", quiet
    assert quiet["halt"] == "fail_action", quiet
    assert quiet["classification"] == "stalled", quiet
    assert quiet["diagnosis"]["classification"] == "stalled", quiet
    assert "stalled" in quiet["reason"], quiet
    assert quiet["stall"] is None
    implement = quiet["stages"][0]
    assert implement["stage"] == "implement", implement
    assert implement["state"] == "failed", implement
    assert implement["silent_for_ms"] is None
    assert 3000 <= implement["duration_ms"] < 10_000, implement
    assert [r["state"] for r in quiet["stages"][1:]] == ["pending", "pending"]

    # Nothing of the agent is left: neither it nor the grandchild in its group.
    run_id = quiet["id"]
    marker = f"SLOOP_WORKTREE={bench.worktree_of(run_id)}"
    wait_until(lambda: processes_with(f"SLOOP_RUN={run_id}", marker) == [], timeout=8)
    assert not alive_with(agent_pid, f"SLOOP_RUN={run_id}")
    assert not alive_with(grandchild_pid, f"SLOOP_RUN={run_id}")

    # A stall is not a vendor limit: the gate stays open and nothing is queued again.
    dashboard = bench.dashboard()
    assert dashboard["gate"]["state"] == "open"
    assert bench.ticket("quiet")["state"] == "failed"
    assert metrics_sample(port, "sloop_runs_stalled") == 0

    # The chatty agent worked 4 s, never stalled, and merged.
    chatty = bench.wait_run("chatty#1")
    assert chatty["state"] == "merged", chatty
    assert chatty["classification"] is None
    assert chatty["stall"] is None
    assert len(chatty_seen) >= 5, chatty_seen
    assert all(stall is None for stall, _ in chatty_seen), chatty_seen
    silences = [silent for _, silent in chatty_seen if silent is not None]
    assert silences, chatty_seen
    assert max(silences) < 1000, chatty_seen
    assert chatty["stages"][0]["duration_ms"] >= 3500, chatty["stages"][0]
