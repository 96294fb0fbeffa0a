"""``events`` scopes over many tickets, checked against the feed itself.

A store holds 2,600 events over 40 tickets in four projects, interleaved at
random, one ticket much busier than the rest, and repository-wide events
between them.  Through a real daemon, every project scope and a pattern scope
(20 tickets) are paged to the end, from the start and from cursors in the
middle, and tailed (less than, about, and more than a page): each must be
exactly the events of its tickets (and their runs) in feed order, the cursor
must move past what the scope left out, and no page may hold more than 100.
A ticket re-posted into another project takes its events along.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import orjson

from sloopd.store import Store, db
from tests.support.agents import Bench, printer_argv, sloop_toml, ticket_text
from tests.support.daemon import DaemonProcess, new_daemon, store_writable

PROJECTS = ("web", "api", "ops", "data")
TICKETS = 40
EVENTS = 2600
HOT = "T7"  # a sixth of the feed
PATTERN = "task-0[1-2]"  # task-010 .. task-029: 20 of the 40 tickets
PAGE = 100


def name_of(ordinal: int) -> str:
    return f"task-{ordinal:03d}"


def build(state_dir: Path) -> list[dict[str, Any]]:
    """The store; returns every event as the daemon must show it (cursor included)."""
    Store.open(state_dir).close()
    rng = random.Random(11)
    project_of = {f"T{i}": PROJECTS[i % len(PROJECTS)] for i in range(1, TICKETS + 1)}
    with store_writable(state_dir / db.STORE_FILE) as conn, conn:
        for i in range(1, TICKETS + 1):
            name = name_of(i)
            conn.execute(
                "INSERT INTO tickets (ordinal, id, name, path, title, body, project, flow,"
                " priority, state, created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?, ?, '', ?,"
                " 'default', 0, 'failed', 1, 1)",
                (i, f"T{i}", name, f"tickets/{name}.md", name, project_of[f"T{i}"]),
            )
    events: list[dict[str, Any]] = []
    for position in range(1, EVENTS + 1):
        if position % 37 == 0:
            ticket = run = None
        else:
            ticket = HOT if rng.random() < 1 / 6 else f"T{rng.randrange(1, TICKETS + 1)}"
            run = f"R{ticket[1:]}" if rng.random() < 0.7 else None
        events.append(
            {
                "kind": "gate_changed" if ticket is None else "run_started",
                "at": 1_000 + position,
                "ticket": ticket,
                "run": run,
                "data": orjson.dumps({"p": position}).decode(),
            }
        )
    store = Store.open(state_dir)
    try:
        with store.writer.transaction() as tx:
            tx.run_many("event_insert", events)  # type: ignore[arg-type]
    finally:
        store.close()
    return [
        {
            "cursor": str(p),
            "kind": e["kind"],
            "at_ms": e["at"],
            "ticket": e["ticket"],
            "run": e["run"],
            "data": {"p": p},
            "project": project_of.get(e["ticket"]),
        }
        for p, e in enumerate(events, 1)
    ]


def page_to_the_end(
    daemon: DaemonProcess, scope: str, after: str | None
) -> tuple[list[dict[str, Any]], str]:
    client = daemon.client()
    got: list[dict[str, Any]] = []
    while True:
        page = client.ok("events", {"scope": scope, **({"after": after} if after else {})})
        assert len(page["events"]) <= PAGE
        if not page["events"]:
            return got, page["next_cursor"]
        got += page["events"]
        after = page["next_cursor"]


def shown(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k != "project"} for e in events]


def test_project_and_pattern_scopes_are_exactly_their_tickets_events(sandbox: Path) -> None:
    from tests.support.daemon import make_repo

    daemon = new_daemon(sandbox, make_repo(sandbox))
    feed = build(daemon.state_dir)
    daemon.start()
    try:
        end = daemon.client().ok("events", {"tail": 1})["next_cursor"]  # daemon_started
        matcher = re.compile(PATTERN, re.IGNORECASE)
        scopes = {f"project:{p}": [e for e in feed if e["project"] == p] for p in PROJECTS}
        scopes[PATTERN] = [
            e for e in feed if e["ticket"] and matcher.search(name_of(int(e["ticket"][1:])))
        ]
        assert len(scopes[PATTERN]) > 2 * PAGE  # several pages, many tickets interleaved
        for scope, expected in scopes.items():
            expected = shown(expected)
            assert len({e["ticket"] for e in expected}) > 1, scope
            for after in (None, "1", "777", "1300", str(EVENTS - 5), str(EVENTS)):
                got, final = page_to_the_end(daemon, scope, after)
                wanted = [e for e in expected if after is None or int(e["cursor"]) > int(after)]
                assert got == wanted, (scope, after)
                assert final == end, (scope, after)  # past everything the scope left out
            for tail in (1, 7, 99, 100, 101, 250, 5000):
                for after in (None, "1500"):
                    args = {"scope": scope, "tail": tail, **({"after": after} if after else {})}
                    page = daemon.client().ok("events", args)
                    wanted = [e for e in expected if after is None or int(e["cursor"]) > 1500]
                    assert page["events"] == wanted[-tail:], args
                    assert page["next_cursor"] == end, args
    finally:
        assert daemon.stop() == 0, daemon.log()


def test_a_ticket_re_posted_into_another_project_takes_its_events_along(bench: Bench) -> None:
    quick = printer_argv(bench, [{"do": "lines", "text": "hi {n}", "first": 1, "last": 2}])
    flows = {"default": [{"name": "implement", "action": "agent", "command": quick}]}
    bench.setup(
        sloop_toml(bench.argv(), flows=flows),
        {"mover": ticket_text("Mover", project="before"), "stays": ticket_text("Stays")},
    )
    bench.start()
    mover = bench.post("mover")["ticket"]["id"]
    bench.wait_run("mover#1")
    before = bench.ok("events", {"scope": "project:before"})["events"]
    assert before
    assert {e["ticket"] for e in before} == {mover}
    assert [e["kind"] for e in before][-1] == "run_finished"

    (bench.repo / "tickets" / "mover.md").write_text(ticket_text("Mover", project="after"))
    assert bench.post("mover", hold=True)["ticket"]["project"] == "after"
    assert bench.ok("events", {"scope": "project:after"})["events"] == before
    # The old project has no ticket left, so it is no project any more: an empty pattern.
    assert bench.ok("events", {"scope": "project:before"})["events"] == []
    bench.post("stays", hold=True)
    assert bench.ok("events", {"scope": "project:after"})["events"] == before
