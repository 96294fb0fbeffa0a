"""The real Claude Code CLI as a Sloop agent, in Sloop's sandbox, against a stand-in API.

The CLI (``tests.support.agent_clis.cli("claude")``, a native binary) runs headless
(``-p``) with ``--output-format stream-json --verbose``, its prompt read from
``$SLOOP_PROMPT_FILE`` on standard input (an argument is limited to 128 KiB), and
permissions bypassed (headless, it refuses every tool that needs one; as root the
bypass also needs ``IS_SANDBOX=1``).  It talks only to ``AnthropicStandIn`` on
127.0.0.1: the sandbox shares the host's network namespace, and every other host
the CLI might call (telemetry, error reports, update checks) is turned off by
environment.  The values reach the child through the daemon's environment
(``Bench.env``) and ``[agent] env``, which passes them by name.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_clis import cli
from tests.support.agents import BENCH_VAR, Bench, ticket_text, toml_value
from tests.support.daemon import git
from tests.support.standins.anthropic import AnthropicStandIn, hello_script, verdict_script

# Claude Code's switches for an unattended run in a sandbox (values set per test).
CLAUDE_ENV: dict[str, str] = {
    "ANTHROPIC_API_KEY": "sk-ant-api03-sloop-stand-in",
    "IS_SANDBOX": "1",  # root may bypass permissions only when it says it is sandboxed
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "CLAUDE_CODE_MAX_RETRIES": "1",  # a 429 or 529 fails in seconds, not ~185 s
}
# The prompt on stdin; "$0" is the CLI's absolute path, which the sandbox then shows.
CLAUDE_SCRIPT = (
    'exec "$0" -p --output-format stream-json --verbose '
    '--dangerously-skip-permissions < "$SLOOP_PROMPT_FILE"'
)
CLAUDE_TIMEOUT_S = 90.0


def claude_command() -> list[str]:
    return ["sh", "-c", CLAUDE_SCRIPT, str(cli("claude"))]


# Pointed at the stand-in too: a call to any other host would be a CONNECT it logs.
PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY")
# Passed when a test sets them (a name the daemon lacks is skipped).
OPTIONAL_VARS = ("API_TIMEOUT_MS",)


def claude_toml(bench: Bench, flows: str = "") -> str:
    names = ["ANTHROPIC_BASE_URL", *CLAUDE_ENV, *PROXY_VARS, *OPTIONAL_VARS, BENCH_VAR]
    return (
        "[agent]\n"
        f"command = {toml_value(claude_command())}\n"
        f"env = {toml_value(names)}\n"
        f"rw_mounts = {toml_value([str(bench.root / 'flags')])}\n"
        f"{flows}"
    )


@pytest.fixture
def api() -> Iterator[AnthropicStandIn]:
    with AnthropicStandIn() as standin:
        yield standin


def start_claude(
    bench: Bench, api: AnthropicStandIn, tickets: dict[str, str], flows: str = ""
) -> None:
    bench.env.update(CLAUDE_ENV)
    bench.env.update(
        ANTHROPIC_BASE_URL=api.url, HTTPS_PROXY=api.url, HTTP_PROXY=api.url, NO_PROXY="127.0.0.1"
    )
    bench.setup(claude_toml(bench, flows), tickets)
    bench.start()


def records(bench: Bench, run_id: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = bench.ok("logs", {"run": run_id})["records"]
    return found


def agent_lines(bench: Bench, run_id: str) -> list[str]:
    return [r["text"] for r in records(bench, run_id) if r["stream"] in ("stdout", "stderr")]


def result_event(lines: list[str]) -> dict[str, Any]:
    for line in reversed(lines):
        if line.startswith("{") and '"type":"result"' in line:
            event: dict[str, Any] = json.loads(line)
            return event
    raise AssertionError(f"no result event in {lines[-5:]}")


def test_claude_walks_a_ticket_to_merged(bench: Bench, api: AnthropicStandIn) -> None:
    start_claude(bench, api, {"hello": ticket_text("Add hello.txt", "Create hello.txt.")})
    before = bench.rev("main")
    bench.post("hello")
    run = bench.wait_run("hello#1", timeout=CLAUDE_TIMEOUT_S)

    lines = agent_lines(bench, run["id"])
    assert run["state"] == "merged", (run, lines[-10:], api.paths())
    assert (bench.repo / "hello.txt").read_text() == "hello\n"
    assert git(bench.repo, "log", "-1", "--format=%s", "main") == "add hello"
    assert git(bench.repo, "rev-parse", "main~1") == before
    # Only the conversation reached the stand-in: two turns, nothing else.
    assert api.paths() == ["POST /v1/messages?beta=true"] * 2, api.paths()
    prompt = json.dumps(api.message_requests()[0].body["messages"])
    assert "Add hello.txt" in prompt
    assert "Create hello.txt." in prompt
    result = result_event(lines)
    assert result["subtype"] == "success", result
    assert result["permission_denials"] == [], result
    assert result["usage"]["input_tokens"] == 2400
    assert result["usage"]["output_tokens"] == 600


def test_a_200_kb_ticket_reaches_the_cli_whole(bench: Bench, api: AnthropicStandIn) -> None:
    body = "\n".join(f"line {n:06d} " + "x" * 90 for n in range(2000)) + "\nTHE END"
    assert len(body) > 200_000
    start_claude(bench, api, {"big": ticket_text("Add hello.txt", body)})
    bench.post("big")
    run = bench.wait_run("big#1", timeout=CLAUDE_TIMEOUT_S)

    assert run["state"] == "merged", (run, agent_lines(bench, run["id"])[-10:])
    prompt = json.dumps(api.message_requests()[0].body["messages"])
    assert "line 000000" in prompt
    assert "line 001999" in prompt
    assert "THE END" in prompt


def test_a_vendor_429_fails_the_run_rate_limited_and_closes_the_gate(
    bench: Bench, api: AnthropicStandIn
) -> None:
    api.mode = "rate_limit"
    start_claude(bench, api, {"limited": ticket_text("Add hello.txt")})
    started = time.monotonic()
    bench.post("limited")
    run = bench.wait_run("limited#1", timeout=CLAUDE_TIMEOUT_S)
    took = time.monotonic() - started

    lines = agent_lines(bench, run["id"])
    assert run["state"] == "failed", (run, lines[-10:])
    assert run["classification"] == "rate_limited", (run, lines[-10:])
    assert took < 45, took  # CLAUDE_CODE_MAX_RETRIES=1: one retry, not ~185 s of them
    gate = bench.dashboard()["gate"]
    assert gate["state"] == "cooldown", gate
    assert gate["until_ms"] > time.time() * 1000, gate
    assert bench.ticket("limited")["state"] == "ready"
    assert result_event(lines)["is_error"] is True


def gate_closings(bench: Bench) -> list[dict[str, Any]]:
    """Every time the gate closed for a limit: its ``gate_changed`` data, in order."""
    changes = [e["data"] for e in bench.ok("events", {})["events"] if e["kind"] == "gate_changed"]
    return [c for c in changes if c["state"] == "cooldown"]


def test_a_429_naming_no_reset_is_probed_with_a_doubling_wait(
    bench: Bench, api: AnthropicStandIn
) -> None:
    """Issue 24 item 4: no reset named, so the gate probes (2s, 4s) instead of 30 minutes.

    ``retry-after: 3600`` is past the 60 s Claude Code waits for, so it fails at
    once with ``API Error: Request rejected (429) · …`` and no reset anywhere.
    """
    api.mode = "rate_limit"
    tickets = {"limited": ticket_text("Add hello.txt"), "later": ticket_text("Add hello.txt")}
    start_claude(bench, api, tickets, 'probe_cooldown = "2s"\n')
    bench.post("limited")
    first = bench.wait_run("limited#1", timeout=CLAUDE_TIMEOUT_S)
    assert first["classification"] == "rate_limited", first
    assert first["diagnosis"]["reset_at_ms"] is None, first["diagnosis"]
    assert "retry_after_ms" not in first["diagnosis"], first["diagnosis"]
    # The gate reopens after the probe, the ticket's next run meets the limit again.
    second = bench.wait_run("limited#2", timeout=CLAUDE_TIMEOUT_S)
    assert second["classification"] == "rate_limited", second
    closings = gate_closings(bench)
    assert [c["reason"].rsplit("(", 1)[-1] for c in closings] == [
        "no reset named: trying again after 2s)",
        "no reset named: trying again after 4s)",
    ], closings
    assert second["claimed_at_ms"] >= closings[0]["until_ms"], (second, closings)
    for run, closing in zip((first, second), closings, strict=True):
        assert run["id"] in closing["reason"], closing
        assert closing["until_ms"] - run["finished_at_ms"] <= 4000, (run, closing)

    api.mode = "normal"  # the limit lifts: the third run gets through and merges
    third = bench.wait_run("limited#3", timeout=CLAUDE_TIMEOUT_S)
    assert third["state"] == "merged", third
    assert third["claimed_at_ms"] >= closings[1]["until_ms"], (third, closings)
    # ... so the next limit is probed from the start again.
    api.mode = "rate_limit"
    bench.post("later")
    later = bench.wait_run("later#1", timeout=CLAUDE_TIMEOUT_S)
    assert later["classification"] == "rate_limited", later
    last = gate_closings(bench)[-1]
    assert last["reason"].endswith("(no reset named: trying again after 2s)"), last


def test_the_retry_delay_claude_relays_is_the_least_the_gate_waits(
    bench: Bench, api: AnthropicStandIn
) -> None:
    """A 429 with ``retry-after: 5``: Claude waits it out once (its ``api_retry``
    event says so), meets the 429 again and gives up; the gate waits at least that."""
    api.mode, api.retry_after_s = "rate_limit", 5
    start_claude(bench, api, {"limited": ticket_text("Add hello.txt")}, 'probe_cooldown = "1s"\n')
    bench.post("limited")
    run = bench.wait_run("limited#1", timeout=CLAUDE_TIMEOUT_S)
    lines = agent_lines(bench, run["id"])
    assert run["classification"] == "rate_limited", (run, lines[-5:])
    retries = [json.loads(line) for line in lines if '"subtype":"api_retry"' in line]
    assert [r["error_status"] for r in retries] == [429], lines
    relayed = run["diagnosis"]["retry_after_ms"]
    assert relayed == retries[0]["retry_delay_ms"], (run["diagnosis"], retries)
    assert relayed >= 5000, relayed
    closing = gate_closings(bench)[0]
    implement = run["stages"][0]
    assert closing["until_ms"] - implement["finished_at_ms"] >= relayed, (closing, implement)
    assert "no reset named: trying again after" in closing["reason"], closing


@pytest.mark.parametrize(
    ("mode", "classification"),
    [("auth", "auth_failed"), ("overloaded", "overloaded"), ("too_long", "context_length")],
)
def test_other_vendor_failures_are_classified_and_leave_the_gate_open(
    bench: Bench, api: AnthropicStandIn, mode: str, classification: str
) -> None:
    api.mode = mode
    start_claude(bench, api, {"denied": ticket_text("Add hello.txt")})
    bench.post("denied")
    run = bench.wait_run("denied#1", timeout=CLAUDE_TIMEOUT_S)

    lines = agent_lines(bench, run["id"])
    assert run["state"] == "failed", (run, lines[-10:])
    assert run["classification"] == classification, (run, lines[-10:])
    assert run["diagnosis"]["vendor"] == "claude", run["diagnosis"]
    assert bench.dashboard()["gate"]["state"] == "open"
    assert result_event(lines)["is_error"] is True


def test_an_unreachable_api_is_a_network_failure(bench: Bench, api: AnthropicStandIn) -> None:
    api.close()  # the port now refuses connections
    start_claude(bench, api, {"offline": ticket_text("Add hello.txt")})
    bench.post("offline")
    run = bench.wait_run("offline#1", timeout=CLAUDE_TIMEOUT_S)

    lines = agent_lines(bench, run["id"])
    assert run["state"] == "failed", (run, lines[-10:])
    assert run["classification"] == "network", (run, lines[-10:])
    assert "ECONNREFUSED" in result_event(lines)["result"]
    assert bench.dashboard()["gate"]["state"] == "open"


OFFLINE_FLOW = """
[[flows.default.stages]]
name = "implement"
action = "agent"
network = false

