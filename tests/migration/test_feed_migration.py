"""Schema 3 (0.7.0): a store written before it migrates and serves the same feeds.

A version-2 store holds what 0.4.0 to 0.6.0 wrote: log records whose stored
JSON lacks the cursor (0.4.0 wrote ``orjson.dumps(record)``, as bytes), records
with it (0.5.0 on), records from before stages were recorded (no stage or
attempt at all), events without their ticket's project.  The daemon migrates it
on start (after a backup) and must answer every ``logs`` selector form and
every ``events`` scope exactly, byte for byte, as a daemon whose store got the
same records through today's log sink and event writes.  Both stores also miss
one log position (a gap), so the range read of an unfiltered page must notice
and read by the index instead.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from sloopd.core.logsink import LogSink
from sloopd.flows.flow import default_flow
from sloopd.store import SCHEMA_VERSION, Store, db, migrations
from tests.migration.test_migrations import V1_SQL
from tests.support.daemon import DaemonProcess, make_repo, new_daemon, query, store_writable

BASE_MS = 1_790_000_000_000
SNAPSHOT = orjson.dumps(default_flow().to_json()).decode()
TICKETS = (("T1", "alpha-one", "alpha"), ("T2", "beta-one", "beta"), ("T3", "alpha-two", "alpha"))
RUNS = (("R1", "T1"), ("R2", "T2"), ("R3", "T3"))
GAP = ("R2", 60)  # a position no store holds


@dataclass(frozen=True)
class Line:
    run: str
    stage: str
    attempt: int
    stream: str
    text: str
    split: bool = False
    extra: dict[str, Any] | None = None

    def ts(self, index: int) -> int:
        return BASE_MS + index


def lines() -> list[Line]:
    """R1 and R2 walk the default flow twice; texts that JSON must escape included."""
    made: list[Line] = []
    rng = random.Random(3)
    for run in ("R1", "R2"):
        for stage, attempt, count in (
            ("implement", 1, 120),
            ("sync", 1, 8),
            ("implement", 2, 90),
            ("sync", 2, 5),
            ("merge", 2, 12),
        ):
            for n in range(count):
                stream = "stderr" if n % 13 == 5 else "stdout"
                text = f"{run} {stage}#{attempt} line {n}" + rng.choice(
                    ["", ' "quoted"', " tab\there", " ünïcødé ✓", " back\\slash", " \u2028"]
                )
                made.append(Line(run, stage, attempt, stream, text))
            if stage == "implement":
                made += [Line(run, stage, attempt, "stdout", "x" * 50, split=True)] * 3
                lost = {"lines": 7, "bytes": 70, "from_ms": 1, "to_ms": 2, "cause": "limit"}
                made.append(Line(run, stage, attempt, "system", "lost", extra={"dropped": lost}))
    return made


def body_0_4(line: Line, index: int) -> bytes:
    """The stored JSON as 0.4.0 wrote it: no cursor (``split`` and ``dropped`` alike)."""
    record: dict[str, Any] = {
        "ts_ms": line.ts(index),
        "stage": line.stage,
        "attempt": line.attempt,
        "stream": line.stream,
        "text": line.text,
    }
    if line.split:
        record["split"] = True
    if line.extra:
        record.update(line.extra)
    return orjson.dumps(record)


def write_common(conn: Any) -> None:
    for ordinal, (ticket, name, project) in enumerate(TICKETS, 1):
        conn.execute(
            "INSERT INTO tickets (ordinal, id, name, path, title, body, project, flow, priority,"
            " state, created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?, ?, '', ?, 'default', 0,"
            " 'failed', ?, ?)",
            (ordinal, ticket, name, f"tickets/{name}.md", name, project, BASE_MS, BASE_MS),
        )
    for ordinal, (run, ticket) in enumerate(RUNS, 1):
        name = next(n for t, n, _ in TICKETS if t == ticket)
        conn.execute(
            "INSERT INTO runs (ordinal, id, alias, ticket, attempt, state, trigger, flow,"
            " flow_snapshot, branch, worktree, claimed_at_ms, started_at_ms, finished_at_ms,"
            " agent_exit_code, halt, reason) VALUES (?, ?, ?, ?, 1, 'failed', NULL, 'default',"
            " ?, ?, '', ?, ?, ?, 1, 'fail_action', 'tests failed')",
            (ordinal, run, f"{name}#1", ticket, SNAPSHOT, f"sloop/{name}/1", *[BASE_MS] * 3),
        )


def events() -> list[dict[str, Any]]:
    rng = random.Random(5)
    made = []
    for n in range(330):
        if n % 50 == 7:
            made.append({"kind": "gate_changed", "ticket": None, "run": None})
            continue
        run, ticket = rng.choice(RUNS)
        made.append({"kind": "run_started", "ticket": ticket, "run": run if n % 3 else None})
    return [{**e, "at": BASE_MS + i, "data": f'{{"n":{i}}}'} for i, e in enumerate(made)]


LEGACY = [f"before stages {n}" for n in range(1, 6)]  # R3's records: no stage, no attempt


def make_v2_store(state_dir: Path) -> None:
    """What a 0.6.0 daemon leaves behind, run by run as each release wrote it."""
    state_dir.mkdir(parents=True)
    with store_writable(state_dir / db.STORE_FILE) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        with conn:
            conn.execute(V1_SQL)
            conn.execute("INSERT INTO schema_migrations VALUES (1, 'initial', 1000)")
            conn.execute("PRAGMA user_version = 1")
        migrations.apply(conn, migrations.MIGRATIONS[1])
        with conn:
            write_common(conn)
            positions: dict[str, int] = {}
            stage_ordinals: dict[tuple[str, str], int] = {}
            execution_ordinals: dict[tuple[str, str, int], int] = {}
            for index, line in enumerate(lines()):
                position = positions[line.run] = positions.get(line.run, 0) + 1
                stage_key = (line.run, line.stage)
                stage_ordinals[stage_key] = stage_ordinals.get(stage_key, 0) + 1
                key = (line.run, line.stage, line.attempt)
                execution_ordinals[key] = execution_ordinals.get(key, 0) + 1
                old = body_0_4(line, index)
                # R1 as 0.4.0 stored it (bytes, no cursor); R2 as 0.5.0 and 0.6.0 did.
                body: str | bytes = old
                if line.run == "R2":
                    body = f'{{"cursor":"{position}",' + old.decode()[1:]
                conn.execute(
                    "INSERT INTO log_records VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        line.run,
                        position,
                        line.stage,
                        line.attempt,
                        stage_ordinals[stage_key],
                        execution_ordinals[key],
                        line.stream,
                        line.ts(index),
                        body,
                    ),
                )
            for position, text in enumerate(LEGACY, 1):
                record = {"ts_ms": BASE_MS + position, "stream": "stdout", "text": text}
                conn.execute(
                    "INSERT INTO log_records VALUES ('R3', ?, NULL, NULL, ?, ?, 'stdout', ?, ?)",
                    (position, position, position, BASE_MS + position, orjson.dumps(record)),
                )
            conn.execute("DELETE FROM log_records WHERE run = ? AND position = ?", GAP)
            for event in events():
                conn.execute(
                    "INSERT INTO events (kind, at_ms, ticket, run, data)"
                    " VALUES (:kind, :at, :ticket, :run, :data)",
                    event,
                )


def make_fresh_store(state_dir: Path) -> None:
    """The same records written today: the log sink, the event query (schema 3)."""
    Store.open(state_dir).close()
    with store_writable(state_dir / db.STORE_FILE) as conn, conn:
        write_common(conn)
    store = Store.open(state_dir)
    try:
        sink = LogSink(store)
        for index, line in enumerate(lines()):
            sink.append(
                line.run,
                line.stage,
                line.attempt,
                line.stream,
                line.text,
                line.split,
                ts_ms=line.ts(index),
                extra=line.extra,
            )
        sink.flush()
        with store.writer.transaction() as tx:
            tx.run_many("event_insert", events())  # type: ignore[arg-type]
    finally:
        store.close()
    with store_writable(state_dir / db.STORE_FILE) as conn:
        conn.execute("DELETE FROM log_records WHERE run = ? AND position = ?", GAP)


def raw(daemon: DaemonProcess, verb: str, args: dict[str, Any]) -> bytes:
    client = daemon.clients[0] if daemon.clients else daemon.client()
    client.send_raw(orjson.dumps({"v": 1, "id": "same", "verb": verb, "args": args}) + b"\n")
    return client.read_raw()


def every_page(daemon: DaemonProcess, verb: str, args: dict[str, Any]) -> list[bytes]:
    """Every reply line, following next_cursor while pages have more (logs: until complete)."""
    pages, after = [], args.get("after")
    while True:
        line = raw(daemon, verb, {**args, **({"after": after} if after else {})})
        pages.append(line)
        data = orjson.loads(line)["data"]
        more = data.get("complete") is False if verb == "logs" else bool(data["events"])
        if not more or len(pages) > 50:
            return pages
        after = data["next_cursor"]
        args = {k: v for k, v in args.items() if k != "tail"}


LOGS_ASKED: list[dict[str, Any]] = [
    {},
    {"after": "37"},
    {"after": "59"},  # right before the gap (on R2)
    {"tail": 5},
    {"tail": 150},
    {"tail": 40, "after": "100"},
    {"stage": "implement"},
    {"stage": "implement#2"},
    {"stage": "sync"},
    {"stage": "sync#1", "tail": 3},
    {"stage": "merge", "after": "150"},
    {"stage": "implement", "tail": 120},
    {"stage": "merge#1"},  # never reached
]
SCOPES = ["project:alpha", "project:beta", "alpha-", "T1", "R2", "beta-one#1", "T3"]


def test_a_version_2_store_migrates_and_serves_the_same_feeds(sandbox: Path) -> None:
    old_root, new_root = sandbox / "old", sandbox / "new"
    old_root.mkdir()
    new_root.mkdir()
    migrated = new_daemon(old_root, make_repo(old_root))
    fresh = new_daemon(new_root, make_repo(new_root))
    make_v2_store(migrated.state_dir)
    make_fresh_store(fresh.state_dir)
    migrated.start()
    fresh.start()
    try:
        for run in ("R1", "R2"):
            for args in LOGS_ASKED:
                asked = {"run": run, **args}
                got = every_page(migrated, "logs", asked)
                assert got == every_page(fresh, "logs", asked), asked
                assert all(orjson.loads(line)["ok"] for line in got), (asked, got[0])
        for scope in SCOPES:
            for args in ({}, {"tail": 7}, {"after": "150"}, {"tail": 120, "after": "20"}):
                asked = {"scope": scope, **args}
                assert every_page(migrated, "events", asked) == every_page(
                    fresh, "events", asked
                ), asked
        legacy_records(migrated)
    finally:
        assert migrated.stop() == 0, migrated.log()
        assert fresh.stop() == 0, fresh.log()
    assert db.peek_version(migrated.state_dir) == SCHEMA_VERSION
    assert len(list((migrated.state_dir / "backups").glob("store-v2-*.sqlite3"))) == 1
    # Every stored body now carries its cursor, and every ticket's events their project.
    bodies = query(migrated.state_dir, "SELECT CAST(body AS TEXT) FROM log_records")
    assert bodies
    assert all(b.startswith('{"cursor":"') for (b,) in bodies)
    assert query(
        migrated.state_dir,
        "SELECT count(*) FROM events e JOIN tickets t ON t.id = e.ticket"
        " WHERE e.project IS NOT t.project",
    ) == [(0,)]


def legacy_records(daemon: DaemonProcess) -> None:
    """R3 holds only records from before stages were recorded: the first agent stage's."""
    expected = [
        {"cursor": str(n), "ts_ms": BASE_MS + n, "stream": "stdout", "text": text}
        for n, text in enumerate(LEGACY, 1)
    ]
    for args in ({}, {"stage": "implement"}, {"stage": "implement#1"}):
        data = orjson.loads(raw(daemon, "logs", {"run": "R3", **args}))["data"]
        assert data["records"] == expected, args
        assert data["complete"] is True
        assert data["terminal"] is True
    tail = orjson.loads(raw(daemon, "logs", {"run": "R3", "stage": "implement", "tail": 2}))
    assert tail["data"]["records"] == expected[-2:]
    assert tail["data"]["elided"] == 3
    for args in ({"stage": "sync"}, {"stage": "implement#2"}):
        data = orjson.loads(raw(daemon, "logs", {"run": "R3", **args}))["data"]
        assert data["records"] == [], args
        assert data["next_cursor"] == "5", args
