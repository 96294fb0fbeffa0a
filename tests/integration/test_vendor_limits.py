"""Vendor limits through the real daemon: classification, the gate, cooldown and resume.

A stand-in for a vendor CLI (``VENDOR_AGENT``) prints what the real ones print
when they fail — a Claude usage limit with its reset epoch, an API 429, a 529
overload, an expired login — and exits 1, until the test drops its ``.ok``
flag; then it commits a file and succeeds.  DESIGN "Vendor diagnostics",
issue 8: a rate or usage limit closes the gate until the reset time (or the
configured ``[agent] cooldown``), settles the run ``failed`` with the
classification, queues the ticket again due at the cooldown's end without
spending a ``return_to`` budget, and the daemon resumes by itself.  Other
failures leave the gate open.  ``pause``/``resume`` close and reopen it by
hand, and a restart keeps it with its deadline.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import pytest

from tests.support.agents import Bench, sloop_toml, start_with_args, ticket_text
from tests.support.daemon import free_loopback_port, metrics_sample

VENDOR_AGENT = r'''
"""A vendor CLI stand-in: fails with flags/<ticket>.say until flags/<ticket>.ok exists."""
import os
import subprocess
import sys

flags = sys.argv[1]
ticket, run = os.environ["SLOOP_TICKET"], os.environ["SLOOP_RUN"]
with open(os.path.join(flags, ticket + ".calls"), "a") as f:
    f.write(run + "\n")
print("Reading the ticket and the repository...", flush=True)
if os.path.exists(os.path.join(flags, ticket + ".ok")):
    name = f"{ticket}.txt"
    with open(name, "w") as f:
        f.write(f"done by {run}\n")
    identity = ["-c", "user.name=agent", "-c", "user.email=agent@example.invalid"]
    subprocess.run(["git", *identity, "add", name], check=True)
    subprocess.run(["git", *identity, "commit", "-q", "-m", f"agent {run}"], check=True)
    print("Done: committed " + name, flush=True)
    sys.exit(0)
with open(os.path.join(flags, ticket + ".say")) as f:
    sys.stdout.write(f.read())
sys.stdout.flush()
sys.exit(1)
'''

USAGE_LIMIT = "Claude AI usage limit reached|{epoch}\n"
RATE_LIMIT = (
    'API Error: 429 {"type":"error","error":{"type":"rate_limit_error","message":"This request '
    "would exceed the rate limit for your organization (8c4b1f3e) of 50,000 input tokens per "
    'minute. For details, refer to: https://docs.claude.com/en/api/rate-limits."},'
    '"request_id":"req_011CUz5e2xWq7nB3"}\n'
)
OVERLOADED = (
    "  \u23bf  API Error (Request timed out.) \u00b7 Retrying in 1 seconds\u2026 (attempt 1/10)\n"
    'API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},'
    '"request_id":"req_011CUz7Xk2JmQ9"}\n'
)
AUTH_FAILED = "Invalid API key \u00b7 Please run /login\n"

SYNC: dict[str, Any] = {"name": "sync", "action": "sync"}
MERGE: dict[str, Any] = {"name": "merge", "action": "ff_only", "return_to": "sync", "returns": 3}


class VendorBench:
    """A bench whose agent is ``VENDOR_AGENT``, with per-ticket message and flag files."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.script = bench.root / "agents" / "vendor.py"
        self.script.write_text(VENDOR_AGENT, encoding="utf-8")

    @property
    def argv(self) -> list[str]:
        return [sys.executable, str(self.script), str(self.bench.path(""))]

    def stage(self, name: str = "implement", **keys: Any) -> dict[str, Any]:
        return {"name": name, "action": "agent", "command": self.argv, **keys}

    def say(self, ticket_id: str, text: str) -> None:
        self.bench.path(f"{ticket_id}.say").write_text(text, encoding="utf-8")

    def succeed(self, ticket_id: str) -> None:
        self.bench.release(f"{ticket_id}.ok")

    def calls(self, ticket_id: str) -> list[str]:
        path = self.bench.path(f"{ticket_id}.calls")
        return path.read_text().split() if path.exists() else []


@pytest.fixture
def vendor(bench: Bench) -> VendorBench:
    return VendorBench(bench)


def retrying_flow(vendor: VendorBench) -> list[dict[str, Any]]:
    """implement may return to itself twice: a limit must not spend that budget."""
    return [vendor.stage(return_to="implement", returns=2), SYNC, MERGE]


def events(bench: Bench, **args: Any) -> list[dict[str, Any]]:
    data = bench.ok("events", args)
    found: list[dict[str, Any]] = data["events"]
    return found


def gate_events(bench: Bench) -> list[dict[str, Any]]:
    return [e for e in events(bench) if e["kind"] == "gate_changed"]


