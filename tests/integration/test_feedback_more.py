"""A run sent back learns why, through the real daemon (issue 33, "The agent is told why").

The agents here act only on what they are told: the implementer (``LEARNER``) reads
its prompt, or only ``sloopctl brief --json``'s ``feedback``, and writes ``guess``
until it finds ``WANT=<value>`` there; the resolver (``RESOLVER``) takes main's side
of a conflict from the hunks it is shown.  On 0.8.0 they were told nothing, so every
run here ended ``needs_review`` or ``failed`` instead of merging on its second try.
Both record what they were told in the flags folder (``<stage>-<attempt>[-<seat>]``),
so a test can read the prompt and the brief an execution saw.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_agent_presets import RUN_TIMEOUT_S, on_path, preset_toml
from tests.support.agents import Bench, sloop_toml, stage_table, ticket_text, toml_value
from tests.support.standins import anthropic, gemini, openai

HEADING = "## What happened since your last execution"
WANT = "Z1a2b"

# Records its prompt and brief, then writes the value it was told (or "guess").
LEARNER = r"""
import json, os, re, subprocess, sys

source, flags = sys.argv[1], sys.argv[2]
seat = sys.argv[3] if len(sys.argv) > 3 else None
name = f"{os.environ['SLOOP_STAGE']}-{os.environ['SLOOP_ATTEMPT']}" + (f"-{seat}" if seat else "")
prompt = open(os.environ["SLOOP_PROMPT_FILE"], encoding="utf-8").read()
asked = subprocess.run(["sloopctl", "brief", "--json"], capture_output=True, text=True)
with open(os.path.join(flags, name + ".md"), "w", encoding="utf-8") as f:
    f.write(prompt)
with open(os.path.join(flags, name + ".json"), "w", encoding="utf-8") as f:
    f.write(asked.stdout)
if seat is not None:  # a panel seat: records what it was told, and passes
    verdict = ["sloopctl", "verdict", "pass", "--reason", f"seat {seat} agrees"]
    sys.exit(subprocess.run(verdict).returncode)
if source == "prompt":
    told = prompt
else:  # only the structured feedback: the reasons and lines its entries carry
    told = ""
    for entry in json.loads(asked.stdout)["data"].get("feedback", []):
        told += " ".join(seat["reason"] or "" for seat in entry["seats"])
        told += " ".join((entry["output"] or {}).get("lines", []))
found = re.search(r"WANT=([A-Za-z0-9]+)", told)
with open("answer.txt", "w") as f:
    f.write((found.group(1) if found else "guess") + "\n")
