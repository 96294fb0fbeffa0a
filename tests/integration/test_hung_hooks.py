"""An abort or a stopping daemon does not wait for a hook that hangs inside the merge.

The operator's checkout has a hook that hangs (far past any test) while a run's
``ff_only`` is in it: ``post-merge`` (main has already moved) or
``reference-transaction`` at ``prepared`` (the intent is recorded, main has not
moved); or while the run's branch is being made (``reference-transaction`` again:
the run has not started).  ``repo.git_timeout`` is ten minutes, so nothing but the stop itself can
end the git call in time.  An ``abort`` is answered, and a SIGTERMed daemon exits,
while the hook would still be sleeping: the hook was killed with its git, and the
run settled as main's ref says (merged exactly when main holds its work), or, for a
stopping daemon whose merge had not moved main, left to continue at the next start.  What the
killed git left (lock files, a checkout moved ahead of its branch) is cleaned up, so
the next run merges.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_merge_atomicity import (
    assert_checkout_clean,
    hook,
    main_holds,
    runs_of,
)
from tests.support.agents import BENCH_VAR, Bench, alive_with, sloop_toml, ticket_text
from tests.support.daemon import Client, git, wait_until

# Both hooks write their pid and become the sleep (exec), so "the hook's process is
# gone" is "the hook was killed": it sleeps for far longer than any test runs.
HANGS_AFTER_THE_MOVE = """#!/bin/sh
echo $$ > {flags}/hook.pid
touch {flags}/in-merge
exec sleep {seconds}
"""
HANGS_BEFORE_THE_MOVE = """#!/bin/sh
[ "$1" = prepared ] || exit 0
while read old new ref; do
  if [ "$ref" = refs/heads/main ]; then
    echo $$ > {flags}/hook.pid
    touch {flags}/in-merge
    exec sleep {seconds}
  fi