def implement_rows(run: dict[str, Any]) -> list[tuple[int, str]]:
    return [(r["attempt"], r["state"]) for r in run["stages"] if r["stage"] == "implement"]


def assert_cooldown(bench: Bench, run: dict[str, Any], classification: str, until_ms: int) -> None:
    """Everything DESIGN promises while a limit holds; call before ``until_ms`` passes."""
    ticket_id = run["ticket"]

    # The run settled failed with the classification; its reason says so.
    assert run["state"] == "failed", run
    assert run["classification"] == classification, run
    assert run["diagnosis"]["classification"] == classification, run
    assert classification in run["reason"], run
    assert "'implement'" in run["reason"], run
    assert run["agent_exit_code"] == 1
    # One implement execution: the limit spent no return_to budget (no "returned"
    # step, whose system log line would say "returning to 'implement'").
    assert implement_rows(run) == [(1, "failed")], run["stages"]
    records = bench.ok("logs", {"run": run["id"]})["records"]
    texts = [r["text"] for r in records if r["stream"] == "system"]
    assert not any("returning to" in t for t in texts), texts
    assert any("usage limit" in r["text"] or "429" in r["text"] for r in records), records
    assert [r["state"] for r in run["stages"] if r["stage"] != "implement"] == [
        "pending",
        "pending",
    ], run["stages"]

    # The gate: closed until the deadline, saying why.
    dashboard = bench.dashboard()
    gate = dashboard["gate"]
    assert gate["state"] == "cooldown", gate
    assert gate["until_ms"] == until_ms, (gate, until_ms)
    assert gate["reason"], gate
    assert classification.replace("_", " ") in gate["reason"], gate
    assert run["id"] in gate["reason"], gate
    assert dashboard["runs"] == []
    # The daemon looks again at the deadline (the requeued trigger is due then too).
    assert dashboard.get("next_wake") == until_ms, dashboard

    # The ticket is ready again, with one trigger due when the cooldown ends.
    ticket = bench.ticket(ticket_id)
    assert ticket["state"] == "ready", ticket
    assert ticket["trigger"] is not None, ticket
    assert ticket["trigger"]["due_at_ms"] == until_ms, ticket
    assert ticket["waiting"] is not None, ticket
    assert ticket["waiting"]["until_ms"] == until_ms, ticket
    assert ticket["waiting"]["reason"] in ("scheduled", "cooldown"), ticket
    assert [t["ticket"] for t in dashboard["queued_triggers"]] == [ticket_id], dashboard

    # `run` on any ticket answers cooldown_active with the deadline.
    for ref in (ticket_id, "other"):
        error = bench.client.error("run", {"ref": ref})
        assert error["code"] == "cooldown_active", error
        assert error["details"]["until_ms"] == until_ms, error
    assert bench.ticket("other")["state"] == "held"  # refused, not queued

    # One repository-wide gate_changed event, absent from scoped feeds.
    changes = gate_events(bench)
    assert len(changes) == 1, changes
    change = changes[0]
    assert change["ticket"] is None, change
    assert change["run"] is None, change
    assert change["data"]["state"] == "cooldown", change
    assert change["data"]["from"] == "open", change
    assert change["data"]["until_ms"] == until_ms, change
    for scope in (ticket_id, run["id"]):
        scoped = [e["kind"] for e in events(bench, scope=scope)]
        assert "gate_changed" not in scoped, (scope, scoped)
        assert scoped, (scope, scoped)


def assert_resumed(bench: Bench, vendor: VendorBench, run: dict[str, Any], until_ms: int) -> None:
    """After the deadline the gate reopens by itself and the ticket's next attempt merges."""
    ticket_id = run["ticket"]
    second = bench.wait_run(f"{run['alias'].split('#')[0]}#2", timeout=20)
    assert second["state"] == "merged", second
    # Claimed at the deadline, not before: no agent was respawned meanwhile.
    assert second["claimed_at_ms"] >= until_ms, (second, until_ms)
    assert vendor.calls(ticket_id) == [run["id"], second["id"]]
    assert bench.dashboard()["gate"] == {"state": "open", "until_ms": None, "reason": None}
    changes = gate_events(bench)
    assert [c["data"]["state"] for c in changes] == ["cooldown", "open"], changes
    assert changes[1]["ticket"] is None
    assert changes[1]["run"] is None
    assert (bench.repo / f"{ticket_id}.txt").read_text() == f"done by {second['id']}\n"
    ticket = bench.ticket(ticket_id)
    assert ticket["state"] == "merged"
    assert [r["state"] for r in ticket["runs"]] == ["merged", "failed"]


