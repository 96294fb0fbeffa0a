"""SIGKILL at random moments of walks that merge: the record never forks from git.

Tickets are posted a few at a time while a daemon walks them (implement → sync →
merge, two in parallel, merge windows widened by slow ``reference-transaction``
and ``post-merge`` hooks), and the daemon is killed with SIGKILL at a random
moment, again and again.  After every restart the invariants hold:

- the store passes ``integrity_check``;
- a run is ``merged`` exactly when main holds its work (each agent commits a file
  named after its run, so main's tree says which runs it holds) and the commit its
  merge stage records;
- no ticket is merged twice, and a ticket with a merged run has no later run;
- no process of a killed daemon's runs is left;
- every log record a reader saw before a kill is still there, same cursor, same text.

At the end one daemon walks every ticket to ``merged``: nothing was lost.  The seed
is printed; ``SLOOP_CRASH_SEED=<seed>`` replays it, ``SLOOP_CRASH_KILLS`` sets the
number of kills (20 in ``make test``; ``make test-long`` runs 200).
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from tests.support.agents import (
    CHAOS_INTERRUPTIONS,
    Bench,
    agent_key,
    processes_with,
    sloop_toml,
    ticket_text,
)
from tests.support.daemon import git, query, wait_until

KILLS = int(os.environ.get("SLOOP_CRASH_KILLS", "20"))
LONG_KILLS = 200

HOOK = """#!/bin/sh
# Widen the window between the merge's intent and the ref's move (and after it).
case "$1" in prepared) sleep 0.03 ;; esac
exit 0
"""
POST_MERGE = "#!/bin/sh\nsleep 0.03\n"


def crash_seed() -> int:
    seed = int(os.environ.get("SLOOP_CRASH_SEED", str(random.randrange(1 << 32))))
    print(f"crash test seed: {seed} (replay with SLOOP_CRASH_SEED={seed})")
    return seed


def install_hooks(repo: Path) -> None:
    hooks = Path(git(repo, "rev-parse", "--path-format=absolute", "--git-path", "hooks"))
    hooks.mkdir(exist_ok=True)
    for name, text in (("reference-transaction", HOOK), ("post-merge", POST_MERGE)):
        (hooks / name).write_text(text)
        (hooks / name).chmod(0o755)


class Invariants:
    """What must hold after every restart, checked against the store and git."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.seen: dict[tuple[str, str], str] = {}  # (run, cursor) -> text, as read

    def runs(self) -> list[tuple[str, str, int, str]]:
        rows = query(
            self.bench.state_dir, "SELECT id, ticket, attempt, state FROM runs ORDER BY ordinal"
        )
        return [(str(r[0]), str(r[1]), int(r[2]), str(r[3])) for r in rows]

    def main_holds(self) -> set[str]:
        """Run ids whose work is in main's tree."""
        names = git(self.bench.repo, "ls-tree", "--name-only", "main", "merged/")
        return {Path(name).stem for name in names.splitlines() if name}

    def check(self, context: str) -> None:
        bench = self.bench
        integrity = query(bench.state_dir, "PRAGMA integrity_check")
        assert integrity == [("ok",)], (context, integrity)
        runs = self.runs()
        merged = {run for run, _, _, state in runs if state == "merged"}
        held = self.main_holds()
        assert merged == held, (context, "merged runs vs main", merged ^ held)
        for run in merged:
            commit = self._merge_commit(run)
            assert commit is not None, (context, run, "merged without a merge commit")
            code = git_code(bench.repo, "merge-base", "--is-ancestor", commit, "main")
            assert code == 0, (context, run, "main does not hold the merge commit")
        by_ticket: dict[str, list[tuple[int, str]]] = {}
        for _, ticket, attempt, state in runs:
            by_ticket.setdefault(ticket, []).append((attempt, state))
        for ticket, attempts in by_ticket.items():
            states = [state for _, state in sorted(attempts)]
            assert states.count("merged") <= 1, (context, ticket, states)
            if "merged" in states:
                assert states[-1] == "merged", (context, ticket, "a run after a merge", states)
                queued = query(
                    bench.state_dir,
                    "SELECT count(*) FROM triggers WHERE ticket = ? AND state = 'queued'",
                    (ticket,),
                )
                assert queued == [(0,)], (context, ticket, "a merged ticket queued again")
        for (run, cursor), text in self.seen.items():
            rows = query(
                bench.state_dir,
                "SELECT body FROM log_records WHERE run = ? AND position = ?",
                (run, int(cursor)),
            )
            assert rows, (context, run, cursor, "a record a reader saw is gone")
            assert orjson.loads(rows[0][0])["text"] == text, (context, run, cursor)

    def _merge_commit(self, run: str) -> str | None:
        """The commit the run's passing merge stage recorded."""
        rows = query(
            self.bench.state_dir,
            "SELECT data FROM stage_log WHERE run = ? AND kind = 'stage_finished' "
            "AND stage = 'merge' ORDER BY seq",
            (run,),
        )
        passed = [d.get("commit") for d in (orjson.loads(r[0]) for r in rows) if d.get("passed")]
        return passed[-1] if passed else None

    def remember_logs(self, rng: random.Random) -> None:
        """Read a page of some run's log, as a follower would, and keep what it saw."""
        runs = [run for run, _, _, _ in self.runs()]
        if not runs:
            return
        run = rng.choice(runs)
        response = self.bench.client.call("logs", {"run": run})
        if not response["ok"]:
            return
        for record in response["data"]["records"]:
            self.seen[(run, record["cursor"])] = record["text"]


