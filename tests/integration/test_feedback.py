"""A run sent back learns why (issue 33, DESIGN rule 10): the re-entered stage's prompt
carries what the failing execution printed, and ``brief`` carries it as ``feedback``.

The implementer reads only its prompt (or only ``brief``): it writes ``guess`` until it
is told the value the test wants, which the test prints in its failure.
"""

from __future__ import annotations

from typing import Any

from tests.support.agents import Bench, sloop_toml, ticket_text

FROM_PROMPT = [
    "sh",
    "-c",
    'want=$(grep -o "WANT=[A-Za-z0-9]*" "$SLOOP_PROMPT_FILE" | head -n 1 | cut -d= -f2); '
    'echo "${want:-guess}" > answer.txt; git add answer.txt; '
    'git commit -q -m "answer ${want:-guess}" || true',
]
FROM_BRIEF = [
    "sh",
    "-c",
    'want=$(sloopctl brief --json | grep -o "WANT=[A-Za-z0-9]*" | head -n 1 | cut -d= -f2); '
    'echo "${want:-guess}" > answer.txt; git add answer.txt; '
    'git commit -q -m "answer ${want:-guess}" || true',
]
TEST = [
    "sh",
    "-c",
    'echo "checking answer.txt"; got=$(cat answer.txt); '
    'if [ "$got" != Z1a2b ]; then echo "FAILED: answer.txt WANT=Z1a2b GOT=$got" >&2; exit 1; fi',
]


def flow() -> dict[str, list[dict[str, Any]]]:
    return {
        "default": [
            {"name": "implement", "action": "agent"},
            {
                "name": "test",
                "action": "command",
                "command": TEST,
                "network": False,
                "return_to": "implement",
                "returns": 2,
            },
            {"name": "sync", "action": "sync"},
            {"name": "merge", "action": "ff_only", "return_to": "sync", "returns": 3},
        ]
    }


def test_an_agent_that_reads_its_prompt_fixes_the_failure_on_its_second_execution(
    bench: Bench,
) -> None:
    bench.setup(sloop_toml(FROM_PROMPT, flows=flow()), {"answer": ticket_text("Answer")})
    bench.start()
    bench.post("answer")
    run = bench.wait_run("answer#1", timeout=90)
    assert run["state"] == "merged", run
    table = [(s["stage"], s["attempt"], s["state"]) for s in run["stages"]]
    assert table[:4] == [
        ("implement", 1, "passed"),
        ("test", 1, "failed"),
        ("implement", 2, "passed"),
        ("test", 2, "passed"),
    ], table
    assert (bench.repo / "answer.txt").read_text().strip() == "Z1a2b"


def test_brief_carries_the_feedback_structured(bench: Bench) -> None:
    bench.setup(sloop_toml(FROM_BRIEF, flows=flow()), {"answer": ticket_text("Answer")})
    bench.start()
    bench.post("answer")
    run = bench.wait_run("answer#1", timeout=90)
    assert run["state"] == "merged", run
    assert (bench.repo / "answer.txt").read_text().strip() == "Z1a2b"


def test_a_run_whose_agent_never_learns_says_so_and_the_prompt_is_bounded(bench: Bench) -> None:
    # The agent ignores everything; the test floods escapes and a long line before failing.
    agent = ["sh", "-c", "echo guess > answer.txt; git add answer.txt; git commit -q -m g || true"]
    flood = [
        "sh",
        "-c",
        r'printf "\033]0;title\007\033[31mred\033[0m\n"; head -c 300000 /dev/zero | tr "\0" x; '
        'echo; echo "FAILED: answer.txt WANT=Z1a2b" >&2; exit 1',
    ]
    stages = flow()
    stages["default"][1]["command"] = flood
    bench.setup(sloop_toml(agent, flows=stages), {"answer": ticket_text("Answer")})
    bench.start()
    bench.post("answer")
    run = bench.wait_run("answer#1", timeout=90)
    assert run["state"] == "needs_review", run
    # The run's reason quotes the test's own last line after the rule (issue 33).
    assert "its return_to 'implement' budget of 2 is spent" in run["reason"], run
    assert "FAILED: answer.txt WANT=Z1a2b" in run["reason"], run
    prompts = sorted((bench.state_dir / "runs" / run["id"]).glob("prompt-implement-*.md"))
    assert [p.name for p in prompts] == [f"prompt-implement-{n}.md" for n in (1, 2, 3)]
    first, second = prompts[0].read_text(), prompts[1].read_text()
    assert "What happened since your last execution" not in first
    assert "## What happened since your last execution" in second
    assert "FAILED: answer.txt WANT=Z1a2b" in second
    assert "\x1b" not in second
    assert "\x07" not in second
    assert len(second.encode()) < 40_000  # bounded whatever the test printed
    assert "stage 'test' execution 1 failed" in second
    # The third execution is told about the second test failure, not the first again.
    third = prompts[2].read_text()
    assert "stage 'test' execution 2 failed" in third
    assert "stage 'test' execution 1 failed" not in third