def test_usage_limit_closes_the_gate_until_its_reset_then_resumes(
    bench: Bench, vendor: VendorBench
) -> None:
    bench.setup(
        sloop_toml(vendor.argv, flows={"default": retrying_flow(vendor)}),
        {"one": ticket_text("One"), "other": ticket_text("Other")},
    )
    bench.start()
    bench.post("other", hold=True)
    # The reset the CLI names, a few seconds ahead (epoch seconds, as Claude prints it).
    epoch = int(time.time()) + 5
    vendor.say("T2", f"Thinking...\n{USAGE_LIMIT.format(epoch=epoch)}")
    assert bench.post("one")["ticket"]["id"] == "T2"

    run = bench.wait_run("one#1")
    until_ms = epoch * 1000
    assert run["diagnosis"]["evidence"] == f"Claude AI usage limit reached|{epoch}", run
    assert run["diagnosis"]["vendor"] == "claude"
    assert run["diagnosis"]["reset_at_ms"] == until_ms
    assert_cooldown(bench, run, "usage_limit", until_ms)
    assert time.time() * 1000 < until_ms, "the checks outran the cooldown; raise its margin"

    vendor.succeed("T2")
    assert_resumed(bench, vendor, run, until_ms)


def test_rate_limit_without_reset_uses_the_configured_cooldown(
    bench: Bench, vendor: VendorBench
) -> None:
    bench.setup(
        sloop_toml(vendor.argv, flows={"default": retrying_flow(vendor)}).replace(
            "[agent]\n", '[agent]\ncooldown = "3s"\n'
        ),
        {"one": ticket_text("One"), "other": ticket_text("Other")},
    )
    port = free_loopback_port()
    start_with_args(bench, "--metrics", f"127.0.0.1:{port}")
    bench.post("other", hold=True)
    vendor.say("T2", RATE_LIMIT)
    bench.post("one")

    run = bench.wait_run("one#1")
    assert run["diagnosis"]["vendor"] == "claude"
    assert run["diagnosis"]["reset_at_ms"] is None  # the 429 names no reset time
    evidence = run["diagnosis"]["evidence"]
    assert evidence.startswith("API Error: 429"), run
    assert "rate_limit_error" in evidence, run
    until_ms = bench.dashboard()["gate"]["until_ms"]
    assert isinstance(until_ms, int)
    # The configured 3 s from the moment the failure was diagnosed.
    implement = run["stages"][0]
    assert implement["finished_at_ms"] - 50 <= until_ms - 3000 <= run["finished_at_ms"], (
        until_ms,
        run,
    )
    assert_cooldown(bench, run, "rate_limited", until_ms)
    assert time.time() * 1000 < until_ms, "the checks outran the 3 s cooldown"
    # The gate and its deadline are on the metrics endpoint too.
    assert metrics_sample(port, 'sloop_gate_state{state="cooldown"}') == 1
    assert metrics_sample(port, 'sloop_gate_state{state="open"}') == 0
    deadline = metrics_sample(port, "sloop_gate_cooldown_until_seconds")
    assert deadline == pytest.approx(until_ms / 1000, abs=0.001), (deadline, until_ms)

    vendor.succeed("T2")
    assert_resumed(bench, vendor, run, until_ms)
    assert metrics_sample(port, 'sloop_gate_state{state="open"}') == 1
    assert metrics_sample(port, "sloop_gate_cooldown_until_seconds") == 0
    assert metrics_sample(port, 'sloop_runs_finished_total{state="failed"}') == 1
    assert metrics_sample(port, 'sloop_runs_finished_total{state="merged"}') == 1


def test_overload_and_auth_failures_leave_the_gate_open(bench: Bench, vendor: VendorBench) -> None:
    retry_once = [vendor.stage(return_to="implement", returns=1), SYNC, MERGE]
    # No transient retries here (tests/integration/test_transient_retries.py has them).
    config = sloop_toml(vendor.argv, flows={"retrying": retry_once})
    config = config.replace("[agent]\n", "[agent]\ntransient_retries = 0\n")
    bench.setup(
        config,
        {"login": ticket_text("Login"), "busy": ticket_text("Busy", flow="retrying")},
    )
    bench.start()
    vendor.say("T1", AUTH_FAILED)
    vendor.say("T2", OVERLOADED)
    bench.post("login")
    bench.post("busy")

    # Auth: an ordinary failure per the flow (fail_action), classified.
    login = bench.wait_run("login#1")
    assert login["state"] == "failed", login
    assert login["halt"] == "fail_action", login
    assert login["classification"] == "auth_failed", login
    assert login["diagnosis"]["evidence"] == AUTH_FAILED.strip(), login
    assert login["diagnosis"]["vendor"] == "claude"
    assert "auth_failed" in login["reason"], login

    # Overload: transient, so no return_to is spent; with no retries left, failed.
    busy = bench.wait_run("busy#1")
    assert busy["state"] == "failed", busy
    assert busy["halt"] == "fail_action", busy
    assert implement_rows(busy) == [(1, "failed")], busy["stages"]
    assert busy["classification"] == "overloaded", busy
    assert "transient retries are spent" in busy["reason"], busy
    evidence = busy["diagnosis"]["evidence"]
    assert evidence.startswith("API Error: 529"), busy
    assert "overloaded_error" in evidence, busy
    assert vendor.calls("T2") == ["R2"]
    texts = [r["text"] for r in bench.ok("logs", {"run": busy["id"]})["records"]]
    assert "returning to 'implement'" not in texts, texts

    # Neither closes the gate, and neither ticket is queued again.
    dashboard = bench.dashboard()
    assert dashboard["gate"] == {"state": "open", "until_ms": None, "reason": None}
    assert dashboard["queued_triggers"] == [], dashboard
    assert "next_wake" not in dashboard, dashboard
    assert gate_events(bench) == []
    assert bench.ticket("login")["state"] == "failed"
    assert bench.ticket("busy")["state"] == "failed"


