"""A restart while runs stand in the merge queue: they continue, in their old order
(issue 38 with issue 32's queue).

The flow: ``work`` (an agent that commits ``landed/<run>.txt``) → ``sync`` → ``test``
(a command gate that waits for its ticket's flag file, ``go-<ticket>``) → ``merge``
(``ff_only``).  Runs are posted one at a time, each once the one before has its gate
running, so the queue's order is the posting order and every candidate holds the
work of the runs ahead (main + A, main + A + B, ...).  The daemon is then killed
with SIGKILL, or stopped with SIGTERM, and started again.  The queue lived in
memory, so the new daemon builds it again (sloopd.resume.landing_order): each run
joins it in its old order, and one past its ``sync`` is sent back there with a
``rebuilt`` row in its stage log (no returns spent), so every candidate is built
again on main, in the old order, before a gate runs or a merge lands.

What must hold: every run merged, the same run per ticket (no new attempt, no
ticket queued again), ``work`` executed once per run, the gate a stop cut short
ended ``interrupted`` and ran again on a rebuilt candidate, the runs landed in
their old order, and main holds each run's work exactly once.  The wire shows the
rebuild as a second ``sync`` row after the interrupted gate; the stage log's
``rebuilt`` row (read from the store) says why.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from tests.support import mergequeue as mq
from tests.support.agents import Bench
from tests.support.daemon import git, query, wait_until

GATE = mq.GATE
REBUILT_CAUSE = "the daemon restarted: the merge queue builds its candidates again, in order"
WAIT_LIMIT_S = "150"  # a held gate gives up after this long (exit 97); ample for a restart


def _flow(bench: Bench) -> list[dict[str, Any]]:
    work = bench.argv(
        "--env-dump",
        bench.flag("work-{run}-{attempt}.json"),
        "--write",
        "landed/{run}.txt={ticket}",
    )
    gate = bench.argv(
        "--env-dump",
        bench.flag("gate-{run}-{attempt}.json"),
        "--wait-limit",
        WAIT_LIMIT_S,
        "--wait-for",
        bench.flag("go-{ticket}"),
    )
    return [
        {"name": "work", "action": "agent", "command": work},
        {"name": "sync", "action": "sync"},
        {"name": GATE, "action": "command", "command": gate, "network": False},
        {"name": "merge", "action": "ff_only", "return_to": "sync", "returns": 3},
    ]


def _setup(bench: Bench, names: list[str]) -> None:
    tickets = {name: mq.queue_ticket(f"Ticket {name}") for name in names}
    mq.setup(bench, _flow(bench), tickets, parallel=len(names), merge_window=len(names))


def _post_in_order(bench: Bench, names: list[str]) -> dict[str, dict[str, Any]]:
    """Post each ticket once the one before has its gate running (its child started:
    it wrote its dump): name -> run detail."""
    runs: dict[str, dict[str, Any]] = {}
    for name in names:
        bench.post(name)
        run = runs[name] = bench.wait_stage_running(f"{name}#1", GATE, timeout=30)
        dump = bench.path(f"gate-{run['id']}-1.json")
        wait_until(dump.exists, timeout=30)
    return runs


def _release(bench: Bench, run: dict[str, Any]) -> None:
    bench.release(f"go-{run['ticket']}")


def _stop(bench: Bench, how: str) -> None:
    assert bench.daemon is not None
    if how == "kill9":
        bench.daemon.kill9()
    else:
        assert bench.stop() == 0, bench.log()


def _queue(bench: Bench) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = bench.dashboard().get("queue") or []
    return entries


def _queue_is(bench: Bench, ids: list[str], states: dict[str, str]) -> list[dict[str, Any]] | None:
    """The dashboard's queue once it lists ``ids`` in that order and each run in
    ``states`` is in that state; None until then."""
    queue = _queue(bench)
    if [entry["run"] for entry in queue] != ids:
        return None
    if any(entry["state"] != states.get(entry["run"], entry["state"]) for entry in queue):
        return None
    return queue


def _check_chain(bench: Bench, queue: list[dict[str, Any]], main: str) -> None:
    """Each candidate is built on the one ahead of it; the first on ``main``."""
    onto_commit, onto = main, list[str]()
    for entry in queue:
        assert (entry["onto_commit"], entry["onto"]) == (onto_commit, onto), queue
        assert entry["candidate"] is not None, queue
        assert mq.is_ancestor(bench.repo, onto_commit, entry["candidate"]), queue
        onto_commit, onto = entry["candidate"], [*onto, entry["run"]]


def _gate_running(bench: Bench, run_id: str, attempt: int) -> bool:
    shown = bench.show_run(run_id)
    assert shown is not None
    assert not shown["terminal"], mq.summary({run_id: shown})
    return any(r["attempt"] == attempt and r["state"] == "running" for r in mq.rows(shown, GATE))


def _rebuilt_rows(bench: Bench, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The run's ``rebuilt`` stage-log rows: (stage, data)."""
    found = query(
        bench.state_dir,
        "SELECT stage, data FROM stage_log WHERE run = ? AND kind = 'rebuilt' ORDER BY seq",
        (run_id,),
    )
    return [(str(stage), json.loads(data)) for stage, data in found]


