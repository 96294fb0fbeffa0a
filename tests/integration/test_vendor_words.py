"""What a failing CLI printed, read through a real daemon (issue 34, items 7-10).

A stand-in for a vendor CLI (``WORDS_AGENT``) prints the lines the real CLIs print
when they fail, recorded in ``tests.support.vendor_outputs``: its stdout lines first,
then (a moment later, so they are read in that order) its stderr lines, and exits
with the CLI's status; once the test drops its ``.ok`` flag it commits and passes.

* Gemini CLI ends a session whose model stream broke off with an error event and a
  ``result`` of status ``"error"``, and exits 0: the stage fails all the same,
  ``overloaded`` in Gemini's words, and the ticket is queued again (0.8.0 passed the
  stage; the run failed "nothing to merge", unclassified).
* Gemini CLI's spent prepaid balance (exit 173, the result event, then a Node stack
  dump ending ``status: 429``) is ``usage_limit`` in the vendor's sentence (0.8.0:
  ``rate_limited``, evidence ``status: 429``).
* Claude Code's notices of a seat's usage credits are ``usage_limit``, its ETIMEDOUT
  wording ``network`` (0.8.0: ``unknown``).
* The gemini preset's own refusal of a checkout holding ``.env`` is the stage's
  reason, classified ``refused``, and the daemon names the ``.env`` main holds at
  start (0.8.0: ``exited with code 2``, ``unknown``, and a warning naming no file).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from sloopd.flows.presets import GEMINI_REFUSAL
from tests.integration.test_agent_failures import doctor_json
from tests.support.agents import Bench, sloop_toml, ticket_text
from tests.support.vendor_outputs import (
    CLAUDE_TIMED_OUT,
    CLAUDE_USAGE_LIMITS,
    GEMINI_NO_FINISH,
    PREPAID,
    PREPAID_RESULT,
    PREPAID_STDERR,
    claude_error_result,
)

WORDS_AGENT = r'''
"""Prints flags/<ticket>.json's stdout, then its stderr, and exits with its code;
passes (a commit) once flags/<ticket>.ok exists.  With "wait", waits for flags/go first."""
import json
import os
import subprocess
import sys
import time

flags = sys.argv[1]
ticket, run = os.environ["SLOOP_TICKET"], os.environ["SLOOP_RUN"]
with open(os.path.join(flags, ticket + ".calls"), "a") as f:
    f.write(run + "\n")
if os.path.exists(os.path.join(flags, ticket + ".ok")):
    with open(f"{ticket}.txt", "w") as f:
        f.write(f"done by {run}\n")
    identity = ["-c", "user.name=agent", "-c", "user.email=agent@example.invalid"]
    subprocess.run(["git", *identity, "add", f"{ticket}.txt"], check=True)
    subprocess.run(["git", *identity, "commit", "-q", "-m", f"agent {run}"], check=True)
    sys.exit(0)
with open(os.path.join(flags, ticket + ".json")) as f:
    spec = json.load(f)
while spec.get("wait") and not os.path.exists(os.path.join(flags, "go")):
    time.sleep(0.05)
for line in spec.get("stdout", []):
    print(line, flush=True)
time.sleep(0.3)  # the daemon reads the stdout lines before the stderr ones
for line in spec.get("stderr", []):
    print(line, file=sys.stderr, flush=True)
sys.exit(spec.get("exit", 1))
'''

SYNC: dict[str, Any] = {"name": "sync", "action": "sync"}
MERGE: dict[str, Any] = {"name": "merge", "action": "ff_only"}


class WordsBench:
    """A bench whose agent is ``WORDS_AGENT``, with a spec and flags per ticket."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.script = bench.root / "agents" / "words.py"
        self.script.write_text(WORDS_AGENT, encoding="utf-8")

    @property
    def argv(self) -> list[str]:
        return [sys.executable, str(self.script), str(self.bench.path(""))]

    def config(self, agent: str, parallel: int | None = None) -> str:
        """sloop.toml: the default flow with this agent; ``agent``: more [agent] keys."""
        flow = [{"name": "implement", "action": "agent"}, SYNC, MERGE]
        config = sloop_toml(self.argv, parallel=parallel, flows={"default": flow})
        return config.replace("[agent]\n", f"[agent]\n{agent}", 1)

    def prints(
        self,
        ticket_id: str,
        stdout: list[str],
        stderr: list[str] | None = None,
        exit_code: int = 1,
        *,
        wait: bool = False,
    ) -> None:
        spec = {"stdout": stdout, "stderr": stderr or [], "exit": exit_code, "wait": wait}
        self.bench.path(f"{ticket_id}.json").write_text(json.dumps(spec), encoding="utf-8")

    def succeed(self, ticket_id: str) -> None:
        self.bench.release(f"{ticket_id}.ok")

    def calls(self, ticket_id: str) -> list[str]:
        path = self.bench.path(f"{ticket_id}.calls")
        return path.read_text().split() if path.exists() else []


