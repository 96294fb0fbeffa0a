"""SIGKILL at random moments while runs pass through the merge queue (issue 32).

Tickets are posted a few at a time while a daemon walks them through the issue's
flow (implement → sync → test → merge, ``parallel = 8``, a gate of 0.3 s, the
ref's move widened by a slow ``reference-transaction`` hook), and the daemon is
killed with SIGKILL at a random moment, again and again, then started again on
the same repository and state directory.  After every restart:

- main only ever held commits a gate passed on: every commit of main's reflog is
  main before the test, or the ``commit`` of a passing gate row of some run;
- no ticket merged twice: at most one merged run per ticket, main holds at most
  one agent commit per ticket, and the runs main holds are exactly the merged
  runs (``work/<ticket>.txt`` on main names the run that merged it).

At the end every ticket is merged, every run has settled, and none was left
``needs_review`` (or failed) by the queue: each run is ``merged``, or ``aborted``
by a kill and queued again.  The seed is printed and in every assertion message;
``SLOOP_QUEUE_CRASH_SEED=<seed>`` replays it, ``SLOOP_QUEUE_CRASH_KILLS`` sets the
number of kills (20 here; the ``long`` test, run by ``make test-long``, kills 200
times while 160 tickets pass).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import mergequeue as mq
from tests.support.agents import CHAOS_INTERRUPTIONS, Bench
from tests.support.daemon import git, query, wait_until

KILLS = int(os.environ.get("SLOOP_QUEUE_CRASH_KILLS", "20"))
LONG_KILLS = 200
PARALLEL = 8

HOOK = """#!/bin/sh
# Widen the window between a ref's move being prepared and done.
case "$1" in prepared) sleep 0.03 ;; esac
exit 0
"""


def crash_seed() -> int:
    seed = int(os.environ.get("SLOOP_QUEUE_CRASH_SEED", str(random.randrange(1 << 32))))
    print(f"queue crash test seed: {seed} (replay with SLOOP_QUEUE_CRASH_SEED={seed})")
    return seed


def install_hook(repo: Path) -> None:
    hooks = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-path", "hooks"))
    hooks.mkdir(exist_ok=True)
    (hooks / "reference-transaction").write_text(HOOK)
    (hooks / "reference-transaction").chmod(0o755)


class QueueInvariants:
    """What must hold after every restart, read through ``show`` and git."""

    def __init__(self, bench: Bench, before: set[str], seed: int) -> None:
        self.bench = bench
        self.before = before
        self.seed = seed

    def runs(self) -> list[dict[str, Any]]:
        ids = [
            str(r[0]) for r in query(self.bench.state_dir, "SELECT id FROM runs ORDER BY ordinal")
        ]
        found = []
        for run_id in ids:
            value = self.bench.show_run(run_id)
            assert value is not None, (self.seed, run_id)
            found.append(value)
        return found

    def check(self, context: str) -> list[dict[str, Any]]:
        """The invariants, on a snapshot of a live daemon: the runs, then main's reflog
        and tip, then the runs again (a merge may land in between; main only moves
        forward, so what the first read calls merged main holds, and what main holds
        the second read calls merged, or its merge is still recording it)."""
        repo = self.bench.repo
        first = self.runs()
        log = mq.reflog(repo)
        tip = git(repo, "rev-parse", "main")
        runs = self.runs()
        table = mq.summary({run["alias"]: run for run in runs})
        tested = mq.passed_gate_commits(runs) | self.before
        untested = [commit for commit in log if commit not in tested]
        assert untested == [], f"{context}: main held untested commits {untested}\n{table}"
        merged: dict[str, list[str]] = {}
        for run in runs:
            if run["state"] == "merged":
                merged.setdefault(run["ticket"], []).append(run["id"])
        twice = {ticket: ids for ticket, ids in merged.items() if len(ids) > 1}
        assert twice == {}, f"{context}: tickets merged twice {twice}\n{table}"
        landed = mq.main_agent_commits(repo, tip)
        tickets = [ticket for ticket, _ in landed]
        again = sorted({t for t in tickets if tickets.count(t) > 1})
        assert again == [], f"{context}: main holds these tickets' work twice: {again}\n{table}"
        held = {run for _, run in landed}
        before = {run["id"] for run in first if run["state"] == "merged"}
        merging = {
            run["id"] for run in runs if any(r["state"] == "running" for r in mq.rows(run, "merge"))
        }
        after = {run_id for ids in merged.values() for run_id in ids}
        assert before <= held, f"{context}: merged but not in main: {before - held}\n{table}"
        assert held <= after | merging, (
            f"{context}: in main but not merged: {held - after - merging}\n{table}"
        )
        for run in first:
            if run["state"] == "merged":
                text = git(repo, "show", f"{tip}:work/{run['ticket']}.txt")
                assert text == f"{run['ticket']} {run['id']}", (context, run["alias"], text)
        # A run leaves the queue by merging or by a kill (aborted, its ticket queued
        # again): every ticket's work here passes the gate, so nothing else is right.
        stranded = {
            run["alias"]: run["state"] for run in runs if run["state"] in ("needs_review", "failed")
        }
        assert stranded == {}, f"{context}: runs the queue left behind {stranded}\n{table}"
        return runs


def crash_queue(bench: Bench, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    names = [f"k{i:03}" for i in range(max(16, kills * 4 // 5))]
    mq.setup(
        bench,
        mq.queue_flow(bench, gate_s=0.3),
        {name: mq.queue_ticket(f"Crash {name}") for name in names},
        parallel=PARALLEL,
        max_interruptions=CHAOS_INTERRUPTIONS,
    )
    install_hook(bench.repo)
    before = set(mq.reflog(bench.repo))
    invariants = QueueInvariants(bench, before, seed)
    pending = list(names)
    bench.start()
    for kill in range(kills):
        for _ in range(rng.choice((0, 1, 2, 3))):
            if pending:
                bench.post(pending.pop(0))
        time.sleep(rng.uniform(0.1, 2.0))
        assert bench.daemon is not None
        bench.daemon.kill9()
        bench.start()
        invariants.check(f"seed {seed}, after kill {kill + 1}")
    for name in pending:
        bench.post(name)

    def all_merged() -> bool:
        states = [state for (state,) in query(bench.state_dir, "SELECT state FROM tickets")]
        stuck = {"needs_review", "failed", "held"} & set(states)
        return bool(stuck) or all(state == "merged" for state in states)

    try:
        wait_until(all_merged, timeout=300, interval=0.2)
    except AssertionError:
        runs = invariants.runs()
        table = mq.summary({run["alias"]: run for run in runs})
        raise AssertionError(f"seed {seed}: not every ticket merged in time\n{table}") from None
    context = f"seed {seed}, at the end"
    runs = invariants.check(context)
    table = mq.summary({run["alias"]: run for run in runs})
    assert all(run["terminal"] for run in runs), f"{context}: unsettled runs\n{table}"
    states = {run["alias"]: run["state"] for run in runs}
    stranded = {
        alias: state for alias, state in states.items() if state not in ("merged", "aborted")
    }
    assert stranded == {}, f"{context}: runs the queue left behind\n{table}"
    merged_tickets = {run["ticket"] for run in runs if run["state"] == "merged"}
    assert len(merged_tickets) == len(names), f"{context}\n{table}"
    assert len(mq.main_agent_commits(bench.repo)) == len(names), context
    gates = sum(len(mq.gate_rows(run)) for run in runs)
    print(
        f"queue crash test seed {seed}: {kills} kills, {len(names)} tickets merged once each, "
        f"{len(runs)} runs, {gates} gate executions"
    )
    assert bench.stop() == 0, context


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sigkill_while_runs_pass_through_the_queue(bench: Bench) -> None:
    crash_queue(bench, KILLS, crash_seed())


@pytest.mark.long
@pytest.mark.timeout(3600)
def test_sigkill_while_runs_pass_through_the_queue_long(bench: Bench) -> None:
    crash_queue(bench, LONG_KILLS, crash_seed())