def _dumps(bench: Bench, prefix: str, run_id: str) -> list[str]:
    return sorted(path.name for path in bench.path("").glob(f"{prefix}-{run_id}-*.json"))


def _check_landed_in_order(
    bench: Bench, runs: list[dict[str, Any]], start: str, table: str
) -> None:
    """Every run merged once, in the order of ``runs``; main holds each one's work."""
    merged = [mq.merged_commit(run) for run in runs]
    assert None not in merged, table
    # main's reflog: it moved from where it started to each landing, in that order, and
    # nowhere else (a candidate's first parent is the run's work, so main's first-parent
    # line does not tell the landings apart; its reflog does).
    moves = mq.reflog(bench.repo)[::-1]
    assert start in moves, (moves, table)
    assert moves[len(moves) - 1 - moves[::-1].index(start) :] == [start, *merged], (moves, table)
    for ahead, behind in itertools.pairwise(merged):
        assert mq.is_ancestor(bench.repo, str(ahead), str(behind)), table
    assert merged[-1] == bench.rev("main"), table
    finished = [[r for r in mq.rows(run, "merge") if r["state"] == "passed"] for run in runs]
    assert [len(rows) for rows in finished] == [1] * len(runs), table
    times = [rows[0]["finished_at_ms"] for rows in finished]
    assert times == sorted(times), table
    tree = set(git(bench.repo, "ls-tree", "-r", "--name-only", "main").split())
    subjects = git(bench.repo, "log", "--format=%s", f"{start}..main").splitlines()
    for run in runs:
        assert f"landed/{run['id']}.txt" in tree, (run["id"], table)
        text = git(bench.repo, "show", f"main:landed/{run['id']}.txt")
        assert text == run["ticket"], (run["id"], text)
        # One commit of its work, once: no ticket merged twice.
        assert subjects.count(f"agent {run['id']} work#1") == 1, (subjects, table)
    assert len([s for s in subjects if s.startswith("agent ")]) == len(runs), (subjects, table)


def _check_queue_events(run_id: str, found: list[dict[str, Any]]) -> None:
    """The run joined the old queue and the new one and landed once.  Between the two
    joins a clean stop may say it left (the queue goes with the daemon), but no run
    left the queue for good, so none was rebuilt for a run ahead leaving."""
    said = [(e["kind"], e["data"]) for e in found]
    kinds = [kind for kind, _ in said]
    assert kinds[0] == "queue_joined", (run_id, said)
    assert kinds[-1] == "queue_landed", (run_id, said)
    assert kinds.count("queue_joined") == 2, (run_id, said)
    assert kinds.count("queue_landed") == 1, (run_id, said)
    assert kinds.count("queue_left") <= 1, (run_id, said)
    if "queue_left" in kinds:
        assert kinds.index("queue_left") < len(kinds) - 1 - kinds[::-1].index("queue_joined")
    left_by = [data for kind, data in said if kind == "queue_rebuilt" and data.get("by")]
    assert left_by == [], (run_id, said)