identity = ["-c", "user.name=agent", "-c", "user.email=agent@example.invalid"]
subprocess.run(["git", "add", "answer.txt"], check=True)
subprocess.run(["git", *identity, "commit", "-q", "-m", "answer"], check=False)
"""

# A one-seat reviewer that says what it wants in its reason.
REVIEWER = [
    "sh",
    "-c",
    f'if [ "$(cat answer.txt 2>/dev/null)" = {WANT} ]; '
    'then sloopctl verdict pass --reason "answer.txt is right"; '
    f'else sloopctl verdict fail --reason "answer.txt must say WANT={WANT}"; fi',
]


def install(bench: Bench, name: str, source: str) -> Path:
    path = bench.root / "agents" / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    return path


def learner(bench: Bench, source: str, *seat: str) -> list[str]:
    path = install(bench, "learner", LEARNER)
    return [sys.executable, str(path), source, str(bench.root / "flags"), *seat]


def told(bench: Bench, name: str) -> tuple[str, dict[str, Any]]:
    """The prompt and the brief (its data) the execution ``name`` recorded."""
    prompt = bench.path(f"{name}.md").read_text(encoding="utf-8")
    envelope = json.loads(bench.path(f"{name}.json").read_text(encoding="utf-8"))
    assert envelope["ok"] is True, envelope
    brief: dict[str, Any] = envelope["data"]
    return prompt, brief


def panel_flow(reviewers: list[dict[str, Any]], quorum: int) -> dict[str, list[dict[str, Any]]]:
    return {
        "default": [
            {"name": "implement", "action": "agent"},
            {
                "name": "review",
                "action": "agent",
                "result_check": "panel",
                "quorum": quorum,
                "reviewers": reviewers,
                "return_to": "implement",
                "returns": 2,
            },
            {"name": "sync", "action": "sync"},
            {"name": "merge", "action": "ff_only", "return_to": "sync", "returns": 3},
        ]
    }


def merged_on_the_second_execution(bench: Bench, ref: str) -> dict[str, Any]:
    run = bench.wait_run(ref, timeout=90)
    assert run["state"] == "merged", (run["reason"], stage_table(run))
    assert stage_table(run)[:4] == [
        ("implement", 1, "passed"),
        ("review", 1, "failed"),
        ("implement", 2, "passed"),
        ("review", 2, "passed"),
    ], stage_table(run)
    assert (bench.repo / "answer.txt").read_text().strip() == WANT
    return run


def test_a_reviewers_reason_reaches_the_implementers_prompt(bench: Bench) -> None:
    reviewers = [{"target": "claude", "command": REVIEWER}]
    config = sloop_toml(learner(bench, "prompt"), flows=panel_flow(reviewers, 1))
    bench.setup(config, {"answer": ticket_text("Answer")})
    bench.start()
    bench.post("answer")
    merged_on_the_second_execution(bench, "answer#1")

    first, _ = told(bench, "implement-1")
    second, brief = told(bench, "implement-2")
    assert HEADING not in first
    assert HEADING in second
    assert "stage 'review' execution 1 failed" in second
    assert f"fail: answer.txt must say WANT={WANT}" in second
    assert [entry["kind"] for entry in brief["feedback"]] == ["panel"]


def test_a_reviewers_reason_reaches_the_implementers_brief(bench: Bench) -> None:
    reviewers = [{"target": "claude", "command": REVIEWER}]
    config = sloop_toml(learner(bench, "brief"), flows=panel_flow(reviewers, 1))
    bench.setup(config, {"answer": ticket_text("Answer")})
    bench.start()
    bench.post("answer")
    run = merged_on_the_second_execution(bench, "answer#1")

    _, first = told(bench, "implement-1")
    _, second = told(bench, "implement-2")
    assert "feedback" not in first  # present when there is some
    [entry] = second["feedback"]
    assert entry["run"] == run["id"]
    assert (entry["stage"], entry["attempt"], entry["kind"]) == ("review", 1, "panel")
    assert entry["output"] is None
    assert entry["hunks"] is None
    assert [(s["target"], s["verdict"], s["reason"]) for s in entry["seats"]] == [
        ("claude", "fail", f"answer.txt must say WANT={WANT}")
    ]


# Takes main's side of every conflict its prompt shows, keeps its own work beside it.
RESOLVER = r"""
import os, subprocess, sys, time

flags = sys.argv[1]
name = f"{os.environ['SLOOP_STAGE']}-{os.environ['SLOOP_ATTEMPT']}"
prompt = open(os.environ["SLOOP_PROMPT_FILE"], encoding="utf-8").read()
asked = subprocess.run(["sloopctl", "brief", "--json"], capture_output=True, text=True)
with open(os.path.join(flags, name + ".md"), "w", encoding="utf-8") as f:
    f.write(prompt)
with open(os.path.join(flags, name + ".json"), "w", encoding="utf-8") as f:
    f.write(asked.stdout)
if os.environ["SLOOP_ATTEMPT"] == "1":
    # Held until main has moved under it, then the line main also changes.
    while not os.path.exists(os.path.join(flags, "go")):
        time.sleep(0.02)
    text = "the agent's line\n"
else:
    # Every region of README.md, each side under the label its marker line names.
    sides, side, where = {}, None, None
    for line in prompt.splitlines():
        if line.startswith("--- "):
            where = line[4:]
        elif where == "README.md" and line.startswith("<<<<<<< "):
            side = line[8:]
        elif where == "README.md" and line == "=======" and side is not None:
            side = "other"
        elif where == "README.md" and line.startswith(">>>>>>> "):
            sides[line[8:]] = sides.pop("other", [])
            side = None
        elif side is not None:
            sides.setdefault(side, []).append(line)
    main = next((lines for label, lines in sides.items() if label.startswith("main")), None)
    text = "".join(line + "\n" for line in main) if main else "the agent's line\n"
with open("README.md", "w") as f:
    f.write(text)
with open("work.txt", "w") as f:
    f.write("work\n")
