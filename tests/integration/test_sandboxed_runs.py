"""Runs under the sandbox's rules: nothing left behind, nothing empty merged, no silent downgrade.

Each test walks a real run through a real daemon and checks what the run row,
main and the dashboard say afterwards.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import Bench, read_json, sloop_toml, stage_table, ticket_text
from tests.support.daemon import git

LEAVE_DIRTY = (
    "import subprocess\n"
    "open('kept.txt', 'w').write('committed\\n')\n"
    "ident = ['-c', 'user.name=a', '-c', 'user.email=a@x']\n"
    "subprocess.run(['git', *ident, 'add', 'kept.txt'], check=True)\n"
    "subprocess.run(['git', *ident, 'commit', '-q', '-m', 'kept'], check=True)\n"
    "open('forgotten.txt', 'w').write('never committed\\n')\n"
    "open('README.md', 'a').write('edited\\n')\n"
)


def flow(*stages: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {"default": [*stages, {"name": "sync", "action": "sync"}, MERGE]}


MERGE: dict[str, Any] = {"name": "merge", "action": "ff_only"}


@pytest.mark.on_ray
def test_uncommitted_changes_fail_the_stage_naming_the_paths(bench: Bench) -> None:
    (bench.repo / "README.md").write_text("readme\n")
    git(bench.repo, "add", "README.md")
    git(bench.repo, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "readme")
    agent = {"name": "implement", "action": "agent", "command": [sys.executable, "-c", LEAVE_DIRTY]}
    bench.setup(sloop_toml(bench.argv(), flows=flow(agent)), {"dirty": ticket_text("Dirty")})
    bench.start()
    before = bench.rev("main")
    bench.post("dirty")
    run = bench.wait_run("dirty#1")

    assert run["state"] == "failed", run
    implement = run["stages"][0]
    assert implement["state"] == "failed"
    assert "uncommitted changes" in implement["reason"], implement
    assert "forgotten.txt" in implement["reason"]
    assert "README.md" in implement["reason"]
    assert bench.rev("main") == before
    # Sloop found the cause itself: a class of its own, not the vendor's "unknown".
    assert run["classification"] == "uncommitted_changes", run
    assert run["diagnosis"]["detail"] == implement["reason"], run["diagnosis"]


@pytest.mark.on_ray
def test_commit_auto_commits_what_the_agent_left(bench: Bench) -> None:
    (bench.repo / "README.md").write_text("readme\n")
    git(bench.repo, "add", "README.md")
    git(bench.repo, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "-m", "readme")
    agent = {
        "name": "implement",
        "action": "agent",
        "commit": "auto",
        "command": [sys.executable, "-c", LEAVE_DIRTY],
    }
    bench.setup(sloop_toml(bench.argv(), flows=flow(agent)), {"auto": ticket_text("Auto")})
    bench.start()
    bench.post("auto")
    run = bench.wait_run("auto#1")

    assert run["state"] == "merged", run
    files = git(bench.repo, "ls-tree", "-r", "--name-only", "main").split()
    assert {"kept.txt", "forgotten.txt"} <= set(files)
    assert (bench.repo / "README.md").read_text() == "readme\nedited\n"
    subject = git(bench.repo, "log", "-1", "--format=%s", "main")
    assert subject == "sloop: auto (T1), stage 'implement' execution 1", subject
    assert run["stages"][0]["commit"] == bench.rev("main")


@pytest.mark.on_ray
def test_an_agent_that_did_nothing_is_not_merged(bench: Bench) -> None:
    idle = {"name": "implement", "action": "agent", "command": bench.argv("--say", "done!")}
    bench.setup(sloop_toml(bench.argv(), flows=flow(idle)), {"idle": ticket_text("Idle")})
    bench.start()
    before = bench.rev("main")
    bench.post("idle")
    run = bench.wait_run("idle#1")

    assert run["state"] == "failed", run
    assert run["halt"] == "fail_action", run
    # One try: a return to sync cannot give the branch a commit.
    assert stage_table(run) == [
        ("implement", 1, "passed"),
        ("sync", 1, "passed"),
        ("merge", 1, "failed"),
    ]
    assert run["stages"][2]["reason"].startswith("nothing to merge"), run["stages"][2]
    assert bench.rev("main") == before


@pytest.mark.on_ray
def test_allow_empty_merges_an_empty_branch(bench: Bench) -> None:
    idle = {"name": "implement", "action": "agent", "command": bench.argv("--say", "done!")}
    merge = {"name": "merge", "action": "ff_only", "allow_empty": True}
    flows: dict[str, list[dict[str, Any]]] = {"default": [idle, merge]}
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"idle": ticket_text("Idle")})
    bench.start()
    bench.post("idle")
    run = bench.wait_run("idle#1")
    assert run["state"] == "merged", run


def test_sandbox_none_runs_unsandboxed_and_says_so(bench: Bench) -> None:
    agent = {
        "name": "implement",
        "action": "agent",
        "command": bench.argv("--env-dump", bench.flag("env.json"), "--write", "x.txt=x"),
    }
    config = sloop_toml(bench.argv(), flows=flow(agent), sandbox="none")
    bench.setup(config, {"plain": ticket_text("Plain")})
    bench.start()
    warning = bench.dashboard()["daemon"]["sandbox"]
    assert warning["mode"] == "none", warning
    assert "unsandboxed" in warning["warning"], warning
    bench.post("plain")
    run = bench.wait_run("plain#1")
    assert run["state"] == "merged", run
    env = read_json(bench.path("env.json"))
    # Unsandboxed, the agent sees host paths; still only the allowlisted environment.
    assert env["cwd"] == str(bench.worktree_of("R1"))
    assert env["SLOOP_SOCKET"] == str(bench.root / "s" / "w" / "R1.sock")


def test_without_bubblewrap_no_stage_starts(bench: Bench, tmp_path: Path) -> None:
    # A PATH with git (and the shell git needs) but no bwrap on it.
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("git", "sh"):
        found = shutil.which(tool)
        assert found is not None
        os.symlink(found, tools / tool)
    bench.env["PATH"] = str(tools)
    agent = {"name": "implement", "action": "agent", "command": bench.argv("--write", "x.txt=x")}
    bench.setup(sloop_toml(bench.argv(), flows=flow(agent)), {"boxed": ticket_text("Boxed")})
    bench.start()
    sandbox = bench.dashboard()["daemon"]["sandbox"]
    assert sandbox["mode"] == "bwrap", sandbox
    assert sandbox["available"] is False, sandbox
    assert "bubblewrap" in sandbox["warning"], sandbox
    bench.post("boxed")
    run = bench.wait_run("boxed#1")

    assert run["state"] == "failed", run
    assert "bubblewrap" in run["reason"], run["reason"]
    assert 'sandbox = "none"' in run["reason"], run["reason"]
    assert [r["state"] for r in run["stages"]] == ["pending", "pending", "pending"], run
    assert not bench.worktree_of("R1").exists()  # refused before anything was prepared


PANEL_SEAT = (
    "import json, os, socket, sys\n"
    "def call(verb, args):\n"
    "    s = socket.socket(socket.AF_UNIX); s.connect(os.environ['SLOOP_SOCKET'])\n"
    "    m = {'v': 1, 'id': 1, 'verb': verb, 'token': os.environ['SLOOP_TOKEN'], 'args': args}\n"
    "    s.sendall(json.dumps(m).encode() + b'\\n'); return json.loads(s.makefile().readline())\n"
    "seen = call('show', {})\n"
    "call('verdict', {'verdict': sys.argv[1], 'reason': 'my own view ' + sys.argv[1]})\n"
    "json.dump(seen, open(sys.argv[2], 'w'))\n"
)


@pytest.mark.on_ray
def test_panel_seats_do_not_see_each_others_verdicts(bench: Bench) -> None:
    seats = [
        {"target": "first", "command": [sys.executable, "-c", PANEL_SEAT, "fail", bench.flag("0")]},
        {
            "target": "second",
            "command": [sys.executable, "-c", PANEL_SEAT, "pass", bench.flag("1")],
        },
    ]
    review = {
        "name": "review",
        "action": "agent",
        "result_check": "panel",
        "quorum": 1,
        "reviewers": seats,
    }
    implement = {"name": "implement", "action": "agent", "command": bench.argv("--write", "y=y")}
    bench.setup(sloop_toml(bench.argv(), flows=flow(implement, review)), {"p": ticket_text("P")})
    bench.start()
    bench.post("p")
    run = bench.wait_run("p#1")
    assert run["state"] == "merged", run

    second = read_json(bench.path("1"))["data"]["value"]
    row = next(r for r in second["stages"] if r["stage"] == "review")
    first_seat = next(s for s in row["reviewers"] if s["reviewer"] == 0)
    # The first seat had reported before the second started; the second did not see it.
    assert first_seat["verdict"] is None, row
    assert first_seat["reason"] is None, row
    final = next(r for r in run["stages"] if r["stage"] == "review")
    assert [s["verdict"] for s in final["reviewers"]] == ["fail", "pass"]


@pytest.mark.on_ray
def test_an_exit_code_over_128_is_not_read_as_a_signal_unless_one_ended_it(
    bench: Bench,
) -> None:
    """bwrap reports a death by signal N as 128+N; Gemini CLI exits 173 for HTTP 429."""
    exits = {"name": "implement", "action": "agent", "command": [sys.executable, "-c", "exit(173)"]}
    segv = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    crash = {"name": "implement", "action": "agent", "command": [sys.executable, "-c", segv]}
    flows = {"exits": [exits, MERGE], "crash": [crash, MERGE]}
    bench.setup(
        sloop_toml(bench.argv(), flows=flows),
        {"exits": ticket_text("Exits", flow="exits"), "crash": ticket_text("Crash", flow="crash")},
    )
    bench.start()
    bench.post("exits")
    bench.post("crash")

    exited = bench.wait_run("exits#1")
    assert exited["state"] == "failed", exited
    assert exited["stages"][0]["exit_code"] == 173, exited["stages"][0]
    assert exited["agent_exit_code"] == 173, exited
    crashed = bench.wait_run("crash#1")
    assert crashed["stages"][0]["exit_code"] == -signal.SIGSEGV, crashed["stages"][0]
