"""The dashboard's kept queue rows are byte for byte what encoding the rows afresh gives,
through records replaced, tickets leaving and arriving, the clock and the gate moving."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import orjson

from sloopd.core.rows import Gate
from sloopd.store import TicketRow, TriggerRow
from sloopd.views.board import queue_facts, queue_fields
from sloopd.views.queue_bytes import QueueBytes

NOW = 1_800_000_000_000
STATES = ("ready", "running", "held", "needs_review", "ready", "ready", "failed")


def ticket(n: int, state: str, flow: str = "default", updated: int = 0) -> TicketRow:
    title = f'Ticket {n} "quoted" \u00e9\u2028'
    return TicketRow(
        f"T{n}", f"t{n}", title, f"tickets/t{n}.md", "repo", flow, n % 3, state, n, updated or n
    )


def daemon(parallel: int = 2) -> Any:
    return SimpleNamespace(
        config=SimpleNamespace(repo=SimpleNamespace(parallel=parallel), flows={"default": 1})
    )


def snapshot(tickets: list[TicketRow], triggers: list[TriggerRow], **more: Any) -> Any:
    return SimpleNamespace(
        tickets={t.id: t for t in tickets},
        triggers={t.id: t for t in triggers},
        gate=more.get("gate", Gate()),
        in_flight=more.get("in_flight", {}),
    )


def both(encoder: QueueBytes, snap: Any, now: int = NOW, parallel: int = 2) -> tuple[bytes, bytes]:
    facts, triggers, _, _ = queue_facts(daemon(parallel), snap, now)
    fields, _ = queue_fields(daemon(parallel), snap, now)
    fields.pop("next_wake", None)
    afresh = b"".join(
        (
            b',"queued_triggers":',
            orjson.dumps(fields["queued_triggers"]),
            b',"tickets":',
            orjson.dumps(fields["tickets"]),
        )
    )
    return encoder.encode(snap, facts, triggers), afresh


def test_kept_rows_equal_fresh_ones_as_the_queue_moves() -> None:
    encoder = QueueBytes()
    tickets = [
        ticket(n, STATES[n % len(STATES)], "gone" if n == 9 else "default") for n in range(1, 40)
    ]
    # Due now, due later (scheduled), and tickets with no trigger at all.
    triggers = [
        TriggerRow(f"TR{n}", f"T{n}", NOW - 5 if n % 2 else NOW + 60_000, 1) for n in range(1, 30)
    ]
    snap = snapshot(tickets, triggers)
    kept, afresh = both(encoder, snap)
    assert kept == afresh
    assert kept == both(encoder, snap)[0]  # served from what was kept

    # A ticket's record replaced (a new state), one gone, one new; the runs fill parallel.
    tickets[4] = ticket(5, "held", updated=99)
    del tickets[7]
    tickets.append(ticket(77, "ready"))
    snap = snapshot(
        tickets, [*triggers, TriggerRow("TR77", "T77", NOW - 1, 2)], in_flight={1: 1, 2: 2}
    )
    kept, afresh = both(encoder, snap)
    assert kept == afresh
    assert b'"id":"T77"' in kept
    assert b'"id":"T8"' not in kept
    assert b"parallel_limit" in kept

    # The clock passes the later triggers; then a cooldown closes the gate.
    assert both(encoder, snap, now=NOW + 120_000) == both(QueueBytes(), snap, now=NOW + 120_000)
    kept, afresh = both(encoder, snap, now=NOW + 120_000)
    assert kept == afresh
    closed = snapshot(tickets, triggers, gate=Gate("cooldown", NOW + 5_000, "rate limited"))
    kept, afresh = both(encoder, closed)
    assert kept == afresh
    assert b"cooldown" in kept


def test_an_empty_queue_and_the_order_newest_first() -> None:
    encoder = QueueBytes()
    assert both(encoder, snapshot([], [])) == (b',"queued_triggers":[],"tickets":[]',) * 2
    snap = snapshot([ticket(2, "ready"), ticket(10, "ready"), ticket(1, "ready")], [])
    kept, afresh = both(encoder, snap)
    assert kept == afresh
    assert kept.index(b'"T10"') < kept.index(b'"T2"') < kept.index(b'"T1"')


def test_orders_kept_through_a_drain_equal_fresh_ones_and_a_departure_sorts_nothing(
    monkeypatch: Any,
) -> None:
    """Claims and settlements (a trigger or ticket gone) keep the order as it was, less
    them; arrivals and replaced triggers sort again.  Each step equals a fresh encoding."""
    from sloopd.views import board as board_module
    from sloopd.views import queue_bytes as queue_bytes_module

    sorts = {"n": 0}

    def counting(*args: Any, **kwargs: Any) -> Any:
        sorts["n"] += 1
        return sorted(*args, **kwargs)

    monkeypatch.setattr(board_module, "sorted", counting, raising=False)
    monkeypatch.setattr(queue_bytes_module, "sorted", counting, raising=False)
    rng = random.Random(7)
    tickets = {n: ticket(n, "ready") for n in range(1, 200)}
    triggers = {n: TriggerRow(f"TR{n}", f"T{n}", NOW - rng.randrange(9), 1) for n in tickets}
    encoder, order = QueueBytes(), board_module.TriggerOrder()
    later = 200
    for step in range(300):
        kind = rng.choice(("gone", "gone", "gone", "came", "due"))
        if kind == "gone" and len(tickets) > 1:
            gone = rng.choice(sorted(tickets))
            del tickets[gone]
            triggers.pop(gone, None)
        elif kind == "came":
            later += 1
            tickets[later] = ticket(later, "ready")
            triggers[later] = TriggerRow(f"TR{later}", f"T{later}", NOW - 3, 1)
        elif triggers:  # a trigger replaced by another (due at an instant of its own)
            n = rng.choice(sorted(triggers))
            triggers[n] = TriggerRow(f"TR{n}", f"T{n}", NOW - 10 - step, 1)
        snap = snapshot(list(tickets.values()), list(triggers.values()))
        before = sorts["n"]
        facts, kept_triggers, _, _ = queue_facts(daemon(), snap, NOW, order)
        kept = encoder.encode(snap, facts, kept_triggers)
        if kind == "gone":
            assert sorts["n"] == before, step
        assert kept_triggers == queue_facts(daemon(), snap, NOW)[1], step
        assert kept == both(QueueBytes(), snap)[1], step
