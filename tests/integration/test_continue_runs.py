"""A restart costs only what was running: runs in flight continue (issue 38).

The issue's flow, through the real daemon: ``prepare`` (an agent stage that commits)
→ ``work`` (an agent stage that commits, held on a flag) → ``sync`` → ``merge``.  The
daemon is killed with SIGKILL, or stopped with SIGTERM, while ``work`` runs, then
started again.  What must hold: one run, the same id, alias and attempt, merged;
``prepare`` executed once and its commit is in main; ``work``'s first execution ended
``interrupted`` (its output kept), the second started from the same commit and
passed; the ticket was never queued again.  The same for a command stage, a panel
between seats (the seat that reported keeps its verdict), a stage's ``timeout`` (each
execution's own, not the stage's across a restart), a run whose commits are
gone (aborted, queued again), and a stage that is cut short again and again (the run
stops continuing after three interruptions in a row and settles failed).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import (
    Bench,
    agent_key,
    install_probe,
    probe_argv,
    sloop_toml,
    ticket_text,
)
from tests.support.daemon import REPO_ROOT, git, query, wait_until
from tests.support.usage_stream import SPEC as USAGE_SPEC
from tests.support.usage_stream import line as usage_line

FLOW = "fix"


def rows_of(run: dict[str, Any], stage: str) -> list[dict[str, Any]]:
    return [row for row in run["stages"] if row["stage"] == stage and row["state"] != "pending"]


def dumps_of(bench: Bench, prefix: str) -> list[Path]:
    """The environment dumps of ``prefix``'s executions, one per execution that started.

    Counted, not read: an agent writes its dump in place, so one may be half-written."""
    return sorted(bench.path("").glob(f"{prefix}-*.json"))


def assert_one_run_merged_with_prepare_once(
    bench: Bench, run: dict[str, Any], run_id: str
) -> dict[str, Any]:
    """The issue's "done when": one run (same id, alias, attempt), merged; ``prepare``
    executed once and its commit, made before the stop, in main.  Its row."""
    assert (run["id"], run["alias"], run["attempt"], run["state"]) == (
        run_id,
        "t#1",
        1,
        "merged",
    ), run
    assert query(bench.state_dir, "SELECT count(*) FROM runs") == [(1,)]
    assert len(dumps_of(bench, "prepare")) == 1
    (prepared,) = rows_of(run, "prepare")
    assert (prepared["attempt"], prepared["state"]) == (1, "passed")
    git(bench.repo, "merge-base", "--is-ancestor", prepared["commit"], "main")
    return prepared


def _interrupt(bench: Bench, how: str) -> None:
    """The daemon ends as ``how`` says: a crash, or a clean stop (systemctl stop)."""
    assert bench.daemon is not None
    if how == "kill9":
        bench.daemon.kill9()
    else:
        assert bench.stop() == 0


def _issue_flow(bench: Bench, work_stage: dict[str, Any]) -> None:
    prepare = bench.argv(
        "--env-dump",
        bench.flag("prepare-{run}-{attempt}.json"),
        "--write",
        "prepared-{run}.txt=prepared",
    )
    flows = {
        FLOW: [
            {"name": "prepare", "action": "agent", "command": prepare},
            work_stage,
            {"name": "sync", "action": "sync"},
            {"name": "merge", "action": "ff_only"},
        ]
    }
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"t": ticket_text("Continue me", flow=FLOW)})


def _work_agent(bench: Bench, *first: str) -> dict[str, Any]:
    """``work``: does ``first`` (probe steps), says it began, waits for ``go-work``."""
    command = bench.argv(
        "--env-dump",
        bench.flag("work-{run}-{attempt}.json"),
        *first,
        "--say",
        "work {attempt} began",
        "--wait-for",
        bench.flag("go-work"),
        "--write",
        "worked-{run}.txt=worked",
    )
    return {"name": "work", "action": "agent", "command": command}


def _started_again(bench: Bench, run_id: str, stage: str, attempt: int) -> None:
    def running() -> bool:
        shown = bench.show_run(run_id)
        assert shown is not None
        assert not shown["terminal"], shown
        return any(
            r["attempt"] == attempt and r["state"] == "running" for r in rows_of(shown, stage)
        )

    wait_until(running, timeout=30)


def _work_cut_short_then_finished(bench: Bench, how: str) -> tuple[str, dict[str, Any]]:
    """Post ``t``; once ``work`` (``_work_agent``) has said it began, stop the daemon as
    ``how`` says, start it again and let the continued execution finish: (run id, run)."""
    bench.start()
    bench.post("t")
    run_id: str = bench.wait_stage_running("t#1", "work")["id"]
    # What was stored before the stop is kept (lines still in the sink's buffer when a
    # SIGKILL lands are not: they were never stored).
    said = ("work", 1, "stdout", "work 1 began")
    wait_until(lambda: said in bench.log_lines(run_id), timeout=20)
    _interrupt(bench, how)

    bench.start()
    _started_again(bench, run_id, "work", 2)
    bench.release("go-work")
    return run_id, bench.wait_run(run_id)


@pytest.mark.parametrize("how", ["kill9", "sigterm"])
def test_the_issue_flow_continues_at_work_and_merges_once(bench: Bench, how: str) -> None:
    _issue_flow(bench, _work_agent(bench))
    run_id, run = _work_cut_short_then_finished(bench, how)

    prepared = assert_one_run_merged_with_prepare_once(bench, run, run_id)
    assert prepared["node"] is None
    # work: cut short once (no returns, no retries spent), then run again and passed.
    first, second = rows_of(run, "work")
    assert (first["attempt"], first["state"], first["ended_by"]) == (1, "failed", "interrupted")
    assert (second["attempt"], second["state"], second["ended_by"]) == (2, "passed", None)
    assert second["started_at_ms"] >= first["finished_at_ms"]
    dumps = dumps_of(bench, "work")
    assert len(dumps) == 2
    # The second execution started from the same commit, in a fresh place.
    tree = git(bench.repo, "ls-tree", "--name-only", "main").split()
    assert {f"prepared-{run_id}.txt", f"worked-{run_id}.txt"} <= set(tree)
    # Its output is kept: the interrupted execution's line is still there.
    lines = bench.log_lines(run_id)
    assert ("work", 1, "stdout", "work 1 began") in lines
    assert ("work", 2, "stdout", "work 2 began") in lines
    kinds = bench.event_kinds(run_id)
    assert "run_continued" in kinds
    assert "run_aborted" not in kinds
    # The ticket was never queued again: one trigger claimed, by this run.
    ticket = bench.ticket("t")
    assert ticket["state"] == "merged"
    assert query(bench.state_dir, "SELECT count(*) FROM triggers") == [(1,)]


def test_a_command_stage_runs_again_after_a_crash_within_its_own_timeout(bench: Bench) -> None:
    """A command stage cut short runs again, and the stage's ``timeout`` is each
    execution's own (docs/operator-guide.md): the first execution runs 6 s before the
    crash, the second 5 s; together (and with the daemon's downtime) past the stage's
    10 s, each well within it: the run merges."""
    check = bench.argv(
        "--env-dump",
        bench.flag("check-{run}-{attempt}.json"),
        "--wait-for",
        bench.flag("go-check"),
    )
    work = {"name": "work", "action": "command", "command": check, "timeout": "10s"}
    _issue_flow(bench, work)
    bench.start()
    bench.post("t")
    run_id = bench.wait_stage_running("t#1", "work")["id"]
    wait_until(lambda: len(dumps_of(bench, "check")) == 1, timeout=20)
    time.sleep(6)
    bench.daemon.kill9()  # type: ignore[union-attr]

    bench.start()
    _started_again(bench, run_id, "work", 2)
    wait_until(lambda: len(dumps_of(bench, "check")) == 2, timeout=20)
    time.sleep(5)
    bench.release("go-check")
    run = bench.wait_run(run_id)
    assert run["state"] == "merged", run
    work_rows = rows_of(run, "work")
    assert [(r["attempt"], r["state"], r["ended_by"]) for r in work_rows] == [
        (1, "failed", "interrupted"),
        (2, "passed", None),
    ], work_rows
    assert len(dumps_of(bench, "prepare")) == 1


def _seat(bench: Bench, seat: int, steps: list[dict[str, Any]]) -> list[str]:
    """A probing reviewer that first counts its sitting in ``seat<N>-sittings``."""
    count = 'echo sat >> "$0"; exec "$@"'
    probe = probe_argv(bench, bench.flag(f"seat{seat}-out.json"), steps)
    return ["/bin/sh", "-c", count, bench.flag(f"seat{seat}-sittings"), *probe]


def _panel_flow(bench: Bench) -> None:
    install_probe(bench)
    verdict = ["verdict", "pass", "--reason"]
    seat0 = _seat(bench, 0, [{"do": "ctl", "key": "v", "argv": [*verdict, "seat zero fine"]}])
    seat1 = _seat(
        bench,
        1,
        [
            {"do": "wait", "path": bench.flag("go-seat1")},
            {"do": "ctl", "key": "v", "argv": [*verdict, "seat one fine"]},
        ],
    )
    review: dict[str, Any] = {
        "name": "review",
        "action": "agent",
        "result_check": "panel",
        "quorum": 2,
        "reviewers": [
            {"target": "claude", "command": seat0},
            {"target": "codex", "command": seat1},
        ],
    }
    flows = {
        FLOW: [
            {"name": "work", "action": "agent", "command": bench.argv("--write", "w.txt=w")},
            review,
            {"name": "merge", "action": "ff_only"},
        ]
    }
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"t": ticket_text("Panel", flow=FLOW)})


def _sittings(bench: Bench, seat: int) -> int:
    path = bench.path(f"seat{seat}-sittings")
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.parametrize("how", ["kill9", "sigterm"])
def test_a_panel_continues_with_the_seat_that_was_sitting(bench: Bench, how: str) -> None:
    _panel_flow(bench)
    bench.start()
    bench.post("t")
    run_id = bench.wait_stage_running("t#1", "review")["id"]
    wait_until(lambda: _sittings(bench, 1) == 1, timeout=30)
    _interrupt(bench, how)

    bench.start()
    wait_until(lambda: _sittings(bench, 1) == 2, timeout=30)
    bench.release("go-seat1")
    run = bench.wait_run(run_id)
    assert run["state"] == "merged", run
    # One execution of the panel: seat 0 sat once and kept its verdict, seat 1 sat twice.
    (review,) = rows_of(run, "review")
    assert (review["attempt"], review["state"]) == (1, "passed")
    assert (_sittings(bench, 0), _sittings(bench, 1)) == (1, 2)
    verdicts = [(s["reviewer"], s["verdict"], s["reason"]) for s in review["reviewers"]]
    assert verdicts == [(0, "pass", "seat zero fine"), (1, "pass", "seat one fine")]
    assert [len(s["interrupted"]) for s in review["reviewers"]] == [0, 1]
    assert len(rows_of(run, "work")) == 1


def test_a_stage_cut_short_three_times_in_a_row_settles_failed(bench: Bench) -> None:
    hang = bench.argv("--env-dump", bench.flag("hang-{run}-{attempt}.json"), "--hang")
    _issue_flow(bench, {"name": "work", "action": "agent", "command": hang})
    bench.start()
    bench.post("t")
    run_id = bench.wait_stage_running("t#1", "work")["id"]
    for attempt in (1, 2, 3):
        wait_until(lambda a=attempt: len(dumps_of(bench, "hang")) == a, timeout=30)
        bench.daemon.kill9()  # type: ignore[union-attr]
        bench.start()
        if attempt < 3:
            _started_again(bench, run_id, "work", attempt + 1)
    run = bench.wait_run(run_id)
    assert run["state"] == "failed", run
    assert "3 times in a row" in run["reason"], run
    assert [r["ended_by"] for r in rows_of(run, "work")] == ["interrupted"] * 3
    # Each start it went on from said so, counting the crashes; the last one did not.
    events = bench.ok("events", {"scope": run_id})["events"]  # one page holds them
    continued = [e["data"] for e in events if e["kind"] == "run_continued"]
    assert continued == [
        {"stage": "work", "interrupted_in_a_row": 1},
        {"stage": "work", "interrupted_in_a_row": 2},
    ], events
    # A bound the operator reads: the ticket is not queued again behind their back.
    assert bench.ticket("t")["state"] == "failed"
    assert query(bench.state_dir, "SELECT count(*) FROM runs") == [(1,)]


def _drop_run_refs(bench: Bench, run_id: str, keep: Callable[[str], bool]) -> None:
    refs = git(bench.repo, "for-each-ref", "--format=%(refname)", f"refs/sloop/runs/{run_id}/")
    for ref in refs.split():
        if not keep(ref):
            git(bench.repo, "update-ref", "-d", ref)


def test_a_run_whose_start_commit_is_gone_is_aborted_and_queued_again(bench: Bench) -> None:
    _issue_flow(bench, _work_agent(bench))
    bench.start()
    bench.post("t")
    run_id = bench.wait_stage_running("t#1", "work")["id"]
    bench.daemon.kill9()  # type: ignore[union-attr]
    # A repository restored beside the store: the run's pinned base is gone.
    _drop_run_refs(bench, run_id, keep=lambda ref: not ref.endswith("/base"))

    bench.release("go-work")
    bench.start()
    run = bench.wait_run(run_id)
    assert run["state"] == "aborted", run
    assert "its start commit" in run["reason"], run
    again = bench.wait_run("t#2")
    assert again["state"] == "merged", again


def test_a_store_that_forgot_a_run_leaves_its_leftovers_alone(bench: Bench, tmp_path: Path) -> None:
    """A store restored from before the run was claimed knows no run in flight: nothing
    is continued, the run's branch stays, and the next run is numbered past it."""
    _issue_flow(bench, _work_agent(bench))
    bench.start()
    assert bench.stop() == 0
    files = [bench.state_dir / f"store.sqlite3{suffix}" for suffix in ("", "-wal", "-shm")]
    saved = {path: path.read_bytes() for path in files if path.exists()}
    bench.start()
    bench.post("t")
    bench.wait_stage_running("t#1", "work")
    bench.daemon.kill9()  # type: ignore[union-attr]
    for path in files:
        path.unlink(missing_ok=True)
    for path, data in saved.items():
        path.write_bytes(data)

    bench.release("go-work")
    bench.start()
    assert git(bench.repo, "rev-parse", "--verify", "sloop/t/1")
    bench.post("t")
    run = bench.wait_run("t#2")
    assert run["state"] == "merged", run
    assert [r[0] for r in query(bench.state_dir, "SELECT alias FROM runs")] == ["t#2"]


def test_a_crash_mid_sync_runs_the_sync_again(bench: Bench) -> None:
    """A sync is git's work for milliseconds, too short to kill the daemon in by timing:
    the store a crash mid-sync leaves (its stage_started with nothing after) is made by
    cutting the log back to that row while the daemon is down, as a crash would have."""
    check = bench.argv("--wait-for", bench.flag("go-check"))
    prepare = bench.argv("--write", "prepared-{run}.txt=prepared")
    flows: dict[str, list[dict[str, Any]]] = {
        FLOW: [
            {"name": "prepare", "action": "agent", "command": prepare},
            {"name": "sync", "action": "sync"},
            {"name": "check", "action": "command", "command": check},
            {"name": "merge", "action": "ff_only"},
        ]
    }
    bench.setup(sloop_toml(bench.argv(), flows=flows), {"t": ticket_text("Sync", flow=FLOW)})
    bench.start()
    bench.post("t")
    run_id = bench.wait_stage_running("t#1", "check")["id"]
    bench.daemon.kill9()  # type: ignore[union-attr]
    with bench.store() as conn:
        ((started,),) = conn.execute(
            "SELECT seq FROM stage_log WHERE run = ? AND stage = 'sync' AND kind = ?",
            (run_id, "stage_started"),
        ).fetchall()
        conn.execute("DELETE FROM stage_log WHERE run = ? AND seq > ?", (run_id, started))

    bench.start()
    bench.release("go-check")
    run = bench.wait_run(run_id)
    assert run["state"] == "merged", run
    assert [(r["attempt"], r["ended_by"]) for r in rows_of(run, "sync")] == [
        (1, "interrupted"),
        (2, None),
    ]
    assert [r["attempt"] for r in rows_of(run, "prepare")] == [1]
    assert f"prepared-{run_id}.txt" in git(bench.repo, "ls-tree", "--name-only", "main").split()


@pytest.mark.parametrize("how", ["kill9", "sigterm"])
def test_the_interrupted_execution_s_usage_counts_in_the_run(bench: Bench, how: str) -> None:
    """Budgets count what the cut-short execution spent: after a clean stop, what its
    stream reported; after a crash, what its stored output says, read back."""
    bench.env["PYTHONPATH"] = str(REPO_ROOT)  # the daemon imports the test's parser
    _issue_flow(bench, _work_agent(bench, "--say", usage_line(100, 20)))
    config = (bench.repo / "sloop.toml").read_text()
    bench.write_config(agent_key(config, "stream", USAGE_SPEC))
    git(bench.repo, "commit", "-qam", "the usage stream")
    _, run = _work_cut_short_then_finished(bench, how)  # "began" follows the usage
    assert run["state"] == "merged", run
    spent = {"input_tokens": 100, "output_tokens": 20, "cached_tokens": 0, "cost_usd": None}
    first, second = rows_of(run, "work")
    assert (first["ended_by"], first["usage"]) == ("interrupted", spent), first
    assert second["usage"] == spent, second
    # The run's total holds both executions' (prepare's agent reports nothing).
    assert (run["usage"]["input_tokens"], run["usage"]["output_tokens"]) == (200, 40), run
