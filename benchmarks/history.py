"""A store with a long history, for benchmark 9: many tickets, settled runs, logs, events.

Written through the store's own writer and named queries, as ``benchmarks.fixtures``
writes its stores: tickets with ``ticket_insert``, runs with ``run_insert``,
``run_started`` and ``run_settle`` (each carrying the default flow's snapshot, as a
claim stores it), each run's walk with ``stage_log_append`` (the steps a real run of
the default flow appends, checked by ``walk.replay`` to end as the run did), its log
records with ``log_insert`` (bodies built like ``LogSink``), and its events with
``event_insert``.

Each ticket has ``runs_per_ticket`` attempts: the earlier ones failed at implement or
ended needing review after the merge's returns, and the last one merged (seven in ten),
failed or needs review; the ticket's state is its last run's.  Log records are spread
over the runs (4 to 36 each, scaled to the total asked for), each run's split over its
executions as an agent run's is: most of it the agent's, a few lines per git stage.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import orjson

from benchmarks.fixtures import BASE_MS, add_ticket, flow_snapshot, log_body, log_text
from sloopd.flows import walk
from sloopd.flows.flow import default_flow
from sloopd.store import Store, Transaction

BATCH = 20_000
RUN_SPACING_MS = 60_000
STEP_MS = 4_000  # between two steps of a run's walk
COMMIT = "0123456789abcdef0123456789abcdef01234567"
# A step: (kind, stage, attempt, data).
Step = tuple[str, str | None, int | None, dict[str, Any]]


def _ok(source: str) -> dict[str, Any]:
    return {"passed": True, "exit_code": 0, "verdict_source": source, "commit": COMMIT}


def _merge_failed() -> dict[str, Any]:
    reason = "main moved: not a fast-forward"
    return {"passed": False, "exit_code": None, "verdict_source": "git", "reason": reason}


def _walk(outcome: str) -> list[Step]:
    """The steps a default-flow run appends on its way to ``outcome``."""
    steps: list[Step] = [(walk.STAGE_STARTED, "implement", 1, {})]
    if outcome == "failed":
        failed = {"passed": False, "exit_code": 1, "verdict_source": "exit_code"}
        steps.append((walk.STAGE_FINISHED, "implement", 1, {**failed, "reason": "exit code 1"}))
        halted = {"state": "failed", "halt": "fail_action", "reason": "implement failed"}
        return [*steps, (walk.HALTED, None, None, halted)]
    steps.append((walk.STAGE_FINISHED, "implement", 1, _ok("exit_code")))
    merges = 1 if outcome == "merged" else 4  # needs_review: three returns, all spent
    for attempt in range(1, merges + 1):
        steps.append((walk.STAGE_STARTED, "sync", attempt, {}))
        steps.append((walk.STAGE_FINISHED, "sync", attempt, _ok("git")))
        steps.append((walk.STAGE_STARTED, "merge", attempt, {}))
        if outcome == "merged":
            intent = {"ref": "refs/heads/main", "from": COMMIT, "to": COMMIT}
            steps.append((walk.MERGE_INTENT, "merge", attempt, intent))
            steps.append((walk.STAGE_FINISHED, "merge", attempt, _ok("git")))
        else:
            steps.append((walk.STAGE_FINISHED, "merge", attempt, _merge_failed()))
            if attempt < merges:
                steps.append((walk.RETURNED, "merge", attempt, {"to": "sync"}))
    halt = None if outcome == "merged" else "return_budget_exhausted"
    reason = None if outcome == "merged" else "merge failed 4 times"
    return [*steps, (walk.HALTED, None, None, {"state": outcome, "halt": halt, "reason": reason})]


WALKS = {outcome: _walk(outcome) for outcome in ("merged", "failed", "needs_review")}


def check_walks() -> None:
    """Each walk replays against the default flow to the outcome it is stored with."""
    flow = default_flow()
    for outcome, steps in WALKS.items():
        rows = [
            walk.LogRow(seq, kind, stage, attempt, None, BASE_MS + seq, data)
            for seq, (kind, stage, attempt, data) in enumerate(steps, 1)
        ]
        state = walk.replay(flow, rows)
        if state.corrupt is not None or state.outcome != outcome:
            raise RuntimeError(f"the {outcome} walk replays as {state.outcome}: {state.corrupt}")


def executions(outcome: str) -> list[tuple[str, int]]:
    return [(s, a) for k, s, a, _ in WALKS[outcome] if k == walk.STAGE_STARTED and s and a]


@dataclass
class History:
    state_dir: Path
    tickets: list[tuple[str, str, str]]  # (id, name, project)
    runs: list[str]
    records: int
    events: int
    projects: list[str]


def outcome_of(ticket: int, attempt: int, last: int) -> str:
    if attempt < last:
        return "failed" if (ticket + attempt) % 3 else "needs_review"
    shape = ticket % 10
    return "merged" if shape < 7 else ("failed" if shape < 9 else "needs_review")


def build_history(
    state_dir: Path,
    tickets: int = 10_000,
    runs_per_ticket: int = 5,
    records: int = 1_000_000,
    projects: int = 20,
) -> History:
    check_walks()
    snapshot = flow_snapshot()
    project_names = [f"proj-{p:02d}" for p in range(projects)]
    made: list[tuple[str, str, str]] = []
    runs: list[tuple[str, str, str]] = []  # (run id, ticket id, outcome)
    events: list[dict[str, Any]] = []
    store = Store.open(state_dir)
    try:
        with store.writer.transaction() as tx:
            for i in range(tickets):
                name, project = f"task-{i:05d}", project_names[i % projects]
                state = outcome_of(i, runs_per_ticket, runs_per_ticket)
                ticket = add_ticket(tx, name, project, state, BASE_MS)
                made.append((ticket, name, project))
                for attempt in range(1, runs_per_ticket + 1):
                    outcome = outcome_of(i, attempt, runs_per_ticket)
                    now = _run_ms(len(runs))
                    run = _settled_run(tx, ticket, name, attempt, outcome, now, snapshot)
                    runs.append((run, ticket, outcome))
                    events += _run_events(ticket, run, name, attempt, outcome, now)
        steps = (
            _step_row(run, step, _run_ms(i) + 200 + seq * STEP_MS)
            for i, (run, _, outcome) in enumerate(runs)
            for seq, step in enumerate(WALKS[outcome])
        )
        _insert(store, "stage_log_append", steps)
        _insert(store, "event_insert", iter(events))
        counts = _log_counts(len(runs), records)
        logs = (
            row
            for i, ((run, _, outcome), n) in enumerate(zip(runs, counts, strict=True))
            for row in _log_rows(run, n, executions(outcome), _run_ms(i))
        )
        _insert(store, "log_insert", logs)
    finally:
        store.close()
    return History(state_dir, made, [r for r, _, _ in runs], records, len(events), project_names)


def _settled_run(
    tx: Transaction, ticket: str, name: str, attempt: int, outcome: str, now: int, snapshot: str
) -> str:
    alias = f"{name}#{attempt}"
    values = {"alias": alias, "ticket": ticket, "attempt": attempt, "trigger": None}
    values |= {"flow": "default", "snapshot": snapshot, "branch": f"sloop/{alias}", "now": now}
    row = tx.one("run_insert", values)
    assert row is not None
    run = str(row[0])
    tx.run("run_started", {"id": run, "now": now + 100})
    halted = WALKS[outcome][-1][3]
    settle = {"id": run, "state": outcome, "now": now + 40_000, "halt": halted["halt"]}
    settle |= {"reason": halted["reason"], "agent_exit_code": 0 if outcome != "failed" else 1}
    tx.run("run_settle", {**settle, "classification": None})
    return run


def _run_events(
    ticket: str, run: str, name: str, attempt: int, outcome: str, now: int
) -> list[dict[str, Any]]:
    halted = WALKS[outcome][-1][3]
    started = {"worktree": f"/var/lib/sloop/checkouts/{run}", "branch": f"sloop/{name}#{attempt}"}
    return [
        {"kind": kind, "at": now + dt, "ticket": ticket, "run": run, "data": _json(data)}
        for kind, dt, data in (
            ("run_claimed", 0, {}),
            ("run_started", 100, started),
            ("run_finished", 40_000, halted),
        )
    ]


def _json(data: dict[str, Any]) -> str:
    return orjson.dumps(data).decode()


def _run_ms(index: int) -> int:
    """When the index-th run was claimed: one a minute, oldest first."""
    return BASE_MS + (index + 1) * RUN_SPACING_MS


def _step_row(run: str, step: Step, at: int) -> dict[str, Any]:
    kind, stage, attempt, data = step
    return {
        "run": run,
        "kind": kind,
        "stage": stage,
        "attempt": attempt,
        "seat": None,
        "at": at,
        "data": _json(data),
    }


def _log_counts(runs: int, records: int) -> list[int]:
    """Records per run: 4 to 36, scaled so that they sum to ``records``."""
    raw = [4 + (i * 7919) % 33 for i in range(runs)]
    scale = records / sum(raw)
    counts, done, total = [], 0, 0
    for n in raw:  # cumulative rounding: the sum is exact, no run takes the remainder
        total += n
        upto = round(total * scale)
        counts.append(upto - done)
        done = upto
    return counts


def _log_rows(
    run: str, n: int, execs: list[tuple[str, int]], base_ms: int
) -> Iterator[tuple[Any, ...]]:
    """``n`` records of one run over its executions, each opened by its system line:
    a line more per git stage, the rest the agent's (implement comes first)."""
    execs = execs[:n]
    shares = [1] * len(execs)
    left = n - len(execs)
    for i, (stage, _) in enumerate(execs):
        if stage != "implement" and left > 0:
            shares[i] += 1
            left -= 1
    shares[0] += left
    position = 0
    stage_positions: dict[str, int] = {}
    for (stage, attempt), share in zip(execs, shares, strict=True):
        for k in range(share):
            position += 1
            stage_positions[stage] = stage_positions.get(stage, 0) + 1
            ts = base_ms + 200 + position * 50
            stream = "system" if k == 0 else ("stderr" if position % 17 == 0 else "stdout")
            text = f"stage '{stage}' execution {attempt} started" if k == 0 else log_text(position)
            body = log_body(position, ts, stage, attempt, stream, text)
            yield (run, position, stage, attempt, stage_positions[stage], k + 1, stream, ts, body)


def _insert(store: Store, query: str, rows: Iterator[Any]) -> None:
    batch: list[Any] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= BATCH:
            _write(store, query, batch)
            batch = []
    if batch:
        _write(store, query, batch)


def _write(store: Store, query: str, batch: list[Any]) -> None:
    with store.writer.transaction() as tx:
        # Named parameters bind from the dicts as they are (apsw's executemany).
        tx.run_many(query, cast(list[tuple[Any, ...]], batch))
