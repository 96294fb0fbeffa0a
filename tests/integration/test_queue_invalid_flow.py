"""A ticket whose flow left ``sloop.toml`` waits (``invalid_flow``); the queue behind it moves.

Before 0.6.0 the scheduler read only as many due triggers as it had free slots, so a
ticket at the head of the queue whose flow had been removed took the only slot every
time and starved every ticket behind it.
"""

from __future__ import annotations

import signal
from typing import Any

from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.daemon import wait_until

GONE_FLOW: list[dict[str, Any]] = [
    {"name": "implement", "action": "agent"},
    {"name": "sync", "action": "sync"},
    {"name": "merge", "action": "ff_only", "return_to": "sync", "returns": 3},
]


def waiting(bench: Bench, name: str) -> dict[str, Any] | None:
    row = next(t for t in bench.dashboard()["tickets"] if t["name"] == name)
    value: dict[str, Any] | None = row["waiting"]
    return value


def reload(bench: Bench, config: str) -> None:
    assert bench.daemon is not None
    before = bench.log().count("configuration reloaded")
    bench.write_config(config)
    bench.daemon.signal(signal.SIGHUP)
    wait_until(lambda: bench.log().count("configuration reloaded") > before)


def test_a_ticket_whose_flow_was_removed_waits_and_the_rest_of_the_queue_moves(
    bench: Bench,
) -> None:
    agent = bench.argv("--write", "{ticket}.txt=x")
    with_flow = sloop_toml(agent, parallel=1, flows={"gone": GONE_FLOW})
    without_flow = sloop_toml(agent, parallel=1)
    tickets = {
        # The head of the queue: the highest priority, so it is always read first.
        "orphan": ticket_text("Orphan", flow="gone", priority=5),
        "next": ticket_text("Next"),
        "after": ticket_text("After"),
    }
    bench.setup(with_flow, tickets, commit_config=False)
    bench.start()
    bench.post("orphan", hold=True)
    reload(bench, without_flow)  # the flow is gone while the ticket is registered
    bench.ok("ready", {"ref": "orphan"})  # its trigger is due now

    reason = waiting(bench, "orphan")
    assert reason is not None, reason
    assert reason["reason"] == "invalid_flow", reason
    assert "'gone'" in reason["message"], reason

    # With parallel = 1, the orphan would take the one slot forever; it is stepped over.
    bench.post("next")
    bench.post("after")
    assert bench.wait_run("next#1")["state"] == "merged"
    assert bench.wait_run("after#1")["state"] == "merged"
    assert bench.show_run("orphan#1") is None
    assert bench.ticket("orphan")["state"] == "ready"
    assert waiting(bench, "orphan") == reason
    assert [t["ticket"] for t in bench.dashboard()["queued_triggers"]] == [
        bench.ticket("orphan")["id"]
    ]

    # The flow comes back on a reload: the ticket runs on its queued trigger.
    reload(bench, with_flow)
    run = bench.wait_run("orphan#1")
    assert run["state"] == "merged", run
    assert run["flow"] == "gone"
