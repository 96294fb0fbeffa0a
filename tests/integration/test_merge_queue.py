"""The merge queue (issue 32), through the real daemon, its socket and ``sloopctl``.

Every test walks the issue's flow (``tests.support.mergequeue``): ``implement``
(one file per ticket, committed) → ``sync`` → ``test`` (a command gate of about a
second, ``network = false``) → ``merge`` (``ff_only``, ``return_to = "sync"``,
``returns = 3``), or a variant of it (a panel as the gate, ``mode = "rebase"``).
They assert what the issue promises, as counts and invariants, never as times:

- every run whose work passed merges, through one run and one ``implement`` each,
  and no ``merge`` execution fails because main moved (0.8.0's race);
- main only ever moves to a commit a gate execution passed on (main's reflog
  against the gate rows' ``commit``);
- a failure costs only its own run: those behind are rebuilt (a new ``sync`` and
  new gate executions, ``queue_rebuilt`` naming the run that left) and spend none
  of their ``returns``;
- the queue is visible: the dashboard's ``queue``, ``show RUN``'s ``queue``, the
  ``queue_*`` events.

Queue order is arrival order at the landing's ``sync``; the tests that need an
order post their tickets one at a time (``post_in_order``) while the gates hold
on a flag file, and release the flag once everyone is queued.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.support import mergequeue as mq
from tests.support.agents import Bench, install_probe, probe_argv
from tests.support.daemon import git, wait_until

# The "Done when": 24 tickets at parallel 8.  On Ray (a head and two worker
# nodes on this host) every stage is placed remotely; fewer tickets keep that run short.
ON_RAY = os.environ.get("SLOOP_TEST_EXECUTOR") == "ray"
CLEAN_TICKETS, CLEAN_PARALLEL = (8, 4) if ON_RAY else (24, 8)


def check_clean(
    bench: Bench,
    runs: dict[str, dict[str, Any]],
    before: set[str],
    *,
    gates_per_run: float = 1.5,
    also_allowed: frozenset[str] = frozenset(),
    gate: str = mq.GATE,
) -> None:
    """What every queue that only holds good work promises."""
    table = mq.summary(runs)
    states = [run["state"] for run in runs.values()]
    gates = sum(len(mq.gate_rows(run, gate)) for run in runs.values())
    figures = (
        f"{states.count('merged')} merged, {states.count('needs_review')} needs_review "
        f"of {len(runs)}; {gates} gate executions"
    )
    assert set(states) == {"merged"}, f"not all merged: {figures}\n{table}"
    for ref, run in runs.items():
        assert [r["state"] for r in mq.rows(run, "implement")] == ["passed"], (ref, table)
        assert mq.moved_main_failures(run) == [], f"{ref}: a merge failed\n{table}"
        assert mq.returned(bench, run["id"]) == [], f"{ref} spent a return\n{table}"
    assert gates <= gates_per_run * len(runs), f"{gates} gate executions\n{table}"
    untested = mq.untested_main(bench.repo, runs.values(), before | also_allowed, gate)
    assert untested == [], f"main held commits no gate passed on: {untested}\n{table}"
    # A gate row's commit is the candidate it ran on (the gate saw it as its HEAD).
    if gate == mq.GATE:
        seen = {(g["run"], int(g["attempt"])): g["head"] for g in mq.gate_log(bench)}
        for ref, run in runs.items():
            for r in mq.gate_rows(run, gate):
                if r["state"] == "passed":
                    assert seen.get((run["id"], r["attempt"])) == r["commit"], (ref, r, table)
    # Each ticket landed once: main holds exactly one commit of each run's agent.
    landed = mq.main_agent_commits(bench.repo)
    assert sorted(landed) == sorted((run["ticket"], run["id"]) for run in runs.values()), landed
    # main is the last landing's commit, which its last gate passed on.
    tip = bench.rev("main")
    assert tip in {mq.merged_commit(run) for run in runs.values()}, (tip, table)


@pytest.mark.on_ray
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_clean_runs_all_merge_once_each_through_the_queue(bench: Bench) -> None:
    """24 tickets at parallel 8 (0.8.0: 12 merged, 12 needs_review, 6.2 tests a merge)."""
    names = [f"t{i:02}" for i in range(CLEAN_TICKETS)]
    mq.setup(
        bench,
        mq.queue_flow(bench, gate_s=1.0),
        {name: mq.queue_ticket(f"Ticket {name}") for name in names},
        parallel=CLEAN_PARALLEL,
    )
    before = set(mq.reflog(bench.repo))
    bench.start()
    mq.post_all(bench, names)
    runs = mq.wait_runs(bench, [f"{name}#1" for name in names], timeout=300)

    check_clean(bench, runs, before)
    for name in names:
        assert [r["id"] for r in bench.ticket(name)["runs"]] == [runs[f"{name}#1"]["id"]]
    # A gate never moves the candidate: each landing's commit is a commit its gate passed on.
    for ref, run in runs.items():
        passed = [r["commit"] for r in mq.gate_rows(run) if r["state"] == "passed"]
        assert passed, (ref, mq.summary(runs))
        assert passed[-1] == mq.merged_commit(run), (ref, mq.summary(runs))
        sync = [r for r in mq.rows(run, "sync") if r["state"] == "passed"][-1]
        assert sync["commit"] == passed[-1], (ref, mq.summary(runs))
    assert bench.dashboard().get("queue") == []


def rebuilt_by(bench: Bench, run: dict[str, Any], left: str) -> tuple[list[Any], list[Any]]:
    """A run's ``queue_rebuilt`` events naming run ``left``, and its rows a rebuild cut
    short whose reason names ``left``."""
    found = [
        e
        for e in mq.kinds(mq.events(bench, run["id"]), "queue_rebuilt")
        if e["data"].get("by") == left
    ]
    cut = [r for r in mq.rebuilt_rows(run) if left in (r["reason"] or "")]
    return found, cut


@pytest.mark.on_ray
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_failing_gate_mid_queue_costs_only_its_run(bench: Bench) -> None:
    """Six queued runs, the third's work fails the gate, and its gate is the slowest:
    the three behind it (built on main + 1 + 2 + bad) see the failure first, are held,
    then rebuilt without it (0.8.0, 12 tickets: 4 of 11 good runs needs_review)."""
    names = ["q1", "q2", "bad", "q4", "q5", "q6"]
    tickets = {name: mq.queue_ticket(f"Ticket {name}") for name in names}
    tickets["bad"] = mq.queue_ticket("Bad", {"bad": "{ticket}"})
    mq.setup(
        bench,
        mq.queue_flow(bench, gate_s=1.0, bad_gate_s=3.0, hold=True),
        tickets,
        parallel=len(names),
    )
    before = set(mq.reflog(bench.repo))
    bench.start()
    aliases = mq.post_in_order(bench, names)
    bench.release(mq.HOLD)
    runs = mq.wait_runs(bench, aliases.values())
    table = mq.summary(runs)
    bad = runs["bad#1"]
    good = {ref: run for ref, run in runs.items() if ref != "bad#1"}

    # The good ones merged, each gate run at most twice, no return spent.
    check_clean(bench, good, before, gates_per_run=2.0)
    for ref, run in runs.items():
        assert len(mq.gate_rows(run)) <= 2, f"{ref}\n{table}"
    # The bad run failed on its own gate and left; main never held its work.
    assert bad["state"] == "failed", table
    assert bad["halt"] == "fail_action", table
    assert [r["state"] for r in mq.gate_rows(bad)][-1] == "failed", table
    assert "'test'" in bad["reason"], table
    assert all(not mq.tree_has(bench.repo, c, "bad") for c in mq.reflog(bench.repo)), table
    assert mq.kinds(mq.events(bench, bad["id"]), "queue_left"), table
    for ref in ("q1#1", "q2#1"):  # ahead of the bad run: never rebuilt
        assert len(mq.rows(runs[ref], "sync")) == 1, f"{ref}\n{table}"
        assert mq.kinds(mq.events(bench, runs[ref]["id"]), "queue_rebuilt") == [], table
    for ref in ("q4#1", "q5#1", "q6#1"):  # behind it: rebuilt without it
        run = runs[ref]
        found, cut = rebuilt_by(bench, run, bad["id"])
        assert found, f"{ref}: no queue_rebuilt naming {bad['id']}\n{table}"
        assert cut, f"{ref}: no row ended_by 'rebuilt' naming {bad['id']}\n{table}"
        assert len(mq.rows(run, "sync")) >= 2, f"{ref}\n{table}"
        last = [r for r in mq.gate_rows(run) if r["state"] == "passed"][-1]
        assert not mq.tree_has(bench.repo, last["commit"], "bad"), f"{ref}\n{table}"


@pytest.mark.on_ray
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_conflict_in_the_queue_leaves_with_its_own_failure(bench: Bench) -> None:
    """a and b edit shared.txt differently; b, queued behind a, cannot be built on a's
    candidate: once a passed, b's conflict is its own (its sync fails, it leaves), and
    c and d behind it land on a."""
    names = ["a", "b", "c", "d"]
    tickets = {name: mq.queue_ticket(f"Ticket {name}") for name in names}
    tickets["a"] = mq.queue_ticket("A", {"shared.txt": "a's line"})
    tickets["b"] = mq.queue_ticket("B", {"shared.txt": "b's line"})
    mq.setup(bench, mq.queue_flow(bench, gate_s=1.0, hold=True), tickets, parallel=len(names))
    before = set(mq.reflog(bench.repo))
    bench.start()
    aliases = mq.post_in_order(bench, ["a"])
    aliases.update(mq.post_in_order(bench, ["b"], until="queue"))
    aliases.update(mq.post_in_order(bench, ["c", "d"], until="queue"))
    bench.release(mq.HOLD)
    runs = mq.wait_runs(bench, aliases.values())
    table = mq.summary(runs)
    a, b = runs["a#1"], runs["b#1"]

    assert b["state"] == "failed", table
    assert b["halt"] == "fail_action", table
    syncs = mq.rows(b, "sync")
    assert syncs[-1]["state"] == "failed", table
    assert "conflict" in syncs[-1]["reason"], table
    assert "shared.txt" in syncs[-1]["reason"], table
    assert "'sync'" in b["reason"], table
    # Its own failure: it never reached a merge, and stood only once a had passed its gate.
    assert mq.rows(b, "merge") == [], table
    a_passed = next(r for r in mq.gate_rows(a) if r["state"] == "passed")
    assert syncs[-1]["finished_at_ms"] >= a_passed["finished_at_ms"], table
    assert mq.kinds(mq.events(bench, b["id"]), "queue_left"), table
    assert all(
        not mq.tree_has(bench.repo, c, "shared.txt")
        or git(bench.repo, "show", f"{c}:shared.txt") == "a's line"
        for c in mq.reflog(bench.repo)
    ), table
    good = {ref: run for ref, run in runs.items() if ref != "b#1"}
    check_clean(bench, good, before, gates_per_run=2.0)
    for ref in ("c#1", "d#1"):
        run = runs[ref]
        assert len(mq.gate_rows(run)) <= 2, f"{ref}\n{table}"
        landed = [r for r in mq.gate_rows(run) if r["state"] == "passed"][-1]["commit"]
        assert mq.tree_has(bench.repo, landed, f"work/{a['ticket']}.txt"), f"{ref}\n{table}"
        assert not mq.tree_has(bench.repo, landed, f"work/{b['ticket']}.txt"), f"{ref}\n{table}"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_main_moved_by_hand_rebuilds_every_candidate(bench: Bench) -> None:
    """A person commits to main while four queued gates run: every candidate is built
    again on it, everything lands on top of it, and no return is spent."""
    names = ["m1", "m2", "m3", "m4"]
    mq.setup(
        bench,
        mq.queue_flow(bench, gate_s=1.0, hold=True),
        {name: mq.queue_ticket(f"Ticket {name}") for name in names},
        parallel=len(names),
    )
    before = set(mq.reflog(bench.repo))
    bench.start()
    aliases = mq.post_in_order(bench, names)
    wait_until(lambda: mq.gates_running(bench, aliases.values()), timeout=30)
    hand = bench.commit_on_main({"hand.txt": "a person's commit\n"}, "by hand")
    bench.release(mq.HOLD)
    runs = mq.wait_runs(bench, aliases.values())
    table = mq.summary(runs)

    check_clean(bench, runs, before, gates_per_run=2.0, also_allowed=frozenset({hand}))
    assert mq.is_ancestor(bench.repo, hand, bench.rev("main")), table
    for ref, run in runs.items():
        assert len(mq.gate_rows(run)) <= 2, f"{ref}\n{table}"
        assert len(mq.rows(run, "sync")) >= 2, f"{ref}: not rebuilt\n{table}"
        landed = [r for r in mq.gate_rows(run) if r["state"] == "passed"][-1]["commit"]
        assert mq.is_ancestor(bench.repo, hand, landed), f"{ref}: tested without it\n{table}"
        rebuilt = mq.kinds(mq.events(bench, run["id"]), "queue_rebuilt")
        assert [e for e in rebuilt if e["data"].get("by") is None], f"{ref}\n{table}"


@pytest.mark.on_ray
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_abort_mid_queue_rebuilds_those_behind(bench: Bench) -> None:
    """``sloopctl abort`` of the second of four queued runs: it settles aborted and
    leaves, the two behind it are rebuilt without it and land, main never holds it."""
    names = ["x1", "x2", "x3", "x4"]
    mq.setup(
        bench,
        mq.queue_flow(bench, gate_s=1.0, hold=True),
        {name: mq.queue_ticket(f"Ticket {name}") for name in names},
        parallel=len(names),
    )
    before = set(mq.reflog(bench.repo))
    bench.start()
    aliases = mq.post_in_order(bench, names)
    wait_until(lambda: mq.gates_running(bench, aliases.values()), timeout=30)
    done = mq.sloopctl(bench, "abort", "x2#1", "--reason", "not wanted")
    assert done.returncode == 0, done
    bench.release(mq.HOLD)
    runs = mq.wait_runs(bench, aliases.values())
    table = mq.summary(runs)
    aborted = runs["x2#1"]

    good = {ref: run for ref, run in runs.items() if ref != "x2#1"}
    check_clean(bench, good, before, gates_per_run=2.0)
    assert aborted["state"] == "aborted", table
    assert "not wanted" in aborted["reason"], table
    work = f"work/{aborted['ticket']}.txt"
    assert all(not mq.tree_has(bench.repo, c, work) for c in mq.reflog(bench.repo)), table
    assert mq.kinds(mq.events(bench, aborted["id"]), "queue_left"), table
    assert len(mq.gate_rows(runs["x1#1"])) == 1, table
    assert mq.kinds(mq.events(bench, runs["x1#1"]["id"]), "queue_rebuilt") == [], table
    for ref in ("x3#1", "x4#1"):
        found, cut = rebuilt_by(bench, runs[ref], aborted["id"])
        assert found, f"{ref}: no queue_rebuilt naming {aborted['id']}\n{table}"
        # Its gate was running on a candidate holding x2 when x2 left: cut short.
        assert [r for r in cut if r["stage"] == mq.GATE], f"{ref}\n{table}"
        assert all(r["state"] == "failed" for r in cut), f"{ref}\n{table}"
        assert len(mq.gate_rows(runs[ref])) == 2, f"{ref}\n{table}"


@pytest.mark.on_ray
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_panel_as_the_gate(bench: Bench) -> None:
    """The gate is a panel of two reviewers who pass through ``sloopctl verdict``."""
    install_probe(bench)
    seat: list[dict[str, Any]] = [
        {"do": "sleep", "seconds": 0.5},
        {"do": "ctl", "key": "v", "argv": ["verdict", "pass", "--reason", "fine"]},
    ]
    reviewers = [
        {
            "target": target,
            "command": probe_argv(bench, bench.flag(f"{target}-{{run}}-{{attempt}}.json"), seat),
        }
        for target in ("claude", "codex")
    ]
    review = {"name": "review", "action": "agent", "result_check": "panel", "reviewers": reviewers}
    names = ["p1", "p2", "p3"]
    mq.setup(
        bench,
        mq.queue_flow(bench, gate=review),
        {name: mq.queue_ticket(f"Ticket {name}") for name in names},
        parallel=len(names),
    )
    before = set(mq.reflog(bench.repo))
    bench.start()
    mq.post_all(bench, names)
    runs = mq.wait_runs(bench, [f"{name}#1" for name in names])
    table = mq.summary(runs)

    check_clean(bench, runs, before, gate="review")
    for ref, run in runs.items():
        (panel,) = [r for r in mq.rows(run, "review") if r["state"] == "passed"][-1:]
        assert [s["verdict"] for s in panel["reviewers"]] == ["pass", "pass"], f"{ref}\n{table}"
        assert panel["commit"] == mq.merged_commit(run), f"{ref}\n{table}"


@pytest.mark.on_ray
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_rebase_mode_candidates_land_as_a_line(bench: Bench) -> None:
    """``mode = "rebase"``: candidates are the runs' commits replayed on the one ahead,
    so main gains one commit per run and no merge commit."""
    names = ["r1", "r2", "r3", "r4"]
    mq.setup(
        bench,
        mq.queue_flow(bench, gate_s=1.0, mode="rebase"),
        {name: mq.queue_ticket(f"Ticket {name}") for name in names},
        parallel=len(names),
    )
    start = bench.rev("main")
    before = set(mq.reflog(bench.repo))
    bench.start()
    mq.post_all(bench, names)
    runs = mq.wait_runs(bench, [f"{name}#1" for name in names])
    table = mq.summary(runs)

    check_clean(bench, runs, before)
    assert git(bench.repo, "rev-list", "--merges", f"{start}..main") == "", table
    line = git(bench.repo, "rev-list", "--first-parent", f"{start}..main").split()
    assert len(line) == len(names), table


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_queue_is_visible_in_show_and_events(bench: Bench) -> None:
    """Four queued runs, a window of two: the dashboard's ``queue`` and ``show RUN``'s
    ``queue`` say each one's place, state, candidate and what it is built on; the
    events say when each joined and landed."""
    names = ["v1", "v2", "v3", "v4"]
    mq.setup(
        bench,
        mq.queue_flow(bench, gate_s=1.0, hold=True),
        {name: mq.queue_ticket(f"Ticket {name}") for name in names},
        parallel=len(names),
        merge_window=2,
    )
    bench.start()
    tip = bench.rev("main")
    aliases = mq.post_in_order(bench, names[:2])
    aliases.update(mq.post_in_order(bench, names[2:], until="queue"))
    ids = {name: bench.show_run(alias)["id"] for name, alias in aliases.items()}  # type: ignore[index]

    def full() -> list[dict[str, Any]] | None:
        queue: list[dict[str, Any]] | None = bench.dashboard().get("queue")
        return queue if queue is not None and len(queue) == len(names) else None

    queue = wait_until(full, timeout=30)
    dashboard = bench.dashboard()
    assert dashboard["merge_window"] == 2, dashboard
    queue = dashboard["queue"]
    assert [e["run"] for e in queue] == [ids[n] for n in names], queue
    assert [e["alias"] for e in queue] == [aliases[n] for n in names], queue
    assert [e["position"] for e in queue] == [1, 2, 3, 4], queue
    for entry in queue:
        assert set(entry) >= mq.QUEUE_ENTRY_KEYS, entry
        assert entry["state"] in mq.QUEUE_STATES, entry
        assert entry["rebuilds"] == 0, entry
    first, second, third, fourth = queue
    assert first["state"] == second["state"] == "gating", queue
    assert (first["onto"], first["onto_commit"]) == ([], tip), queue
    assert (second["onto"], second["onto_commit"]) == ([ids["v1"]], first["candidate"]), queue
    assert mq.is_ancestor(bench.repo, first["candidate"], second["candidate"]), queue
    for name, entry in (("v1", first), ("v2", second)):
        ticket = bench.show_run(aliases[name])["ticket"]  # type: ignore[index]
        assert entry["ticket"] == ticket, entry
        assert mq.tree_has(bench.repo, second["candidate"], f"work/{ticket}.txt"), entry
    for entry in (third, fourth):  # outside the window of two: not built yet
        assert entry["state"] == "waiting", entry
        assert entry["candidate"] is None, entry
        assert entry["waiting_for"]["reason"] == "window", entry
    assert first["joined_at_ms"] <= second["joined_at_ms"] <= third["joined_at_ms"], queue
    for name, entry in zip(names, queue, strict=True):
        shown = bench.show_run(aliases[name])["queue"]  # type: ignore[index]
        keep = ("run", "position", "candidate", "onto", "onto_commit")
        assert {k: shown[k] for k in keep} == {k: entry[k] for k in keep}, (shown, entry)

    bench.release(mq.HOLD)
    runs = mq.wait_runs(bench, aliases.values())
    table = mq.summary(runs)
    assert {run["state"] for run in runs.values()} == {"merged"}, table
    assert bench.dashboard()["queue"] == []
    for name in names:
        run = runs[aliases[name]]
        assert run["queue"] is None, run
        found = mq.kinds(mq.events(bench, run["id"]), *mq.QUEUE_EVENTS)
        assert [e["kind"] for e in found] == ["queue_joined", "queue_landed"], (name, found)
        joined, landed = found
        assert joined["data"]["position"] >= 1, joined
        assert landed["data"]["commit"] == mq.merged_commit(run), (landed, table)
        assert landed["data"]["waited_ms"] >= 0, landed


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sloopctl_show_says_a_runs_place_in_the_queue(bench: Bench) -> None:
    """A person reads ``sloopctl show RUN``: "2nd in the merge queue, its tests running
    on main + R1" (issue 32, "Visible")."""
    names = ["h1", "h2"]
    mq.setup(
        bench,
        mq.queue_flow(bench, gate_s=0.2, hold=True),
        {name: mq.queue_ticket(f"Ticket {name}") for name in names},
        parallel=len(names),
    )
    bench.start()
    aliases = mq.post_in_order(bench, names)
    first = bench.show_run(aliases["h1"])
    assert first is not None
    said = mq.sloopctl(bench, "show", aliases["h2"])
    bench.release(mq.HOLD)
    assert said.returncode == 0, said
    assert "2nd in the merge queue" in said.stdout, said.stdout
    assert f"main + {first['id']}" in said.stdout, said.stdout
    runs = mq.wait_runs(bench, aliases.values())
    assert {run["state"] for run in runs.values()} == {"merged"}, mq.summary(runs)