[[flows.default.stages]]
name = "sync"
action = "sync"

[[flows.default.stages]]
name = "merge"
action = "ff_only"
"""


def test_a_stage_without_network_cannot_reach_even_loopback(
    bench: Bench, api: AnthropicStandIn
) -> None:
    start_claude(bench, api, {"offline": ticket_text("Add hello.txt")}, OFFLINE_FLOW)
    bench.post("offline")
    run = bench.wait_run("offline#1", timeout=CLAUDE_TIMEOUT_S)

    lines = agent_lines(bench, run["id"])
    assert run["state"] == "failed", (run, lines[-5:])
    assert run["classification"] == "network", (run, lines[-5:])
    assert api.paths() == []  # its own network namespace: the host's 127.0.0.1 is not there


def test_an_api_too_slow_to_answer_is_a_network_failure(
    bench: Bench, api: AnthropicStandIn
) -> None:
    api.mode, api.delay_s = "slow", 6.0
    bench.env["API_TIMEOUT_MS"] = "1500"
    start_claude(bench, api, {"slow": ticket_text("Add hello.txt")})
    bench.post("slow")
    run = bench.wait_run("slow#1", timeout=CLAUDE_TIMEOUT_S)

    lines = agent_lines(bench, run["id"])
    assert run["state"] == "failed", (run, lines[-10:])
    assert result_event(lines)["result"].startswith("Request timed out."), lines[-1]
    assert run["classification"] == "network", (run, lines[-10:])


REVIEW_FLOW = """
[[flows.default.stages]]
name = "implement"
action = "agent"