def _check_one_run_per_ticket(bench: Bench, runs: list[dict[str, Any]], table: str) -> None:
    count = len(runs)
    assert query(bench.state_dir, "SELECT count(*) FROM runs") == [(count,)], table
    assert query(bench.state_dir, "SELECT count(*) FROM triggers") == [(count,)], table
    for run in runs:
        assert (run["state"], run["attempt"]) == ("merged", 1), table
        ticket = bench.ticket(run["ticket"])
        assert ticket["state"] == "merged", ticket
        assert [r["id"] for r in ticket["runs"]] == [run["id"]], ticket
        assert mq.returned(bench, run["id"]) == [], (run["id"], table)
        events = mq.events(bench, run["id"])
        kinds = [e["kind"] for e in events]
        assert "run_continued" in kinds, (run["id"], kinds)
        assert "run_aborted" not in kinds, (run["id"], kinds)
        _check_queue_events(run["id"], mq.kinds(events, *mq.QUEUE_EVENTS))
        # work executed once, before the stop, and its commit is the one main holds.
        (work,) = mq.rows(run, "work")
        assert (work["attempt"], work["state"]) == (1, "passed"), table
        assert mq.is_ancestor(bench.repo, work["commit"], "main"), table
        assert _dumps(bench, "work", run["id"]) == [f"work-{run['id']}-1.json"], table
        # The restart's rebuild: one ``rebuilt`` row with the restart's cause.
        rebuilt = _rebuilt_rows(bench, run["id"])
        assert [data.get("cause") for _, data in rebuilt] == [REBUILT_CAUSE], (run["id"], rebuilt)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["kill9", "sigterm"])
