"""The outcome names the cause (issue 33): a stage's and a run's ``reason`` quote it
after the rule, through the real daemon with script agents.

A failing child's last non-empty line (stderr first, escapes stripped, one bounded
line), a panel's failing seat with its reason, a reported fail with its reason; and an
execution an abort cut short is recorded ``aborted``, not ``failed``.
The pure pieces: tests/unit/test_reasons_cause.py.
"""

from __future__ import annotations

from typing import Any

from tests.support.agents import Bench, sloop_toml, ticket_text

FAILED_LINE = "FAILED: answer.txt WANT=Z1a2b GOT=guess"
AGENT = ["sh", "-c", "echo guess > answer.txt; git add answer.txt; git commit -q -m g || true"]
SAYS_WHY = [
    "sh",
    "-c",
    f'echo noise; echo "{FAILED_LINE}" >&2; echo "more noise"; exit 1',
]


def flow_with(test: list[str]) -> dict[str, list[dict[str, Any]]]:
    return {
        "default": [
            {"name": "implement", "action": "agent"},
            {
                "name": "test",
                "action": "command",
                "command": test,
                "return_to": "implement",
                "returns": 1,
            },
            {"name": "sync", "action": "sync"},
            {"name": "merge", "action": "ff_only"},
        ]
    }


def rows_of(run: dict[str, Any], stage: str) -> list[dict[str, Any]]:
    return [row for row in run["stages"] if row["stage"] == stage and row["attempt"] > 0]


def test_a_failing_childs_last_stderr_line_is_quoted_in_the_stage_and_the_run(
    bench: Bench,
) -> None:
    bench.setup(sloop_toml(AGENT, flows=flow_with(SAYS_WHY)), {"answer": ticket_text("Answer")})
    bench.start()
    bench.post("answer")
    run = bench.wait_run("answer#1", timeout=90)
    assert run["state"] == "needs_review", run
    quoted = f"exited with code 1: {FAILED_LINE}"
    assert [row["reason"] for row in rows_of(run, "test")] == [quoted, quoted], run
    assert run["reason"] == (
        f"stage 'test' failed on execution 2 ({quoted}) and its return_to 'implement' "
        "budget of 1 is spent"
    ), run
    records = bench.log_lines(run["id"])
    assert ("test", 2, "system", f"stage 'test' execution 2 failed: {quoted}") in records


def test_escapes_are_stripped_and_a_ten_megabyte_line_is_quoted_in_a_line(bench: Bench) -> None:
    flood = [
        "sh",
        "-c",
        r'printf "\033]0;title\007\033[31mBOOM\033[0m "; '
        'head -c 10485760 /dev/zero | tr "\\0" y; echo; exit 1',
    ]
    bench.setup(sloop_toml(AGENT, flows=flow_with(flood)), {"flood": ticket_text("Flood")})
    bench.start()
    bench.post("flood")
    run = bench.wait_run("flood#1", timeout=120)
    reason = rows_of(run, "test")[0]["reason"]
    assert reason.startswith("exited with code 1: BOOM yyyy"), reason
    assert reason.endswith("\u2026"), reason
    assert len(reason) <= len("exited with code 1: ") + 200, reason
    assert "\x1b" not in reason, reason
    assert "\x07" not in reason, reason
    assert "title" not in reason, reason
    assert len(run["reason"]) <= 1000, run


def test_a_one_seat_panels_fail_reason_is_in_the_runs_reason(bench: Bench) -> None:
    strict = [
        "sh",
        "-c",
        'sloopctl verdict fail --reason "answer.txt must say WANT=Z1a2b"',
    ]
    flows: dict[str, list[dict[str, Any]]] = {
        "default": [
            {"name": "implement", "action": "agent"},
            {
                "name": "review",
                "action": "agent",
                "result_check": "panel",
                "quorum": 1,
                "reviewers": [{"target": "strict", "command": strict}],
            },
            {"name": "sync", "action": "sync"},
            {"name": "merge", "action": "ff_only"},
        ]
    }
    bench.setup(sloop_toml(AGENT, flows=flows), {"panel": ticket_text("Panel")})
    bench.start()
    bench.post("panel")
    run = bench.wait_run("panel#1", timeout=90)
    assert run["state"] == "failed", run
    cause = (
        "0 of 1 reviewers passed (quorum 1): seat 0 (strict): fail: answer.txt must say WANT=Z1a2b"
    )
    assert rows_of(run, "review")[0]["reason"] == cause, run
    assert run["reason"] == f"stage 'review' failed on execution 1: {cause}", run


def test_a_reported_fail_names_its_reason_in_the_runs_reason(bench: Bench) -> None:
    reviewer = ["sh", "-c", 'sloopctl verdict fail --reason "answer.txt must say WANT=Z1a2b"']
    flows: dict[str, list[dict[str, Any]]] = {
        "default": [
            {"name": "implement", "action": "agent"},
            {
                "name": "review",
                "action": "agent",
                "result_check": "reported",
                "command": reviewer,
            },
            {"name": "sync", "action": "sync"},
            {"name": "merge", "action": "ff_only"},
        ]
    }
    bench.setup(sloop_toml(AGENT, flows=flows), {"review": ticket_text("Review")})
    bench.start()
    bench.post("review")
    run = bench.wait_run("review#1", timeout=90)
    assert run["state"] == "failed", run
    assert run["reason"] == (
        "stage 'review' failed on execution 1: "
        "its worker reported fail: answer.txt must say WANT=Z1a2b"
    ), run


def test_an_aborted_executions_record_says_aborted(bench: Bench) -> None:
    slow = [{"name": "implement", "action": "agent", "command": bench.argv("--wait-for", "x")}]
    bench.setup(sloop_toml(bench.argv(), flows={"default": slow}), {"s": ticket_text("S")})
    bench.start()
    bench.post("s")
    running = bench.wait_stage_running("s#1", "implement")
    bench.ok("abort", {"run": running["id"], "reason": "wrong ticket"})
    run = bench.wait_run(running["id"])
    assert run["state"] == "aborted", run
    records = [text for _, _, stream, text in bench.log_lines(run["id"]) if stream == "system"]
    said = "stage 'implement' execution 1 aborted by the operator: wrong ticket"
    assert said in records, records
    assert not any("execution 1 failed" in text for text in records), records
