"""Transient vendor failures: queued again with capped exponential backoff (issue 14).

An ``overloaded`` or ``network`` failure settles the run ``failed`` (halt
``fail_action``: no ``return_to`` budget spent, the gate stays open) and queues
its ticket again after ``agent.transient_backoff``, doubling, up to
``agent.transient_retries`` times; the count comes from the ticket's stored runs,
so a restart in between forgets nothing.  Then the run settles ``failed`` saying
the retries are spent.
"""

from __future__ import annotations

from typing import Any

from tests.integration.test_vendor_limits import (
    MERGE,
    OVERLOADED,
    SYNC,
    VendorBench,
    gate_events,
    implement_rows,
)
from tests.support.agents import Bench, sloop_toml, ticket_text

NETWORK = "API Error: Connection error.\n"


def assert_due_after(bench: Bench, ticket: str, run: dict[str, Any], backoff_ms: int) -> None:
    """The retry's trigger is due ``backoff_ms`` after the failure was decided: a moment
    after the failed stage ended and before the run settled.  (Measured from the
    settle alone, a host busy between the two moments made the wait look short.)"""
    trigger = bench.ticket(ticket)["trigger"]
    assert trigger is not None, bench.ticket(ticket)
    due = trigger["due_at_ms"]
    failed = max(row["finished_at_ms"] or 0 for row in run["stages"])
    assert failed + backoff_ms <= due <= run["finished_at_ms"] + backoff_ms, (
        due - failed,
        due - run["finished_at_ms"],
    )


def test_transient_failures_are_retried_with_backoff_then_given_up(bench: Bench) -> None:
    vendor = VendorBench(bench)
    flow = [vendor.stage(return_to="implement", returns=2), SYNC, MERGE]
    config = sloop_toml(vendor.argv, flows={"retrying": flow})
    config = config.replace(
        "[agent]\n",
        '[agent]\ntransient_retries = 2\ntransient_backoff = "1s"\ntransient_backoff_max = "90s"\n',
    )
    bench.setup(config, {"busy": ticket_text("Busy", flow="retrying"), "net": ticket_text("Net")})
    bench.start()
    vendor.say("T1", OVERLOADED)
    bench.post("busy")

    first = bench.wait_run("busy#1")
    assert first["state"] == "failed", first
    assert first["halt"] == "fail_action", first
    assert first["classification"] == "overloaded", first
    assert implement_rows(first) == [(1, "failed")], first["stages"]  # no return_to spent
    assert "queued again in 1s (transient retry 1 of 2)" in first["reason"], first
    assert_due_after(bench, "busy", first, 1000)
    assert bench.ticket("busy")["state"] == "ready"
    dashboard = bench.dashboard()
    assert dashboard["gate"]["state"] == "open", dashboard
    assert gate_events(bench) == [], dashboard

    # A restart while the retry waits: the count is read from the stored runs.
    assert bench.stop() == 0
    bench.start()
    second = bench.wait_run("busy#2")
    assert second["classification"] == "overloaded", second
    assert "queued again in 2s (transient retry 2 of 2)" in second["reason"], second
    assert_due_after(bench, "busy", second, 2000)

    third = bench.wait_run("busy#3")
    assert third["state"] == "failed", third
    assert third["halt"] == "fail_action", third
    assert "not queued again: the ticket's transient retries are spent" in third["reason"]
    assert "(2 of agent.transient_retries = 2)" in third["reason"], third
    assert bench.ticket("busy")["state"] == "failed"
    assert bench.ticket("busy")["trigger"] is None
    assert vendor.calls("T1") == ["R1", "R2", "R3"]
    for run in (first, second, third):
        texts = [r["text"] for r in bench.ok("logs", {"run": run["id"]})["records"]]
        assert "returning to 'implement'" not in texts, texts

    # A network failure is transient too; once the vendor is back, the retry merges.
    vendor.say("T2", NETWORK)
    bench.post("net")
    lost = bench.wait_run("net#1")
    assert lost["classification"] == "network", lost
    assert "transient retry 1 of 2" in lost["reason"], lost
    vendor.succeed("T2")
    assert bench.wait_run("net#2")["state"] == "merged"