identity = ["-c", "user.name=agent", "-c", "user.email=agent@example.invalid"]
subprocess.run(["git", "add", "README.md", "work.txt"], check=True)
subprocess.run(["git", *identity, "commit", "-q", "-m", "work"], check=False)
"""


def conflicting_run(bench: Bench, mode: str, returns: int) -> dict[str, Any]:
    """A run whose implementer changes README.md's line while main changes it too."""
    resolver = install(bench, "resolver", RESOLVER)
    agent = [sys.executable, str(resolver), str(bench.root / "flags")]
    sync = {"name": "sync", "action": "sync", "mode": mode, "return_to": "implement"}
    flows: dict[str, list[dict[str, Any]]] = {
        "default": [
            {"name": "implement", "action": "agent"},
            {**sync, "returns": returns},
            {"name": "merge", "action": "ff_only", "return_to": "sync", "returns": 3},
        ]
    }
    (bench.repo / "README.md").write_text("the first line\n", encoding="utf-8")
    bench.setup(sloop_toml(agent, flows=flows), {"clash": ticket_text("Clash")})
    bench.start()
    bench.post("clash")
    bench.wait_stage_running("clash#1", "implement")
    bench.commit_on_main({"README.md": "main's line\n"})
    bench.release("go")
    return bench.wait_run("clash#1", timeout=90)


def told_the_conflict(bench: Bench, ours: str, theirs: str) -> None:
    """implement#2's prompt and brief show sync#1's paths and hunks, sides named."""
    prompt, brief = told(bench, "implement-2")
    assert "stage 'sync' execution 1 failed" in prompt
    assert "Paths: README.md" in prompt
    assert "The conflicting hunks of stage 'sync' execution 1" in prompt
    [entry] = brief["feedback"]
    assert (entry["kind"], entry["paths"]) == ("conflict", ["README.md"])
    hunks = entry["hunks"]
    assert hunks["clipped"] is False
    lines = hunks["lines"]
    assert lines[0] == "--- README.md"
    assert f"<<<<<<< {ours}" in lines
    assert f">>>>>>> {theirs}" in lines
    assert {"the agent's line", "main's line", "======="} <= set(lines)
    # The prompt fences the same lines, as data.
    fenced = "\n".join(lines)
    assert f"~~~~ the conflicting hunks of stage 'sync' execution 1\n{fenced}\n~~~~" in prompt


def test_an_agent_sent_back_by_a_sync_conflict_sees_the_hunks_and_resolves_them(
    bench: Bench,
) -> None:
    run = conflicting_run(bench, "merge", 2)
    assert run["state"] == "merged", (run["reason"], stage_table(run))
    assert stage_table(run) == [
        ("implement", 1, "passed"),
        ("sync", 1, "failed"),
        ("implement", 2, "passed"),
        ("sync", 2, "passed"),
        ("merge", 1, "passed"),
    ], stage_table(run)
    assert (bench.repo / "README.md").read_text() == "main's line\n"
    assert (bench.repo / "work.txt").read_text() == "work\n"
    told_the_conflict(bench, "the run's work", "main")


def test_a_rebase_conflicts_hunks_are_read_before_the_rebase_is_aborted(bench: Bench) -> None:
    """A rebase replays the agent's first commit again, so taking main's side in a new
    commit cannot mend it; what matters here is what the agent was shown."""
    run = conflicting_run(bench, "rebase", 1)
    assert stage_table(run)[:3] == [
        ("implement", 1, "passed"),
        ("sync", 1, "failed"),
        ("implement", 2, "passed"),
    ], stage_table(run)
    # In a rebase, git's "ours" is the commit rebased onto.
    told_the_conflict(bench, "main", "the run's work")


def test_a_new_run_after_a_failed_one_is_told_why_that_one_failed(bench: Bench) -> None:
    test = [
        "sh",
        "-c",
        f'if [ "$(cat answer.txt)" != {WANT} ]; then '
        f'echo "FAILED: answer.txt WANT={WANT} GOT=$(cat answer.txt)" >&2; exit 1; fi',
    ]
    flows: dict[str, list[dict[str, Any]]] = {
        "default": [
            {"name": "implement", "action": "agent"},
            {"name": "test", "action": "command", "command": test, "network": False},
            {"name": "sync", "action": "sync"},
            {"name": "merge", "action": "ff_only", "return_to": "sync", "returns": 3},
        ]
    }
    bench.setup(sloop_toml(learner(bench, "prompt"), flows=flows), {"answer": ticket_text("A")})
    bench.start()
    bench.post("answer")
    first = bench.wait_run("answer#1", timeout=60)
    assert first["state"] in ("failed", "needs_review"), first
    prompt, brief = told(bench, "implement-1")
    assert HEADING not in prompt
    assert "feedback" not in brief

    bench.ok("run", {"ref": "answer"})
    second = bench.wait_run("answer#2", timeout=60)
    assert second["state"] == "merged", (second["reason"], stage_table(second))
    assert (bench.repo / "answer.txt").read_text().strip() == WANT
    prompt, brief = told(bench, "implement-1")  # the second run's: rewritten
    assert f"the ticket's previous run {first['id']}: stage 'test' execution 1 failed" in prompt
    assert f"FAILED: answer.txt WANT={WANT} GOT=guess" in prompt
    [entry] = brief["feedback"]
    assert (entry["run"], entry["kind"], entry["stage"]) == (first["id"], "previous_run", "test")


