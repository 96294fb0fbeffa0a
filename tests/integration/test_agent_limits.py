"""Wall-clock timeouts, usage read from the agent's stream, and run budgets (issue 14).

A stage past its ``timeout`` is stopped like a stalled one and fails ``timed_out``,
even when its agent never stops printing (Codex saying "Reconnecting..." forever:
the stall detector never fires).  Agents here print usage events the test parser
``tests.support.usage_stream`` reads; the usage shows on stage rows, panel seats,
the run, the ticket and the dashboard, and in Prometheus; a run past its
``max_tokens`` or ``max_cost_usd`` has its stage stopped, ``budget_exceeded``, and
its walk ends there without a ``return_to``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sloopctl.render import render
from tests.support.agents import Bench, sloop_toml, start_with_args, ticket_text
from tests.support.daemon import free_loopback_port, metrics_sample
from tests.support.usage_stream import SPEC, line

ROOT = Path(__file__).resolve().parents[2]
# Prints forever, a line every 0.2 s: never silent, never done.
RECONNECTING = (
    "import time\n"
    "while True:\n"
    "    print('Reconnecting... 1/5 (stream disconnected before completion)', flush=True)\n"
    "    time.sleep(0.2)\n"
)
SYNC: dict[str, Any] = {"name": "sync", "action": "sync"}
MERGE: dict[str, Any] = {"name": "merge", "action": "ff_only", "allow_empty": True}


def with_parser(bench: Bench) -> None:
    """The daemon imports the test parser by its python: spec."""
    bench.env["PYTHONPATH"] = str(ROOT)


@pytest.mark.on_ray
def test_timeout_stops_a_chatty_agent_and_a_hung_command(bench: Bench) -> None:
    chatty = [
        {
            "name": "implement",
            "action": "agent",
            "command": [sys.executable, "-c", RECONNECTING],
            "timeout": "2s",
            "return_to": "implement",
            "returns": 1,
        },
        SYNC,
        MERGE,
    ]
    hung = [
        {"name": "implement", "action": "agent", "command": bench.argv()},
        {"name": "test", "action": "command", "command": bench.argv("--hang")},
        SYNC,
        MERGE,
    ]
    config = sloop_toml(bench.argv(), flows={"chatty": chatty, "hung": hung})
    # Stalls would take 20 minutes: only the timeouts can stop these.
    config = config.replace("[agent]\n", '[agent]\ncommand_timeout = "2s"\n')
    bench.setup(
        config,
        {"codex": ticket_text("Codex", flow="chatty"), "tests": ticket_text("Tests", flow="hung")},
    )
    bench.start()
    bench.post("codex")
    bench.post("tests")

    codex = bench.wait_run("codex#1")
    assert codex["state"] == "needs_review", codex  # a timeout is an ordinary failure
    assert codex["classification"] == "timed_out", codex
    rows = [r for r in codex["stages"] if r["stage"] == "implement"]
    assert [r["state"] for r in rows] == ["failed", "failed"], rows
    for row in rows:
        assert row["reason"] == "ran longer than timeout 2s; stopped", row
        assert 2000 <= row["duration_ms"] < 9000, row
    assert "timed_out" in codex["reason"], codex
    assert "timeout 2s" in codex["reason"], codex
    texts = [r["text"] for r in bench.ok("logs", {"run": codex["id"]})["records"]]
    assert sum("Reconnecting" in t for t in texts) >= 10, texts  # it talked all along

    tests = bench.wait_run("tests#1")
    assert tests["state"] == "failed", tests
    assert tests["halt"] == "fail_action", tests
    assert tests["classification"] == "timed_out", tests
    test_row = next(r for r in tests["stages"] if r["stage"] == "test")
    assert test_row["reason"] == "ran longer than timeout 2s; stopped", test_row
    assert bench.dashboard()["gate"]["state"] == "open"


@pytest.mark.on_ray
def test_a_panel_seat_has_its_own_timeout(bench: Bench) -> None:
    panel: list[dict[str, Any]] = [
        {"name": "implement", "action": "agent", "command": bench.argv()},
        {
            "name": "review",
            "action": "agent",
            "result_check": "panel",
            "timeout": "2s",
            "quorum": 1,
            "reviewers": [
                {"target": "slow", "command": bench.argv("--sleep", "1.5")},
                {"target": "hung", "command": bench.argv("--hang")},
            ],
        },
        SYNC,
        MERGE,
    ]
    bench.setup(
        sloop_toml(bench.argv(), flows={"panel": panel}), {"p": ticket_text("P", flow="panel")}
    )
    bench.start()
    bench.post("p")
    run = bench.wait_run("p#1")
    review = next(r for r in run["stages"] if r["stage"] == "review")
    # Seat 0 took 1.5 s of its own 2 s; seat 1 got a fresh 2 s, then was stopped.
    assert review["state"] == "failed", review
    assert 3500 <= review["duration_ms"] < 12_000, review
    assert [s["verdict"] for s in review["reviewers"]] == ["fail", "fail"], review
    assert run["classification"] == "timed_out", run
    assert "seat 1 (hung) ran longer than timeout 2s; stopped" in run["reason"], run


def usage_flow(bench: Bench) -> list[dict[str, Any]]:
    implement = bench.argv(
        "--say", line(1000, 200, cached=50, cost=0.01), "--say", line(500, 100, cost=0.005)
    )
    return [
        {"name": "implement", "action": "agent", "command": implement, "commit": "auto"},
        {"name": "test", "action": "command", "command": bench.argv("--say", line(7))},
        {
            "name": "review",
            "action": "agent",
            "result_check": "panel",
            "quorum": 1,
            "reviewers": [
                {"target": "a", "command": bench.argv("--say", line(300, 30, cost=0.002))},
                # A seat may name its own stream; this one reports nothing.
                {"target": "b", "command": bench.argv("--say", line(999)), "stream": "none"},
            ],
        },
        SYNC,
        MERGE,
    ]


def test_usage_is_read_from_the_stream_and_shown_everywhere(bench: Bench) -> None:
    with_parser(bench)
    config = sloop_toml(bench.argv(), flows={"counted": usage_flow(bench)})
    config = config.replace("[agent]\n", f'[agent]\nstream = "{SPEC}"\n')
    bench.setup(config, {"u": ticket_text("U", flow="counted")})
    port = free_loopback_port()
    start_with_args(bench, "--metrics", f"127.0.0.1:{port}")
    bench.post("u")
    run = bench.wait_run("u#1")
    # The seats report no verdict, so the panel fails: usage is the point here.
    assert run["state"] == "failed", run
    stages = {r["stage"]: r for r in run["stages"]}
    implement = {"input_tokens": 1500, "output_tokens": 300, "cached_tokens": 50}
    assert stages["implement"]["usage"] == {**implement, "cost_usd": 0.015}, stages["implement"]
    seats = stages["review"]["reviewers"]
    assert seats[0]["usage"] == {
        "input_tokens": 300,
        "output_tokens": 30,
        "cached_tokens": 0,
        "cost_usd": 0.002,
    }, seats
    assert seats[1]["usage"] is None, seats
    assert stages["review"]["usage"] == seats[0]["usage"], stages["review"]
    assert stages["test"]["usage"] is None  # a command stage prints no agent stream
    assert stages["sync"]["usage"] is None
    assert stages["sync"]["state"] == "pending"
    total = {"input_tokens": 1800, "output_tokens": 330, "cached_tokens": 50}
    assert run["usage"]["cost_usd"] is not None
    assert abs(run["usage"].pop("cost_usd") - 0.017) < 1e-9, run["usage"]
    assert run["usage"] == total, run

    ticket = bench.ticket("u")
    assert ticket["runs"][0]["usage"]["input_tokens"] == 1800, ticket["runs"][0]
    assert ticket["usage"]["input_tokens"] == 1800, ticket
    dashboard = bench.dashboard()
    assert dashboard["usage"]["input_tokens"] == 1800, dashboard
    assert dashboard["usage"]["output_tokens"] == 330, dashboard
    recent = {r["alias"]: r for r in dashboard["recent"]}
    assert recent["u#1"]["usage"]["input_tokens"] == 1800, recent

    tokens = 'sloop_agent_tokens_total{kind="%s",vendor="custom"}'
    assert metrics_sample(port, tokens % "input") == 1800
    assert metrics_sample(port, tokens % "output") == 330
    assert metrics_sample(port, tokens % "cached") == 50
    cost = metrics_sample(port, 'sloop_agent_cost_usd_total{vendor="custom"}')
    assert cost is not None
    assert abs(cost - 0.017) < 1e-9

    shown = render("show", bench.ok("show", {"ref": run["id"]}), int(time.time() * 1000), False)
    assert "USAGE" in shown, shown
    # One rule (docs/agents.md "Tokens"): in counts the cached input, which follows apart.
    assert "1.5k in (50 cached), 300 out, $0.0150" in shown, shown
    assert "agents used 1.8k in (50 cached), 330 out" in render("show", bench.ok("show"), 0, False)


def budget_flow(bench: Bench, tokens: int, *, hang: bool = True) -> list[dict[str, Any]]:
    spend = bench.argv(
        *("--say", line(tokens, cost=0.3)) * 2,
        *(["--hang"] if hang else []),
    )
    return [
        {
            "name": "implement",
            "action": "agent",
            "command": spend,
            "return_to": "implement",
            "returns": 2,
        },
        SYNC,
        MERGE,
    ]


@pytest.mark.on_ray
def test_a_run_over_its_budget_is_stopped_and_fails(bench: Bench) -> None:
    with_parser(bench)
    config = sloop_toml(
        bench.argv(),
        flows={"tokens": budget_flow(bench, 6000), "dollars": budget_flow(bench, 10, hang=False)},
        # A flow's own budget wins over [agent]'s.
        extra="[flows.dollars]\nmax_cost_usd = 0.5\n",
    )
    config = config.replace("[agent]\n", f'[agent]\nstream = "{SPEC}"\nmax_tokens = 10000\n')
    bench.setup(
        config,
        {"t": ticket_text("T", flow="tokens"), "d": ticket_text("D", flow="dollars")},
    )
    bench.start()
    bench.post("t")
    bench.post("d")

    tokens = bench.wait_run("t#1")
    assert tokens["state"] == "failed", tokens
    assert tokens["halt"] == "fail_action", tokens
    assert tokens["classification"] == "budget_exceeded", tokens
    rows = [r for r in tokens["stages"] if r["stage"] == "implement"]
    assert len(rows) == 1, rows  # no return_to: a spent budget is not mended by a retry
    assert rows[0]["reason"] == "used 12000 tokens, over max_tokens 10000", rows
    assert rows[0]["usage"]["input_tokens"] == 12000, rows
    assert "used 12000 tokens, over max_tokens 10000" in tokens["reason"], tokens

    # This agent exits 0 right after its second event: over budget is still a failure.
    dollars = bench.wait_run("d#1")
    assert dollars["state"] == "failed"
    assert dollars["classification"] == "budget_exceeded"
    row = next(r for r in dollars["stages"] if r["stage"] == "implement")
    assert row["reason"] == "used $0.6000, over max_cost_usd 0.5", row
    assert bench.ticket("t")["state"] == "failed"
    assert bench.ticket("d")["state"] == "failed"