def implement_row(run: dict[str, Any]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = [r for r in run["stages"] if r["stage"] == "implement"]
    assert len(rows) == 1, run["stages"]
    return rows[0]


def test_a_gemini_session_that_ends_in_an_error_fails_though_its_cli_exits_0(
    bench: Bench,
) -> None:
    words = WordsBench(bench)
    config = words.config(
        'stream = "gemini"\ntransient_retries = 1\ntransient_backoff = "2s"\n'
        'transient_backoff_max = "2s"\n'
    )
    bench.setup(config, {"broken": ticket_text("Broken")})
    bench.start()
    words.prints("T1", GEMINI_NO_FINISH, ["Ripgrep is not available. Falling back to GrepTool."], 0)
    bench.post("broken")

    run = bench.wait_run("broken#1")
    assert run["state"] == "failed", run
    assert run["halt"] == "fail_action", run
    assert run["classification"] == "overloaded", run
    assert run["diagnosis"]["vendor"] == "gemini", run
    assert run["diagnosis"]["evidence"] == "Model stream ended without a finish reason.", run
    assert run["agent_exit_code"] == 0, run
    row = implement_row(run)
    assert row["state"] == "failed", row
    assert row["reason"] == (
        'exited with code 0, but the CLI\'s stream ends in a result of status "error"; '
        "gemini said: Model stream ended without a finish reason."
    ), row
    # Not blamed on the agent: the merge stage never ran, and the ticket is queued again.
    assert "nothing to merge" not in run["reason"], run
    assert [r["state"] for r in run["stages"][1:]] == ["pending", "pending"], run["stages"]
    assert "queued again in 2s (transient retry 1 of 1)" in run["reason"], run
    assert bench.ticket("broken")["state"] == "ready"
    assert bench.dashboard()["gate"]["state"] == "open"

    words.succeed("T1")
    again = bench.wait_run("broken#2")
    assert again["state"] == "merged", again
    assert words.calls("T1") == [run["id"], again["id"]]


def test_a_spent_gemini_prepaid_balance_is_a_usage_limit_in_the_vendors_words(
    bench: Bench,
) -> None:
    words = WordsBench(bench)
    bench.setup(words.config('stream = "gemini"\n'), {"prepaid": ticket_text("Prepaid")})
    bench.start()
    stdout = [*GEMINI_NO_FINISH[:2], PREPAID_RESULT]
    words.prints("T1", stdout, PREPAID_STDERR, 173)
    bench.post("prepaid")

    run = bench.wait_run("prepaid#1")
    assert run["state"] == "failed", run
    assert run["agent_exit_code"] == 173, run
    assert run["classification"] == "usage_limit", run
    diagnosis = run["diagnosis"]
    assert diagnosis["vendor"] == "gemini", diagnosis
    # The vendor's sentence from the result event, not the stack dump's "status: 429".
    assert diagnosis["evidence"] == " ".join(PREPAID.split()), diagnosis
    assert "status: 429" not in run["reason"], run
    assert "Your prepayment credits are depleted." in run["reason"], run
    gate = bench.dashboard()["gate"]
    assert gate["state"] == "cooldown", gate
    assert "usage limit" in gate["reason"], gate


def test_claudes_seat_usage_notices_and_its_timeout_are_classified(bench: Bench) -> None:
    words = WordsBench(bench)
    said = [*CLAUDE_USAGE_LIMITS, CLAUDE_TIMED_OUT]
    names = [f"claude{i}" for i in range(len(said))]
    config = words.config('stream = "claude"\ntransient_retries = 0\n', parallel=len(said))
    bench.setup(config, {name: ticket_text(name) for name in names})
    bench.start()
    for index, (name, text) in enumerate(zip(names, said, strict=True)):
        words.prints(f"T{index + 1}", ["Thinking…", claude_error_result(text)], wait=True)
        bench.post(name)
    # All of them run before the first limit closes the gate.
    for name in names:
        bench.wait_stage_running(f"{name}#1", "implement")
    bench.release("go")

    for name, text in zip(names, said, strict=True):
        run = bench.wait_run(f"{name}#1")
        expected = "network" if text == CLAUDE_TIMED_OUT else "usage_limit"
        assert run["state"] == "failed", run
        assert run["classification"] == expected, (text, run)
        assert run["diagnosis"]["vendor"] == "claude", run
        assert run["diagnosis"]["evidence"] == text, run
        assert implement_row(run)["reason"] == f"exited with code 1; claude said: {text}", run
    assert bench.dashboard()["gate"]["state"] == "cooldown"


def test_the_gemini_preset_refusing_a_checkout_says_so_and_main_is_named_at_start(
    bench: Bench,
) -> None:
    bench.setup('[agent]\npreset = "gemini"\n', {"env": ticket_text("Env")})
    bench.commit_on_main({".env": "API_TOKEN=from-the-repository\n"}, "a committed .env")
    bench.start()

    # At start: the log, the dashboard's clis and doctor name the .env main holds.
    log = bench.log()
    assert "agent preset 'gemini': main holds .env, and the gemini preset refuses" in log, log
    rows = [r for r in bench.dashboard()["daemon"]["sandbox"]["clis"] if r.get("file")]
    assert [(r["preset"], r["file"]) for r in rows] == [("gemini", ".env")], rows
    clis = next(c for c in doctor_json(bench)["checks"] if c["name"] == "clis")
    assert clis["status"] == "fail", clis
    assert "main holds .env" in clis["detail"], clis
    assert "remove .env from main" in clis["fix"], clis

    bench.post("env")
    run = bench.wait_run("env#1")
    refusal = GEMINI_REFUSAL % ".env"
    assert run["state"] == "failed", run
    assert run["agent_exit_code"] == 2, run
    assert run["classification"] == "refused", run
    assert run["diagnosis"]["evidence"] == refusal, run
    assert run["diagnosis"]["vendor"] is None, run
    assert implement_row(run)["reason"] == refusal, run
    assert run["reason"] == f"stage 'implement' failed on execution 1: refused ({refusal})", run
    # Not transient, no limit: the ticket waits for a person, the gate stays open.
    ticket = bench.ticket("env")
    assert ticket["state"] == "failed", ticket
    assert ticket["trigger"] is None, ticket
    assert bench.dashboard()["gate"]["state"] == "open"