def test_pause_holds_every_claim_until_resume(bench: Bench, vendor: VendorBench) -> None:
    bench.setup(sloop_toml(vendor.argv), {"one": ticket_text("One")})
    bench.start()
    vendor.succeed("T1")

    assert bench.ok("pause", {"reason": "vendor maintenance window"}) == {
        "gate": {"state": "paused", "until_ms": None, "reason": "vendor maintenance window"}
    }
    assert bench.dashboard()["gate"]["state"] == "paused"
    posted = bench.post("one")
    assert posted["trigger"] is not None
    # Nothing is claimed: the ticket stays ready, and says why.
    time.sleep(0.7)
    ticket = bench.ticket("one")
    assert ticket["state"] == "ready", ticket
    assert ticket["runs"] == [], ticket
    assert ticket["waiting"]["reason"] == "cooldown", ticket
    assert "paused" in ticket["waiting"]["message"], ticket
    assert bench.dashboard()["runs"] == []
    assert vendor.calls("T1") == []

    # A restart (kill -9 as well) keeps the pause.
    assert bench.daemon is not None
    bench.daemon.kill9()
    bench.start()
    assert bench.dashboard()["gate"] == {
        "state": "paused",
        "until_ms": None,
        "reason": "vendor maintenance window",
    }
    time.sleep(0.5)
    assert bench.ticket("one")["state"] == "ready"

    resumed = bench.ok("resume")
    assert resumed == {"gate": {"state": "open", "until_ms": None, "reason": None}}
    run = bench.wait_run("one#1")
    assert run["state"] == "merged", run
    assert vendor.calls("T1") == ["R1"]

    # Resuming an open gate changes nothing and appends nothing.
    assert bench.ok("resume")["gate"]["state"] == "open"
    changes = gate_events(bench)
    assert [(c["data"]["from"], c["data"]["state"]) for c in changes] == [
        ("open", "paused"),
        ("paused", "open"),
    ], changes
    assert all(c["ticket"] is None and c["run"] is None for c in changes)
    # A pause without a reason gets one.
    default = bench.ok("pause")["gate"]
    assert default["state"] == "paused", default
    assert default["reason"], default
    bench.ok("resume")


def test_restart_keeps_the_cooldown_and_its_deadline(bench: Bench, vendor: VendorBench) -> None:
    bench.setup(
        sloop_toml(vendor.argv).replace("[agent]\n", '[agent]\ncooldown = "60s"\n'),
        {"one": ticket_text("One"), "other": ticket_text("Other")},
    )
    bench.start()
    bench.post("other", hold=True)
    vendor.say("T2", RATE_LIMIT)
    bench.post("one")
    run = bench.wait_run("one#1")
    gate = bench.dashboard()["gate"]
    assert gate["state"] == "cooldown", gate
    assert isinstance(gate["until_ms"], int), gate

    def unchanged_after_restart() -> None:
        assert bench.dashboard()["gate"] == gate
        error = bench.client.error("run", {"ref": "other"})
        assert error["code"] == "cooldown_active", error
        assert error["details"]["until_ms"] == gate["until_ms"]
        ticket = bench.ticket("one")
        assert ticket["state"] == "ready"
        assert ticket["trigger"]["due_at_ms"] == gate["until_ms"]
        assert [r["id"] for r in ticket["runs"]] == [run["id"]]  # nothing claimed since
        assert len(gate_events(bench)) == 1  # a restart is not a gate change

    assert bench.stop() == 0, bench.log()
    bench.start()
    unchanged_after_restart()

    assert bench.daemon is not None
    bench.daemon.kill9()
    bench.start()
    unchanged_after_restart()

    # resume ends the cooldown early, by hand.
    assert bench.ok("resume")["gate"] == {"state": "open", "until_ms": None, "reason": None}
    assert bench.ok("run", {"ref": "other"})["trigger"] is not None
    assert vendor.calls("T2") == ["R1"]