def test_a_panel_seat_is_told_nothing_of_another_seat_of_its_execution(bench: Bench) -> None:
    """Seat 0 prints and fails with words of its own; seat 1 records its prompt and brief.
    The implementer sent back is told seat 0's reason; seat 1, in the same execution, is
    not (nor, on the second execution, of seat 0's pass)."""
    said = (
        'echo "SEAT0-OUTPUT-$SLOOP_ATTEMPT"; '
        f'if [ "$(cat answer.txt 2>/dev/null)" = {WANT} ]; '
        'then sloopctl verdict pass --reason "SEAT0-PASS-$SLOOP_ATTEMPT"; '
        f'else sloopctl verdict fail --reason "SEAT0-FAIL-$SLOOP_ATTEMPT WANT={WANT}"; fi'
    )
    reviewers = [
        {"target": "claude", "command": ["sh", "-c", said]},
        {"target": "codex", "command": learner(bench, "prompt", "seat1")},
    ]
    config = sloop_toml(learner(bench, "prompt"), flows=panel_flow(reviewers, 2))
    bench.setup(config, {"answer": ticket_text("Answer")})
    bench.start()
    bench.post("answer")
    run = merged_on_the_second_execution(bench, "answer#1")

    implementer, _ = told(bench, "implement-2")
    assert "SEAT0-FAIL-1" in implementer  # what isolation keeps from seat 1 is told here
    for attempt in (1, 2):
        prompt, brief = told(bench, f"review-{attempt}-seat1")
        seen = prompt + json.dumps(brief)
        assert f"SEAT0-OUTPUT-{attempt}" not in seen
        assert f"SEAT0-FAIL-{attempt}" not in seen
        assert f"SEAT0-PASS-{attempt}" not in seen
        assert brief["stage"]["name"] == "review"
    review = [row for row in run["stages"] if row["stage"] == "review"]
    assert review[0]["reviewers"][0]["reason"].startswith("SEAT0-FAIL-1")


def test_hostile_output_stays_bounded_and_stripped_in_the_prompt_and_the_brief(
    bench: Bench,
) -> None:
    """The test prints one 10 MB line, escapes (CSI, an OSC title), then its failure."""
    flood = [
        "sh",
        "-c",
        'head -c 10000000 /dev/zero | tr "\\0" x; echo; '
        r'printf "\033[31mred\033[0m \033]0;title\007 plain\n"; '
        f'if [ "$(cat answer.txt)" != {WANT} ]; then '
        f'echo "FAILED: answer.txt WANT={WANT}" >&2; exit 1; fi',
    ]
    flows: dict[str, list[dict[str, Any]]] = {
        "default": [
            {"name": "implement", "action": "agent"},
            {
                "name": "test",
                "action": "command",
                "command": flood,
                "network": False,
                "return_to": "implement",
                "returns": 2,
            },
            {"name": "sync", "action": "sync"},
            {"name": "merge", "action": "ff_only", "return_to": "sync", "returns": 3},
        ]
    }
    bench.setup(sloop_toml(learner(bench, "brief"), flows=flows), {"flood": ticket_text("F")})
    bench.start()
    bench.post("flood")
    run = bench.wait_run("flood#1", timeout=120)
    assert run["state"] == "merged", (run["reason"], stage_table(run))
    assert stage_table(run)[:4] == [
        ("implement", 1, "passed"),
        ("test", 1, "failed"),
        ("implement", 2, "passed"),
        ("test", 2, "passed"),
    ]

    prompt, brief = told(bench, "implement-2")
    raw = bench.path("implement-2.json").read_text(encoding="utf-8")
    for seen in (prompt, raw):
        assert len(seen.encode()) < 40_000, len(seen.encode())
        for escape in ("\x1b", "\\u001b", "\x07", "\\u0007"):
            assert escape not in seen
    assert HEADING in prompt
    assert f"FAILED: answer.txt WANT={WANT}" in prompt
    [entry] = brief["feedback"]
    lines = entry["output"]["lines"]
    assert "red  plain" in lines  # the escapes went, the words stayed
    assert all(len(line) <= 1000 for line in lines), [len(line) for line in lines]
    assert any(line.startswith("xxxx") for line in lines)  # the flood, cut to a line
    # Its last line on stderr.  The two pipes are read apart, so what stdout still held when
    # it was written (the flood's last pieces, at most a pipe's worth, and the escapes' line)
    # may be stored after it; nothing else may.  (Seen under load: three lines after it.)
    verdict = f"FAILED: answer.txt WANT={WANT}"
    assert verdict in lines
    after = lines[lines.index(verdict) + 1 :]
    assert all(line == "red  plain" or set(line) <= {"x", "…"} for line in after), after
    assert len(after) <= 4, after


