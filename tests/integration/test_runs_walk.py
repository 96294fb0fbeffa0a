"""Runs walked through their flows by the real daemon, with script agents.

Each test writes a ``sloop.toml`` whose agent is the script agent of
``tests.support.agents``, posts tickets, and polls ``show`` until the run is
terminal; the assertions read what the protocol promises (DESIGN "States",
"The walk"; protocol "Read a ticket's run history", "Explain one run"), and
git for what the run did to the repository.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import (
    Bench,
    read_json,
    sloop_toml,
    stage_table,
    ticket_text,
)
from tests.support.daemon import git, new_daemon, wait_until
from tests.support.gitrepo import in_progress

# Stage row keys the protocol lists ("Explain one run"); rows may gain fields, never lose these.
SANDBOX_CHECKOUT = "/sloop/work"  # where every sandbox sees its run's checkout
STAGE_ROW_KEYS = frozenset(
    {
        "stage",
        "state",
        "attempt",
        "advisory",
        "started_at_ms",
        "finished_at_ms",
        "duration_ms",
        "exit_code",
        "verdict_source",
        "reason",
        "confidence",
        "silent_for_ms",
        "reviewers",
    }
)
RUN_KEYS = frozenset(
    {
        "id",
        "alias",
        "ticket",
        "attempt",
        "state",
        "terminal",
        "claimed_at_ms",
        "started_at_ms",
        "finished_at_ms",
        "agent_exit_code",
        "exit_code",
        "halt",
        "reason",
        "classification",
        "stall",
        "branch",
        "worktree",
        "stages",
    }
)
SUMMARY_KEYS = frozenset(
    {
        "id",
        "alias",
        "attempt",
        "state",
        "terminal",
        "started_at_ms",
        "finished_at_ms",
        "reason",
        "stall",
        "stages",
    }
)
# unreached and aborted: additive in 0.8.0.
COMPACT_STAGE_KEYS = frozenset(
    {"stage", "state", "attempt", "advisory", "silent_for_ms", "unreached", "aborted"}
)

SYNC: dict[str, Any] = {"name": "sync", "action": "sync"}
MERGE: dict[str, Any] = {"name": "merge", "action": "ff_only", "return_to": "sync", "returns": 3}


def agent_stage(bench: Bench, *options: str, name: str = "implement") -> dict[str, Any]:
    return {"name": name, "action": "agent", "command": bench.argv(*options)}


def command_stage(bench: Bench, name: str, *options: str, **keys: Any) -> dict[str, Any]:
    return {"name": name, "action": "command", "command": bench.argv(*options), **keys}


def row(value: dict[str, Any], stage: str, attempt: int) -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        r for r in value["stages"] if r["stage"] == stage and r["attempt"] == attempt
    ]
    assert len(found) == 1, value["stages"]
    return found[0]


@pytest.mark.on_ray
def test_ticket_merged_end_to_end(bench: Bench) -> None:
    # The operator's socket variable must not reach the agent.
    bench.env["SLOOP_OPERATOR_SOCKET"] = str(bench.root / "operator-elsewhere.sock")
    agent = bench.argv(
        "--env-dump",
        bench.flag("env-{run}.json"),
        "--say",
        "hello from {stage}#{attempt}",
        "--write",
        "one.txt=made by {run}",
        "{prompt}",
    )
    bench.setup(sloop_toml(agent), {"one": ticket_text("Make one", "Create one.txt please.")})
    bench.start()
    before = bench.rev("main")

    posted = bench.post("one")
    assert posted["trigger"] is not None
    run = bench.wait_run("one#1")

    assert set(run) >= RUN_KEYS, run
    assert run["id"] == "R1"
    assert run["alias"] == "one#1"
    assert run["attempt"] == 1
    assert run["ticket"] == posted["ticket"]["id"]
    assert run["state"] == "merged"
    assert run["terminal"] is True
    assert run["halt"] is None
    assert run["reason"] is None
    assert run["classification"] is None
    assert run["agent_exit_code"] == 0
    assert run["exit_code"] == 0
    assert run["branch"] == "sloop/one/1"
    assert run["claimed_at_ms"] <= run["started_at_ms"] <= run["finished_at_ms"]
    assert stage_table(run) == [
        ("implement", 1, "passed"),
        ("sync", 1, "passed"),
        ("merge", 1, "passed"),
    ]
    for stage_row in run["stages"]:
        assert set(stage_row) >= STAGE_ROW_KEYS, stage_row
        assert stage_row["advisory"] is False
        assert stage_row["reviewers"] == []
        assert stage_row["started_at_ms"] <= stage_row["finished_at_ms"]
        assert stage_row["duration_ms"] == stage_row["finished_at_ms"] - stage_row["started_at_ms"]
        assert stage_row["silent_for_ms"] is None  # nothing is running
    assert row(run, "implement", 1)["exit_code"] == 0
    assert row(run, "implement", 1)["verdict_source"] == "exit_code"

    # main advanced to the run's branch, which holds the agent's commit on top of the old main.
    main = bench.rev("main")
    assert main != before
    assert main == bench.rev("sloop/one/1")
    assert git(bench.repo, "merge-base", "--is-ancestor", before, main) == ""
    assert "agent R1 implement#1" in git(bench.repo, "log", "--format=%s", "main")
    assert (bench.repo / "one.txt").read_text() == "made by R1\n"  # the checkout moved along

    # The checkout is removed once the run is merged (the branch stays).
    worktree = bench.worktree_of("R1")
    assert run["worktree"] is None  # wait_run waited for the removal
    assert not worktree.exists()
    assert str(worktree) not in git(bench.repo, "worktree", "list")

    # The agent ran in its checkout (at /sloop/work in its sandbox), in its own process
    # group, with the run's environment.
    env = read_json(bench.path("env-R1.json"))
    assert env["cwd"] == SANDBOX_CHECKOUT
    assert env["pgid"] in (env["pid"], 1)  # its own group, or its sandbox's (led by pid 1)
    assert env["SLOOP_RUN"] == "R1"
    assert env["SLOOP_TICKET"] == run["ticket"]
    assert env["SLOOP_STAGE"] == "implement"
    assert env["SLOOP_ATTEMPT"] == "1"
    assert env["SLOOP_WORKTREE"] == SANDBOX_CHECKOUT
    assert env["SLOOP_SOCKET"]
    assert env["SLOOP_TOKEN"]
    assert "SLOOP_OPERATOR_SOCKET" not in env
    assert env["SLOOP_PROMPT_FILE"] == "/sloop/prompt.md"
    (prompt,) = env["argv_rest"]  # {prompt} is replaced by the rendered prompt
    assert "Make one" in prompt
    assert "Create one.txt please." in prompt
    # The run's own files (HOME, prompts) went with its checkout once it merged.
    assert not (bench.state_dir / "runs" / "R1").exists()

    # The ticket followed its run; the dashboard lists the run as recent.
    ticket = bench.ticket("one")
    assert ticket["state"] == "merged"
    assert [r["id"] for r in ticket["runs"]] == ["R1"]
    summary = ticket["runs"][0]
    assert set(summary) >= SUMMARY_KEYS, summary
    assert summary["state"] == "merged"
    assert summary["reason"] is None
    assert all(set(s) == COMPACT_STAGE_KEYS for s in summary["stages"]), summary
    assert stage_table(summary) == stage_table(run)
    dashboard = bench.dashboard()
    assert dashboard["runs"] == []
    assert [r["id"] for r in dashboard["recent"]] == ["R1"]

    assert bench.event_kinds("R1") == ["run_claimed", "run_started", "run_finished"]

    # The agent's output was captured, tagged with its stage execution.
    assert ("implement", 1, "stdout", "hello from implement#1") in bench.log_lines("R1")


@pytest.mark.on_ray
def test_exit_code_failure_then_next_attempt(bench: Bench) -> None:
    agent = bench.argv("--write", "one.txt=made by {run}", "--exit-run", "R1:3")
    bench.setup(sloop_toml(agent), {"one": ticket_text("One")})
    bench.start()
    bench.post("one")
    run = bench.wait_run("R1")

    assert run["state"] == "failed"
    assert run["halt"] == "fail_action"
    assert run["agent_exit_code"] == 3
    assert run["exit_code"] == 3
    assert "'implement'" in run["reason"], run
    assert "exited with code 3" in run["reason"], run
    assert stage_table(run) == [
        ("implement", 1, "failed"),
        ("sync", 0, "pending"),
        ("merge", 0, "pending"),
    ]
    implement = row(run, "implement", 1)
    assert implement["exit_code"] == 3
    assert implement["verdict_source"] == "exit_code"
    for pending in run["stages"][1:]:
        assert pending["started_at_ms"] is None
        assert pending["finished_at_ms"] is None
        assert pending["exit_code"] is None
        assert pending["duration_ms"] is None
    ticket = bench.ticket("one")
    assert ticket["state"] == "failed"
    assert ticket["waiting"]["reason"] == "terminal"
    # A failed run keeps its worktree for inspection.
    first_worktree = bench.worktree_of("R1")
    assert run["worktree"] == str(first_worktree)
    assert first_worktree.is_dir()
    assert bench.rev("main") != bench.rev("sloop/one/1")

    # `run` on the failed ticket starts attempt 2 on a new branch.
    queued = bench.ok("run", {"ref": "one"})
    assert queued["trigger"] is not None
    assert queued["ticket"]["state"] == "ready"
    second = bench.wait_run("one#2")
    assert second["id"] == "R2"
    assert second["attempt"] == 2
    assert second["alias"] == "one#2"
    assert second["branch"] == "sloop/one/2"
    assert second["state"] == "merged", second
    assert bench.rev("main") == bench.rev("sloop/one/2")
    # The old attempt's worktree was removed when the new attempt started.
    first = bench.show_run("R1")
    assert first is not None
    assert first["worktree"] is None
    assert first["state"] == "failed"
    assert not first_worktree.exists()

    ticket = bench.ticket("one")
    assert ticket["state"] == "merged"
    assert [(r["id"], r["alias"], r["attempt"]) for r in ticket["runs"]] == [
        ("R2", "one#2", 2),
        ("R1", "one#1", 1),
    ]
    assert [r["state"] for r in ticket["runs"]] == ["merged", "failed"]
    assert ticket["runs"][1]["reason"] == run["reason"]
    assert [r["id"] for r in bench.dashboard()["recent"]] == ["R2", "R1"]
    # A merged ticket takes no further attempt.
    assert bench.client.error("run", {"ref": "one"})["code"] == "conflict"


@pytest.mark.on_ray
def test_advisory_failure_stepped_over_and_flow_without_merge(bench: Bench) -> None:
    flows = {
        "default": [
            agent_stage(bench, "--write", "{ticket}.txt=x"),
            command_stage(
                bench, "lint", "--say", "lint complains", "--exit", "1", fail_action="continue"
            ),
            SYNC,
            MERGE,
        ],
        "nomerge": [
            agent_stage(bench, "--write", "{ticket}.txt=x"),
            command_stage(bench, "check"),
        ],
    }
    bench.setup(
        sloop_toml(bench.argv(), flows=flows),
        {"adv": ticket_text("Advisory"), "review": ticket_text("Review me", flow="nomerge")},
    )
    bench.start()
    bench.post("adv")
    bench.post("review")
    advisory = bench.wait_run("adv#1")
    review = bench.wait_run("review#1")

    assert advisory["state"] == "merged", advisory
    assert advisory["halt"] is None
    assert advisory["reason"] is None
    assert stage_table(advisory) == [
        ("implement", 1, "passed"),
        ("lint", 1, "failed"),
        ("sync", 1, "passed"),
        ("merge", 1, "passed"),
    ]
    lint = row(advisory, "lint", 1)
    assert lint["advisory"] is True
    assert lint["exit_code"] == 1
    assert [r["advisory"] for r in advisory["stages"]] == [False, True, False, False]
    assert bench.ticket("adv")["state"] == "merged"
    compact = bench.ticket("adv")["runs"][0]["stages"]
    assert compact[1] == {
        "stage": "lint",
        "state": "failed",
        "attempt": 1,
        "advisory": True,
        "silent_for_ms": None,
        "unreached": False,
        "aborted": False,
    }

    # A flow without a merge stage walked to its end: needs_review, no halt, a reason.
    assert review["state"] == "needs_review", review
    assert review["halt"] is None
    assert review["reason"]
    assert "review" in review["reason"]
    assert stage_table(review) == [("implement", 1, "passed"), ("check", 1, "passed")]
    assert bench.ticket("review")["state"] == "needs_review"
    assert review["worktree"] is not None
    assert Path(review["worktree"]).is_dir()


@pytest.mark.on_ray
def test_return_to_loop_passes_then_budget_exhausted(bench: Bench) -> None:
    implement = agent_stage(
        bench, "--say", "said by {stage}#{attempt}", "--write", "impl-{attempt}.txt=x"
    )
    flows = {
        # test fails until the second execution of implement wrote impl-2.txt.
        "default": [
            implement,
            command_stage(
                bench, "test", "--fail-unless", "impl-2.txt", return_to="implement", returns=2
            ),
            SYNC,
            MERGE,
        ],
        # test always fails; one return is allowed.
        "spent": [
            implement,
            command_stage(bench, "test", "--exit", "1", return_to="implement", returns=1),
            SYNC,
            MERGE,
        ],
    }
    bench.setup(
        sloop_toml(bench.argv(), flows=flows),
        {"loop": ticket_text("Loop"), "spend": ticket_text("Spend", flow="spent")},
    )
    bench.start()
    bench.post("loop")
    bench.post("spend")
    passing = bench.wait_run("loop#1")
    spent = bench.wait_run("spend#1")

    assert passing["state"] == "merged", passing
    # Stage rows come in walk order: each execution where the walk made it.
    assert stage_table(passing) == [
        ("implement", 1, "passed"),
        ("test", 1, "failed"),
        ("implement", 2, "passed"),
        ("test", 2, "passed"),
        ("sync", 1, "passed"),
        ("merge", 1, "passed"),
    ]
    assert row(passing, "test", 1)["exit_code"] == 1
    # Executions are in walk order: implement#2 ran after test#1 failed.
    assert (
        row(passing, "implement", 2)["started_at_ms"] >= row(passing, "test", 1)["finished_at_ms"]
    )
    assert passing["reason"] is None
    assert passing["halt"] is None
    summary = bench.ticket("loop")["runs"][0]
    assert [(s["stage"], s["attempt"]) for s in summary["stages"]] == [
        (s, a) for s, a, _ in stage_table(passing)
    ]
    # Output is tagged with the execution that wrote it.
    said = [
        (stage, attempt, text)
        for stage, attempt, stream, text in bench.log_lines(passing["id"])
        if stream == "stdout"
    ]
    assert said == [
        ("implement", 1, "said by implement#1"),
        ("implement", 2, "said by implement#2"),
    ]
    system = [text for _, _, stream, text in bench.log_lines(passing["id"]) if stream == "system"]
    assert "returning to 'implement'" in system, system

    assert spent["state"] == "needs_review", spent
    assert spent["halt"] == "return_budget_exhausted"
    assert "budget" in spent["reason"], spent
    assert "'test'" in spent["reason"], spent
    assert stage_table(spent) == [
        ("implement", 1, "passed"),
        ("test", 1, "failed"),
        ("implement", 2, "passed"),
        ("test", 2, "failed"),
        ("sync", 0, "pending"),
        ("merge", 0, "pending"),
    ]
    assert bench.ticket("spend")["state"] == "needs_review"

    # The needs_review run kept its worktree; gc removes it (the merged run's is gone already).
    assert passing["worktree"] is None
    kept = Path(spent["worktree"])
    assert kept.is_dir()
    assert bench.ok("gc") == {"removed": [spent["id"]]}
    assert not kept.exists()
    after = bench.show_run(spent["id"])
    assert after is not None
    assert after["worktree"] is None
    assert bench.ok("gc") == {"removed": []}


@pytest.mark.on_ray
def test_sync_conflict_fails_the_run(bench: Bench) -> None:
    flows = {
        "default": [
            agent_stage(
                bench, "--wait-for", bench.flag("go"), "--write", "README.md=the agent's line"
            ),
            SYNC,
            {"name": "merge", "action": "ff_only"},
        ]
    }
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"clash": ticket_text("Clash")})
    bench.start()
    bench.post("clash")
    bench.wait_stage_running("clash#1", "implement")
    # main changes the same file while the agent works.
    main_commit = bench.commit_on_main({"README.md": "main's line\n"})
    bench.release("go")
    run = bench.wait_run("clash#1")

    assert run["state"] == "failed", run
    assert run["halt"] == "fail_action", run
    assert stage_table(run) == [
        ("implement", 1, "passed"),
        ("sync", 1, "failed"),
        ("merge", 0, "pending"),
    ]
    sync = row(run, "sync", 1)
    assert "README.md" in sync["reason"], sync
    assert "conflict" in sync["reason"], sync
    assert "'sync'" in run["reason"], run
    assert "README.md" in run["reason"], run
    assert bench.ticket("clash")["state"] == "failed"
    # main is untouched; the kept worktree is clean, with the agent's work and no merge half done.
    assert bench.rev("main") == main_commit
    worktree = Path(run["worktree"])
    assert in_progress(worktree) == []
    assert (worktree / "README.md").read_text() == "the agent's line\n"
    assert git(worktree, "status", "--porcelain", "--untracked-files=no") == ""


def test_sync_in_rebase_mode_replays_the_work_on_main_or_names_the_conflict(
    bench: Bench,
) -> None:
    """``mode = "rebase"`` (replayed, as a merge is computed, in the daemon's scratch
    repository): work beside a main that moved merges as a line of commits on main, with
    no merge commit; work that clashes with main fails the stage naming the path, main
    untouched."""
    rebase = {"name": "sync", "action": "sync", "mode": "rebase"}
    flows = {
        "default": [
            agent_stage(bench, "--wait-for", bench.flag("go"), "--write", "beside.txt=work"),
            rebase,
            MERGE,
        ],
        "clash": [
            agent_stage(
                bench, "--wait-for", bench.flag("go"), "--write", "README.md=the agent's line"
            ),
            rebase,
            MERGE,
        ],
    }
    tickets = {"beside": ticket_text("Beside"), "clash": ticket_text("Clash", flow="clash")}
    bench.setup(sloop_toml(bench.argv(), flows=flows, parallel=2), tickets)
    bench.start()
    bench.post("beside")
    bench.post("clash")
    bench.wait_stage_running("beside#1", "implement")
    bench.wait_stage_running("clash#1", "implement")
    moved = bench.commit_on_main({"README.md": "main's line\n"})
    bench.release("go")
    beside, clash = bench.wait_run("beside#1"), bench.wait_run("clash#1")

    assert beside["state"] == "merged", beside
    tip = bench.rev("main")
    assert git(bench.repo, "rev-list", "--parents", "-n", "1", tip).split()[1:] == [moved]
    assert git(bench.repo, "show", f"{tip}:beside.txt") == "work"

    assert clash["state"] == "failed", clash
    sync = row(clash, "sync", 1)
    assert "rebasing the branch onto main conflicts in: README.md" in sync["reason"], sync
    assert bench.rev("main") == tip  # only the clean run moved it
    assert git(bench.repo, "show", f"{tip}:README.md") == "main's line"


@pytest.mark.on_ray
def test_main_moved_between_sync_and_merge(bench: Bench) -> None:
    flows = {
        "default": [
            agent_stage(bench, "--write", "work.txt=the agent's work"),
            SYNC,
            # Holds until the test moved main (first execution) or at once (second).
            command_stage(bench, "bump", "--wait-for", bench.flag("go-{attempt}")),
            MERGE,
        ]
    }
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"moving": ticket_text("Moving main")})
    bench.start()
    bench.post("moving")
    bench.wait_stage_running("moving#1", "bump")
    bench.commit_on_main({"moved.txt": "main moved\n"}, "main moved during the run")
    bench.release("go-2")
    bench.release("go-1")
    run = bench.wait_run("moving#1")

    assert run["state"] == "merged", run
    # 0.9: main moved outside the merge queue, so the candidate is rebuilt on it before
    # the merge (no merge execution fails); the first bump either passed on the stale
    # candidate or was stopped by the rebuild (ended_by "rebuilt"), spending no returns.
    table = stage_table(run)
    assert table[:2] == [("implement", 1, "passed"), ("sync", 1, "passed")], table
    first_bump = row(run, "bump", 1)
    assert first_bump["state"] == "passed" or first_bump["ended_by"] == "rebuilt", first_bump
    assert table[3:] == [("sync", 2, "passed"), ("bump", 2, "passed"), ("merge", 1, "passed")]
    assert row(run, "sync", 2)["started_at_ms"] >= first_bump["finished_at_ms"]
    assert row(run, "merge", 1)["started_at_ms"] >= row(run, "bump", 2)["finished_at_ms"]
    # main holds both the commit that moved it and the agent's work: the commit sync#2 made.
    assert bench.rev("main") == bench.rev("sloop/moving/1") == row(run, "merge", 1)["commit"]
    assert row(run, "sync", 2)["commit"] == row(run, "merge", 1)["commit"]
    assert (bench.repo / "moved.txt").exists()
    assert (bench.repo / "work.txt").exists()


def corrupt_run(bench: Bench) -> tuple[dict[str, Any], str]:
    """A run whose stage log was tampered with mid-stage; its detail and main before it."""
    flows = {"default": [agent_stage(bench, "--wait-for", bench.flag("go")), SYNC, MERGE]}
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"tamper": ticket_text("Tamper")})
    bench.start()
    before = bench.rev("main")
    bench.post("tamper")
    bench.wait_stage_running("tamper#1", "implement")
    # A row the flow cannot explain: a stage it does not have, started mid-execution.
    with bench.store() as conn, conn:
        conn.execute(
            "INSERT INTO stage_log (run, seq, kind, stage, attempt, seat, at_ms, data) "
            "SELECT 'R1', max(seq) + 1, 'stage_started', 'bogus', 1, NULL, max(at_ms), '{}' "
            "FROM stage_log WHERE run = 'R1'"
        )
    bench.release("go")
    return bench.wait_run("R1"), before


def test_tampered_stage_log_is_corrupt(bench: Bench) -> None:
    run, before = corrupt_run(bench)
    assert run["state"] == "failed", run
    assert run["halt"] == "corrupt_log", run
    assert "does not replay" in run["reason"], run
    assert "bogus" in run["reason"], run
    assert bench.ticket("tamper")["state"] == "failed"
    assert bench.rev("main") == before  # nothing was merged
    assert [r["stage"] for r in run["stages"]] == ["implement", "sync", "merge"]
    assert stage_table(run)[1:] == [("sync", 0, "pending"), ("merge", 0, "pending")]
    # Settled: those rows will never be reached (0.8.0), and the run's own row is not one.
    assert [r["unreached"] for r in run["stages"]] == [False, True, True]


def test_corrupt_run_shows_no_running_stage(bench: Bench) -> None:
    run, _ = corrupt_run(bench)
    assert run["terminal"] is True
    assert [r for r in run["stages"] if r["state"] == "running"] == [], run["stages"]


def test_flow_edit_after_claim_does_not_change_the_run(bench: Bench) -> None:
    def config(with_gate: bool) -> str:
        stages = [agent_stage(bench, "--wait-for", bench.flag("go"), "--write", "{ticket}.txt=x")]
        if with_gate:
            stages.append(command_stage(bench, "gate", "--exit", "1"))
        return sloop_toml(bench.argv(), flows={"default": [*stages, SYNC, MERGE]})

    # sloop.toml stays uncommitted so editing it never dirties main's checkout.
    bench.setup(
        config(False),
        {"first": ticket_text("First"), "second": ticket_text("Second")},
        commit_config=False,
    )
    bench.start()
    bench.post("first")
    bench.wait_stage_running("first#1", "implement")

    bench.write_config(config(True))
    assert bench.daemon is not None
    bench.daemon.signal(signal.SIGHUP)
    wait_until(lambda: "configuration reloaded" in bench.log())
    bench.release("go")
    first = bench.wait_run("first#1")
    assert first["state"] == "merged", first
    assert [r["stage"] for r in first["stages"]] == ["implement", "sync", "merge"]

    # The reload did take effect: a run claimed now has the new flow and fails at its gate.
    bench.post("second")
    second = bench.wait_run("second#1")
    assert [r["stage"] for r in second["stages"]] == ["implement", "gate", "sync", "merge"]
    assert second["state"] == "failed"
    assert row(second, "gate", 1)["exit_code"] == 1
    # The first run still reports the stages it had.
    again = bench.show_run("first#1")
    assert again is not None
    assert [r["stage"] for r in again["stages"]] == [
        "implement",
        "sync",
        "merge",
    ]


def test_daemon_refuses_to_start_on_a_bad_flow(sandbox: Path, repo: Path) -> None:
    bench = Bench.create(sandbox, repo)
    flows = {
        "default": [
            {"name": "implement", "action": "agent", "return_to": "merge"},
            SYNC,
            MERGE,
        ]
    }
    bench.setup(sloop_toml(bench.argv(), flows=flows))
    code, stdout, logged = new_daemon(sandbox, repo).run_to_exit()
    assert code != 0
    assert stdout == ""
    assert "flows.default.stages[0].return_to" in logged, logged
    assert "forward" in logged


def test_bad_flow_on_sighup_keeps_the_last_good_one(bench: Bench) -> None:
    good = sloop_toml(
        bench.argv(),
        flows={"default": [agent_stage(bench, "--write", "{ticket}.txt=x"), SYNC, MERGE]},
    )
    bench.setup(good, {"later": ticket_text("Later")}, commit_config=False)
    bench.start()
    bench.write_config(
        good + "\n[[flows.default.stages]]\nname = 'extra'\naction = 'agent'\ncolour = 'red'\n"
    )
    assert bench.daemon is not None
    bench.daemon.signal(signal.SIGHUP)
    wait_until(lambda: "reload refused" in bench.log())
    assert "colour" in bench.log()
    assert bench.daemon.alive()

    bench.post("later")
    run = bench.wait_run("later#1")
    assert run["state"] == "merged", run
    assert [r["stage"] for r in run["stages"]] == ["implement", "sync", "merge"]