done
exit 0
"""
HOOK_SLEEPS_S = 900
# git's own deadline is far beyond the hook's answer: only the stop can end the call.
FLOW = (
    '[repo]\ngit_timeout = "10m"\n\n'
    "[[flows.default.stages]]\nname = 'implement'\naction = 'agent'\n\n"
    "[[flows.default.stages]]\nname = 'sync'\naction = 'sync'\n\n"
    "[[flows.default.stages]]\nname = 'merge'\naction = 'ff_only'\n"
)
# How long the test waits for an abort's answer: generous for a busy host, and far
# short of the hook's sleep and of git_timeout, one of which a waiting abort ends at.
ABORT_PATIENCE_S = 60.0


@pytest.fixture
def hung(bench: Bench) -> Iterator[Bench]:
    """The bench; whatever happens, no hook of this test sleeps on after it."""
    try:
        yield bench
    finally:
        pid = hook_pid(bench)
        if pid is not None and alive_with(pid, f"{BENCH_VAR}={bench.root}"):
            os.kill(pid, signal.SIGKILL)


def hook_pid(bench: Bench) -> int | None:
    path = bench.path("hook.pid")
    return int(path.read_text()) if path.exists() and path.read_text().strip() else None


def walk_into_hung_hook(bench: Bench, name: str, hook_name: str, text: str) -> None:
    agent = bench.argv("--write", f"{name}.txt={{run}}")
    bench.setup(sloop_toml(agent, extra=FLOW), {name: ticket_text(f"Merge {name}")})
    hook(bench, hook_name, text, HOOK_SLEEPS_S)  # after the set-up commits
    bench.start()
    bench.post(name)
    wait_until(lambda: hook_pid(bench) is not None, timeout=30)


def assert_hook_killed(bench: Bench) -> None:
    pid = hook_pid(bench)
    assert pid is not None
    # Killed and collected by the time of the answer: no hook goes on after the stop.
    assert not alive_with(pid, f"{BENCH_VAR}={bench.root}"), f"hook {pid} still runs"


def abort_patiently(bench: Bench, run: str) -> dict[str, object]:
    assert bench.daemon is not None
    assert bench.daemon.socket is not None
    client = Client(bench.daemon.socket, timeout=ABORT_PATIENCE_S)
    try:
        answer = client.call("abort", {"run": run})
    finally:
        client.close()
    assert answer["ok"], answer
    run_row: dict[str, object] = answer["data"]["run"]
    return run_row


def remove_hook(bench: Bench, hook_name: str) -> None:
    hooks = Path(git(bench.repo, "rev-parse", "--path-format=absolute", "--git-path", "hooks"))
    (hooks / hook_name).unlink()


def test_abort_in_a_hung_post_merge_hook_kills_it_and_answers_merged(hung: Bench) -> None:
    bench = hung
    walk_into_hung_hook(bench, "after", "post-merge", HANGS_AFTER_THE_MOVE)
    run = abort_patiently(bench, "R1")
    assert run["state"] == "merged", run
    assert_hook_killed(bench)
    assert main_holds(bench, "after")
    assert bench.ticket("after")["state"] == "merged"
    lines = [text for _, _, stream, text in bench.log_lines("R1") if stream == "system"]
    assert any("it finished, so the run merged" in line for line in lines), lines
    merge = [s for s in bench.wait_run("R1")["stages"] if s["stage"] == "merge"][-1]
    assert "killed" in (merge["reason"] or ""), merge
    assert runs_of(bench) == [("R1", "merged")]


def test_abort_in_a_hung_hook_before_the_move_kills_it_and_answers_aborted(hung: Bench) -> None:
    bench = hung
    walk_into_hung_hook(bench, "before", "reference-transaction", HANGS_BEFORE_THE_MOVE)
    run = abort_patiently(bench, "R1")
    assert run["state"] == "aborted", run
    assert_hook_killed(bench)
    assert not main_holds(bench, "before")
    assert bench.ticket("before")["state"] == "held"
    # The killed merge's locks are gone and the checkout is back at main: the next
    # attempt merges (a stale main.lock or HEAD.lock would fail every later merge).
    assert_checkout_clean(bench)
    remove_hook(bench, "reference-transaction")
    bench.ok("ready", {"ref": "before"})
    assert bench.wait_run("R2")["state"] == "merged"
    assert main_holds(bench, "before")


def test_sigterm_in_a_hung_post_merge_hook_exits_and_records_the_merge(hung: Bench) -> None:
    bench = hung
    walk_into_hung_hook(bench, "stopping", "post-merge", HANGS_AFTER_THE_MOVE)
    # Bench.stop waits STOP_TIMEOUT_S, then aborts the daemon (a non-zero code).
    assert bench.stop() == 0, bench.log()
    assert_hook_killed(bench)
    assert main_holds(bench, "stopping")
    assert runs_of(bench) == [("R1", "merged")]
    remove_hook(bench, "post-merge")
    bench.start()
    assert bench.ticket("stopping")["state"] == "merged"
    assert runs_of(bench) == [("R1", "merged")]


def test_sigterm_in_a_hung_hook_before_the_move_exits_and_continues(hung: Bench) -> None:
    bench = hung
    walk_into_hung_hook(bench, "requeued", "reference-transaction", HANGS_BEFORE_THE_MOVE)
    assert bench.stop() == 0, bench.log()
    assert_hook_killed(bench)
    assert not main_holds(bench, "requeued")
    # Issue 38: left in flight, its merge cut short; the next start merges it.
    assert runs_of(bench) == [("R1", "running")]
    assert_checkout_clean(bench)
    remove_hook(bench, "reference-transaction")
    bench.start()
    run = bench.wait_run("R1")
    assert run["state"] == "merged", run
    merges = [(s["attempt"], s["ended_by"]) for s in run["stages"] if s["stage"] == "merge"]
    assert merges == [(1, "interrupted"), (2, None)], run
    assert main_holds(bench, "requeued")
    assert runs_of(bench) == [("R1", "merged")]


def test_sigkill_in_a_hung_hook_before_the_move_leaves_the_next_merge_possible(
    hung: Bench,
) -> None:
    # The killed daemon's git lives on in the hook; the next daemon waits for it, then
    # kills it, and settles the merge from the ref: not moved, so the run continues and
    # merges again.  Its merge had moved the checkout's files already: they are put back.
    bench = hung
    walk_into_hung_hook(bench, "killed", "reference-transaction", HANGS_BEFORE_THE_MOVE)
    assert bench.daemon is not None
    bench.daemon.kill9()
    remove_hook(bench, "reference-transaction")  # the one hanging runs on regardless
    bench.start()
    assert bench.wait_run("R1", timeout=90)["state"] == "merged"
    assert_hook_killed(bench)
    assert main_holds(bench, "killed")
    assert runs_of(bench) == [("R1", "merged")]


# Holds the transaction that makes a run's branch (its base ref is made with it) at
# "prepared": nothing has moved yet.
HANGS_AS_THE_BRANCH_IS_MADE = """#!/bin/sh
[ "$1" = prepared ] || exit 0
while read old new ref; do
  case "$ref" in
    refs/sloop/runs/*/base)
      echo $$ > {flags}/hook.pid
      exec sleep {seconds};;
  esac
done
exit 0
"""
# An abort of a run whose branch is being made is answered well within this (on
# 0.8.0 only git's own deadline ended the hook).
PROMPT_S = 20.0


def test_abort_while_the_branch_is_made_kills_the_hook_and_answers_aborted(hung: Bench) -> None:
    bench = hung
    walk_into_hung_hook(bench, "born", "reference-transaction", HANGS_AS_THE_BRANCH_IS_MADE)
    asked = time.monotonic()
    run = abort_patiently(bench, "R1")
    assert time.monotonic() - asked < PROMPT_S
    assert run["state"] == "aborted", run
    assert_hook_killed(bench)
    assert git(bench.repo, "for-each-ref", "--format=%(refname)", "refs/sloop/runs/R1") == ""
    assert_no_lock_files(bench)
    remove_hook(bench, "reference-transaction")
    bench.ok("ready", {"ref": "born"})
    assert bench.wait_run("R2")["state"] == "merged"
    assert main_holds(bench, "born")


def test_sigterm_while_the_branch_is_made_exits_and_queues_again(hung: Bench) -> None:
    bench = hung
    walk_into_hung_hook(bench, "reborn", "reference-transaction", HANGS_AS_THE_BRANCH_IS_MADE)
    asked = time.monotonic()
    assert bench.stop() == 0, bench.log()
    assert time.monotonic() - asked < PROMPT_S
    assert_hook_killed(bench)
    assert runs_of(bench) == [("R1", "aborted")]
    assert_no_lock_files(bench)
    remove_hook(bench, "reference-transaction")
    bench.start()  # queued again: its next run merges
    assert bench.wait_run("R2")["state"] == "merged"
    assert main_holds(bench, "reborn")


def assert_no_lock_files(bench: Bench) -> None:
    """The killed transaction's ``<ref>.lock`` files are gone (they would litter the
    repository, and a lock on a ref a later run needs fails that run)."""
    common = Path(git(bench.repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    locks = [str(p.relative_to(common)) for p in (common / "refs").rglob("*.lock")]
    assert locks == []