# --- the real CLIs' presets --------------------------------------------------------

# Each execution of the CLI's shell commits one more line; the test wants two.
TURN = "echo turn >> turns.txt && git add turns.txt && git commit -q -m turn"
TURNS_TEST = [
    "sh",
    "-c",
    f'if [ "$(wc -l < turns.txt)" -lt 2 ]; then echo "FAILED: turns.txt WANT={WANT}" >&2; '
    "exit 1; fi",
]
PRESET_FLOW = f"""
[[flows.default.stages]]
name = "implement"
action = "agent"

[[flows.default.stages]]
name = "test"
action = "command"
command = {toml_value(TURNS_TEST)}
network = false
return_to = "implement"
returns = 2

[[flows.default.stages]]
name = "sync"
action = "sync"

[[flows.default.stages]]
name = "merge"
action = "ff_only"
"""


@contextmanager
def vendor_api(bench: Bench, preset: str) -> Iterator[Callable[[], list[Any]]]:
    """The preset's stand-in API, running one ``TURN`` a session; yields what it was asked
    (each model request's body, in order)."""
    if preset == "claude":
        script = [anthropic.bash(TURN, "Count a turn"), anthropic.text("Done.")]
        with anthropic.AnthropicStandIn(scripts=[script]) as claude:
            key, url = "sk-ant-api03-sloop-stand-in", claude.url
            bench.env.update(ANTHROPIC_API_KEY=key, ANTHROPIC_BASE_URL=url)
            yield lambda: [r.body for r in claude.message_requests()]
    elif preset == "codex":
        steps: list[openai.Step] = [openai.Shell(TURN), openai.Say("Done.")]
        with openai.OpenAIStandin(script=steps) as codex:
            bench.env.update(
                OPENAI_API_KEY="sk-standin-key",
                OPENAI_BASE_URL=codex.base_url,
                CODEX_MODEL="gpt-5.5",
            )
            yield lambda: [r.body for r in codex.turns()]
    else:
        with gemini.GeminiStandIn(command=TURN) as google:
            bench.env.update(GEMINI_API_KEY="standin-key", GOOGLE_GEMINI_BASE_URL=google.url)
            yield lambda: [r.body for r in google.model_calls()]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
@pytest.mark.parametrize("preset", ["claude", "codex", "gemini"])
def test_a_presets_re_entered_execution_sends_the_section_to_the_vendor(
    bench: Bench, preset: str
) -> None:
    """What the stand-in API receives from the CLI's second execution holds the section
    (this flow merges on 0.8.0 too: the turns count, not what the CLI was told)."""
    with vendor_api(bench, preset) as asked:
        on_path(bench, [preset])
        bench.setup(preset_toml(bench, preset, [preset], PRESET_FLOW), {"turns": ticket_text("T")})
        bench.start()
        bench.post("turns")
        run = bench.wait_run("turns#1", timeout=RUN_TIMEOUT_S)
        bodies = [json.dumps(body) for body in asked()]
    assert run["state"] == "merged", (run["reason"], stage_table(run))
    assert stage_table(run)[:4] == [
        ("implement", 1, "passed"),
        ("test", 1, "failed"),
        ("implement", 2, "passed"),
        ("test", 2, "passed"),
    ], stage_table(run)
    assert HEADING not in bodies[0]
    sent = [body for body in bodies if HEADING in body]
    assert sent, bodies[-1][:2000]
    assert "stage 'test' execution 1 failed" in sent[0]
    assert f"FAILED: turns.txt WANT={WANT}" in sent[0]