def git_code(repo: Path, *args: str) -> int:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True).returncode


def in_flight(bench: Bench) -> set[str]:
    response = bench.client.call("show")
    if not response["ok"]:
        return set()
    return {run["id"] for run in response["data"]["runs"]}


def crash_walks(bench: Bench, kills: int, seed: int) -> None:
    rng = random.Random(seed)
    names = [f"c{i}" for i in range(kills + 8)]
    agent = bench.argv("--write", "merged/{run}.txt={run}")
    bench.setup(
        agent_key(sloop_toml(agent, parallel=2), "max_interruptions", CHAOS_INTERRUPTIONS),
        {name: ticket_text(f"Crash {name}") for name in names},
    )
    install_hooks(bench.repo)
    invariants = Invariants(bench)
    pending = list(names)
    bench.start()
    for kill in range(kills):
        for _ in range(rng.choice((0, 1, 1, 2))):
            if pending:
                bench.post(pending.pop(0))
        invariants.remember_logs(rng)
        time.sleep(rng.uniform(0.1, 2.5))
        doomed = in_flight(bench)
        assert bench.daemon is not None
        bench.daemon.kill9()
        bench.start()
        context = f"seed {seed}, after kill {kill + 1}"
        invariants.check(context)
        still = in_flight(bench)  # runs the new daemon may have started again
        left = [pid for run in doomed - still for pid in processes_with(*bench.run_env(run))]
        assert left == [], (context, "processes of killed runs", left)
    for name in pending:
        bench.post(name)

    def all_merged() -> bool:
        tickets = query(bench.state_dir, "SELECT state FROM tickets")
        return all(state == "merged" for (state,) in tickets)

    wait_until(all_merged, timeout=120, interval=0.2)
    invariants.check(f"seed {seed}, at the end")
    intents = query(bench.state_dir, "SELECT count(*) FROM stage_log WHERE kind = 'merge_intent'")
    recovered = query(
        bench.state_dir,
        "SELECT count(*) FROM stage_log WHERE kind = 'stage_finished' AND stage = 'merge' "
        "AND data LIKE '%before the daemon restarted%'",
    )
    interrupted = query(
        bench.state_dir,
        "SELECT count(*) FROM stage_log WHERE kind = 'stage_finished' AND stage = 'merge' "
        "AND data LIKE '%restarted before%moved%'",
    )
    print(
        f"crash test seed {seed}: {kills} kills, {len(names)} tickets merged once each, "
        f"{intents[0][0]} merge intents, {recovered[0][0]} merges recovered as done, "
        f"{interrupted[0][0]} recovered as not done"
    )
    merged_tickets = query(
        bench.state_dir, "SELECT count(DISTINCT ticket) FROM runs WHERE state = 'merged'"
    )
    assert merged_tickets == [(len(names),)]
    assert len(invariants.main_holds()) == len(names)
    assert bench.stop() == 0


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigkill_during_merging_walks_keeps_record_and_main_in_step(bench: Bench) -> None:
    crash_walks(bench, KILLS, crash_seed())


@pytest.mark.long
@pytest.mark.timeout(1800)
def test_sigkill_during_merging_walks_long(bench: Bench) -> None:
    crash_walks(bench, LONG_KILLS, crash_seed())