[[flows.default.stages]]
name = "review"
action = "agent"
result_check = "reported"

[[flows.default.stages]]
name = "sync"
action = "sync"

[[flows.default.stages]]
name = "merge"
action = "ff_only"
"""


def test_claude_reports_a_verdict_through_sloopctl(bench: Bench, api: AnthropicStandIn) -> None:
    # implement: two turns (commit, done); review: two more (verdict, done).
    api.scripts = [hello_script(), verdict_script("pass", "hello.txt is there")]
    start_claude(bench, api, {"reviewed": ticket_text("Add hello.txt")}, REVIEW_FLOW)
    bench.post("reviewed")
    run = bench.wait_run("reviewed#1", timeout=CLAUDE_TIMEOUT_S)

    assert run["state"] == "merged", (run, agent_lines(bench, run["id"])[-10:])
    review = next(r for r in run["stages"] if r["stage"] == "review")
    assert review["state"] == "passed", review
    assert review["verdict_source"] == "reported", review
    assert review["reason"] == "hello.txt is there", review
    assert review["confidence"] == "medium", review
    assert (bench.repo / "hello.txt").read_text() == "hello\n"
    assert len(api.sessions()) == 2, api.sessions()


def save_stream(bench: Bench, run_id: str, path: Path) -> None:
    """Write a run's agent output to ``path`` (for capturing fixtures by hand)."""
    path.write_text("\n".join(agent_lines(bench, run_id)) + "\n", encoding="utf-8")