def test_gating_runs_continue_and_land_in_their_old_order(bench: Bench, how: str) -> None:
    """Three runs gating on main + A, main + A + B, main + A + B + C when the daemon
    stops: after the restart each is rebuilt, in order, and they land A, B, C."""
    names = ["a", "b", "c"]
    _setup(bench, names)
    start = bench.rev("main")
    bench.start()
    before = _post_in_order(bench, names)
    ids = [before[name]["id"] for name in names]
    gating = dict.fromkeys(ids, "gating")
    queue = wait_until(lambda: _queue_is(bench, ids, gating), timeout=30)
    _check_chain(bench, queue, start)
    old_candidates = [entry["candidate"] for entry in queue]
    _stop(bench, how)

    bench.start()
    # Every gate runs again, each on a candidate built again on main, in the old order.
    for run_id in ids:
        wait_until(lambda r=run_id: _gate_running(bench, r, 2), timeout=60)
    queue = wait_until(lambda: _queue_is(bench, ids, gating), timeout=30)
    _check_chain(bench, queue, start)
    assert all(entry["rebuilds"] == 0 for entry in queue), queue
    for name in names:
        _release(bench, before[name])
    settled = mq.wait_runs(bench, ids, timeout=90)
    runs = [settled[run_id] for run_id in ids]
    table = mq.summary(settled)

    assert [run["id"] for run in runs] == ids, table
    assert [run["alias"] for run in runs] == [f"{name}#1" for name in names], table
    _check_one_run_per_ticket(bench, runs, table)
    _check_landed_in_order(bench, runs, start, table)
    for run, old in zip(runs, old_candidates, strict=True):
        # Walk: work#1, sync#1, test#1 (cut short), sync#2 (the rebuild), test#2, merge#1.
        walked = [(r["stage"], r["attempt"], r["state"], r["ended_by"]) for r in run["stages"]]
        assert walked == [
            ("work", 1, "passed", None),
            ("sync", 1, "passed", None),
            (GATE, 1, "failed", "interrupted"),
            ("sync", 2, "passed", None),
            (GATE, 2, "passed", None),
            ("merge", 1, "passed", None),
        ], table
        sync1, sync2 = mq.rows(run, "sync")
        cut, gate = mq.gate_rows(run)
        assert sync1["commit"] == old, table
        # (The interrupted row keeps no commit: a cut-short execution's is not kept.)
        assert sync2["started_at_ms"] >= cut["finished_at_ms"], table
        # The gate that passed ran on the rebuilt candidate, and that is what landed.
        assert gate["commit"] == sync2["commit"] == mq.merged_commit(run), table
        assert len(_dumps(bench, "gate", run["id"])) == 2, table
        (stage, _data) = _rebuilt_rows(bench, run["id"])[0]
        assert stage == GATE, table
    # Rebuilt in the old order: each candidate after the one ahead of it was built.
    rebuilds = [mq.rows(run, "sync")[1] for run in runs]
    for ahead, behind in itertools.pairwise(rebuilds):
        assert behind["finished_at_ms"] >= ahead["finished_at_ms"], table
    assert bench.dashboard()["queue"] == []


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("how", ["kill9", "sigterm"])
def test_a_run_waiting_to_land_continues_behind_the_run_ahead(bench: Bench, how: str) -> None:
    """B's gate passed and B waits for A to land when the daemon stops: after the
    restart B is rebuilt on A's new candidate, waits again, and lands after A."""
    names = ["a", "b"]
    _setup(bench, names)
    start = bench.rev("main")
    bench.start()
    before = _post_in_order(bench, names)
    a_id, b_id = ids = [before[name]["id"] for name in names]
    _release(bench, before["b"])
    waiting = {a_id: "gating", b_id: "passed"}
    wait_until(lambda: _queue_is(bench, ids, waiting), timeout=30)
    shown = bench.show_run(b_id)
    assert shown is not None
    assert [r["state"] for r in mq.rows(shown, "merge")] == [], mq.summary({"b": shown})
    _stop(bench, how)

    bench.start()
    # A gates again; B, rebuilt on A's new candidate, passes its gate again and waits.
    wait_until(lambda: _gate_running(bench, a_id, 2), timeout=60)
    queue = wait_until(lambda: _queue_is(bench, ids, waiting), timeout=60)
    _check_chain(bench, queue, start)
    shown = bench.show_run(b_id)
    assert shown is not None
    assert mq.rows(shown, "merge") == [], mq.summary({"b": shown})
    assert bench.rev("main") == start
    _release(bench, before["a"])
    settled = mq.wait_runs(bench, ids, timeout=90)
    runs = [settled[run_id] for run_id in ids]
    table = mq.summary(settled)

    _check_one_run_per_ticket(bench, runs, table)
    _check_landed_in_order(bench, runs, start, table)
    a, b = runs
    assert [(r["attempt"], r["ended_by"]) for r in mq.gate_rows(a)] == [
        (1, "interrupted"),
        (2, None),
    ], table
    assert [r["state"] for r in mq.rows(a, "sync")] == ["passed", "passed"], table
    # B's first gate passed before the kill; nothing of B was cut short.  Its rebuild
    # was from the merge it waited for: a second sync and gate on A's new candidate.
    assert [(r["state"], r["ended_by"]) for r in mq.gate_rows(b)] == [
        ("passed", None),
        ("passed", None),
    ], table
    assert [r["state"] for r in mq.rows(b, "sync")] == ["passed", "passed"], table
    assert [stage for stage, _ in _rebuilt_rows(bench, b_id)] == ["merge"], table
    assert [stage for stage, _ in _rebuilt_rows(bench, a_id)] == [GATE], table
    landed_b = mq.merged_commit(b)
    assert mq.gate_rows(b)[-1]["commit"] == landed_b, table
    assert mq.is_ancestor(bench.repo, str(mq.merged_commit(a)), str(landed_b)), table
