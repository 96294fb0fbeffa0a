"""Stores built for the benchmarks, through the store's own writer and named queries.

Log records are written with ``log_insert`` and bodies built exactly as
``sloopd.logsink.LogSink.append`` builds them (the wire JSON, cursor included), with the
per-run, per-stage and per-execution ordinals the sink keeps.  Tickets, runs and events
go through ``ticket_insert``, ``run_insert``, ``run_settle`` and ``event_insert``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import orjson

from sloopd.flows.flow import default_flow
from sloopd.store import Store, Transaction

BATCH = 20_000
BASE_MS = 1_700_000_000_000

# A walk through the default flow, each execution one contiguous block of the run's log:
# the agent stage three times, sync and merge after each (3 stages, attempts 1..3).
EXECUTIONS: tuple[tuple[str, int], ...] = tuple(
    (stage, attempt) for attempt in (1, 2, 3) for stage in ("implement", "sync", "merge")
)
# Shares of the log per stage: agents talk most, git stages little.
SHARE = {"implement": 0.8, "sync": 0.12, "merge": 0.08}

WORDS = (
    "compiling",
    "checking",
    "running",
    "tests",
    "module",
    "passed",
    "warning:",
    "src/billing/invoice.py",
    "ok",
    "collected",
    "items",
    "in",
    "0.42s",
    "def",
    "return",
    "assert",
)


def log_text(i: int) -> str:
    """A plausible output line of 30 to 110 characters."""
    words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(4 + i % 12)]
    return f"[{i:07d}] " + " ".join(words)


def log_body(
    position: int, ts: int, stage: str | None, attempt: int | None, stream: str, text: str
) -> str:
    """The stored body, exactly as LogSink.append builds it (cursor included)."""
    record: dict[str, Any] = {
        "ts_ms": ts,
        "stage": stage,
        "attempt": attempt,
        "stream": stream,
        "text": text,
    }
    return f'{{"cursor":"{position}",' + orjson.dumps(record).decode()[1:]


def flow_snapshot() -> str:
    return orjson.dumps(default_flow().to_json()).decode()


def add_ticket(tx: Transaction, name: str, project: str, state: str, now: int) -> str:
    row = tx.one(
        "ticket_insert",
        {
            "name": name,
            "path": f"tickets/{project}/{name}.md",
            "title": f"Ticket {name}",
            "body": f"The body of {name}.",
            "project": project,
            "flow": "default",
            "priority": 0,
            "state": state,
            "manual": 0,
            "now": now,
        },
    )
    assert row is not None
    return str(row[0])


def add_run(tx: Transaction, ticket: str, name: str, attempt: int, state: str, now: int) -> str:
    row = tx.one(
        "run_insert",
        {
            "alias": f"{name}#{attempt}",
            "ticket": ticket,
            "attempt": attempt,
            "trigger": None,
            "flow": "default",
            "snapshot": flow_snapshot(),
            "branch": f"sloop/{name}-{attempt}",
            "now": now,
        },
    )
    assert row is not None
    run = str(row[0])
    tx.run("run_started", {"id": run, "now": now})
    tx.run(
        "run_settle",
        {
            "id": run,
            "state": state,
            "now": now + 1000,
            "halt": None,
            "reason": None if state == "merged" else "a stage failed",
            "agent_exit_code": 0,
            "classification": None,
        },
    )
    return run


# --- one run's log -------------------------------------------------------------------


@dataclass
class LogStore:
    """A store holding one settled run with ``records`` log records."""

    state_dir: Path
    run: str
    records: int
    # (stage, attempt) -> (first position, last position, first stage ordinal)
    blocks: dict[tuple[str, int], tuple[int, int, int]] = field(default_factory=dict)
    bodies: list[bytes] = field(default_factory=list)  # kept only when asked for

    def stage_count(self, stage: str) -> int:
        return sum(b - a + 1 for (s, _), (a, b, _) in self.blocks.items() if s == stage)

    def stage_ordinal_at(self, stage: str, position: int) -> int:
        """How many records of ``stage`` sit at or before ``position``."""
        total = 0
        for (s, _), (first, last, _) in self.blocks.items():
            if s == stage and first <= position:
                total += min(last, position) - first + 1
        return total


def _plan(records: int) -> list[tuple[str, int, int]]:
    """(stage, attempt, how many records) for each execution block, summing to ``records``."""
    per_attempt = records / 3
    plan = []
    for stage, attempt in EXECUTIONS:
        plan.append((stage, attempt, int(per_attempt * SHARE[stage])))
    plan[-1] = (plan[-1][0], plan[-1][1], plan[-1][2] + records - sum(n for *_, n in plan))
    return plan


def log_rows(
    run: str, records: int, blocks: dict[tuple[str, int], tuple[int, int, int]]
) -> Iterator[tuple[Any, ...]]:
    """The rows LogSink would insert for ``records`` lines over the execution plan."""
    position = 0
    stage_positions: dict[str, int] = {}
    for stage, attempt, n in _plan(records):
        first = position + 1
        first_stage = stage_positions.get(stage, 0) + 1
        for k in range(n):
            position += 1
            stage_position = stage_positions.get(stage, 0) + 1
            stage_positions[stage] = stage_position
            ts = BASE_MS + position
            stream = "stderr" if position % 17 == 0 else "stdout"
            text = log_text(position)
            yield (
                run,
                position,
                stage,
                attempt,
                stage_position,
                k + 1,
                stream,
                ts,
                log_body(position, ts, stage, attempt, stream, text),
            )
        blocks[(stage, attempt)] = (first, position, first_stage)


def build_log_store(state_dir: Path, records: int, keep_bodies: bool = False) -> LogStore:
    """A fresh store: one ticket, one failed run of the default flow, ``records`` lines."""
    store = Store.open(state_dir)
    try:
        with store.writer.transaction() as tx:
            ticket = add_ticket(tx, "flood", "default", "failed", BASE_MS)
            run = add_run(tx, ticket, "flood", 1, "failed", BASE_MS)
        result = LogStore(state_dir, run, records)
        batch: list[tuple[Any, ...]] = []
        for row in log_rows(run, records, result.blocks):
            batch.append(row)
            if keep_bodies:
                body = row[8]
                result.bodies.append(body.encode() if isinstance(body, str) else body)
            if len(batch) >= BATCH:
                with store.writer.transaction() as tx:
                    tx.run_many("log_insert", batch)
                batch = []
        if batch:
            with store.writer.transaction() as tx:
                tx.run_many("log_insert", batch)
    finally:
        store.close()
    return result


# --- events across many tickets --------------------------------------------------------


@dataclass
class EventStore:
    state_dir: Path
    events: int
    tickets: list[tuple[str, str, str]]  # (id, name, project)
    runs: dict[str, list[str]]  # ticket id -> run ids
    projects: list[str]


EVENT_KINDS = ("stage_started", "stage_finished", "note", "run_started", "run_finished")


def build_event_store(
    state_dir: Path, events: int, tickets: int = 1000, projects: int = 10
) -> EventStore:
    """``events`` events over ``tickets`` tickets (two runs each).

    1% are repository-wide (no ticket); a tenth belong to the first ticket (the "hot"
    one, so that one ticket's and one run's pages are full at every size); the rest are
    spread at random over the other tickets, six in seven naming one of its runs.
    """
    rng = random.Random(6)
    store = Store.open(state_dir)
    try:
        made: list[tuple[str, str, str]] = []
        runs: dict[str, list[str]] = {}
        project_names = [f"proj-{p:02d}" for p in range(projects)]
        with store.writer.transaction() as tx:
            for i in range(tickets):
                name = f"task-{i:04d}"
                project = project_names[i % projects]
                ticket = add_ticket(tx, name, project, "failed", BASE_MS)
                made.append((ticket, name, project))
                runs[ticket] = [
                    add_run(tx, ticket, name, attempt, "failed", BASE_MS) for attempt in (1, 2)
                ]
        for start in range(1, events + 1, BATCH):
            last = min(events, start + BATCH - 1)
            batch = [_event(rng, p, made, runs) for p in range(start, last + 1)]
            with store.writer.transaction() as tx:
                # event_insert binds by name; apsw's executemany takes the dicts as they are.
                tx.run_many("event_insert", cast(list[tuple[Any, ...]], batch))
    finally:
        store.close()
    return EventStore(state_dir, events, made, runs, project_names)


def _event(
    rng: random.Random,
    position: int,
    tickets: list[tuple[str, str, str]],
    runs: dict[str, list[str]],
) -> dict[str, Any]:
    if position % 100 == 0:  # repository-wide: daemon and gate events
        return {
            "kind": "gate_changed",
            "at": BASE_MS + position,
            "ticket": None,
            "run": None,
            "data": '{"state":"open"}',
        }
    if position % 10 == 3:  # the hot ticket: a tenth of the feed, half of it its first run
        ticket = tickets[0][0]
        run: str | None = runs[ticket][0] if position % 20 == 3 else runs[ticket][1]
    else:
        ticket = tickets[1 + rng.randrange(len(tickets) - 1)][0]
        run = runs[ticket][rng.randrange(2)] if position % 7 else None
    return {
        "kind": EVENT_KINDS[position % len(EVENT_KINDS)],
        "at": BASE_MS + position,
        "ticket": ticket,
        "run": run,
        "data": orjson.dumps({"stage": "implement", "attempt": 1 + position % 3}).decode(),
    }
