"""The dashboard's queue part (``queued_triggers``, ``tickets``, ``next_wake``) as bytes,
each ticket's and trigger's row encoded once and kept while its record is the same.

Why: the dashboard lists every ticket that is not settled, and its epoch moves with every
event, so while a queue of 2,000 tickets drained each ``show`` rebuilt and encoded 2,000
rows (10 ms a reply; a client polling every 50 ms held a fifth of the daemon's loop). Of
a row only ``waiting`` moves with the clock and the runs in flight, and most rows share
one (``parallel_limit``, or none): per reply a ticket costs a lookup, its ``waiting``
and a join.  The bytes are exactly ``orjson.dumps`` of ``rows.ticket_row``'s dicts
(tests/unit/test_queue_bytes.py holds them to it).
"""

from __future__ import annotations

from typing import Any

import orjson

from sloopd.core import rows
from sloopd.core.model import Snapshot
from sloopd.core.rows import QueueFacts
from sloopd.store import TicketRow, TriggerRow


def ordinal(entity_id: str) -> int:
    """Ids are a prefix and the row's ordinal (T12, TR7, R4): the store's order."""
    return int(entity_id.lstrip("TR"))


class QueueBytes:
    """Kept rows by id: a record replaced in the model (a new tuple) is encoded again."""

    def __init__(self) -> None:
        self._tickets: dict[str, tuple[TicketRow, bytes]] = {}
        self._triggers: dict[str, tuple[TriggerRow, bytes]] = {}
        self._order: tuple[frozenset[str], list[str]] | None = None

    def encode(self, snapshot: Snapshot, facts: QueueFacts, triggers: list[TriggerRow]) -> bytes:
        """``,"queued_triggers":[…],"tickets":[…]`` (the caller adds ``next_wake``);
        ``triggers`` in the queue's order."""
        return b"".join(
            (
                b',"queued_triggers":[',
                self._trigger_rows(triggers),
                b'],"tickets":[',
                self._ticket_rows(snapshot, facts),
                b"]",
            )
        )

    def _trigger_rows(self, triggers: list[TriggerRow]) -> bytes:
        kept, fresh = self._triggers, {}
        parts = []
        for trigger in triggers:
            hit = kept.get(trigger.id)
            if hit is None or hit[0] is not trigger:
                hit = (trigger, orjson.dumps(rows.trigger_row(trigger)))
            fresh[trigger.id] = hit
            parts.append(hit[1])
        self._triggers = fresh  # what left the queue is let go
        return b",".join(parts)

    def _ticket_rows(self, snapshot: Snapshot, facts: QueueFacts) -> bytes:
        tickets = snapshot.tickets
        kept, fresh = self._tickets, {}
        shared: dict[tuple[Any, ...], bytes] = {}
        by_ticket, now = facts.triggers_by_ticket, facts.now_ms
        # The common row: ready, its flow defined, its trigger due, the gate open; its
        # ``waiting`` depends on the facts alone (rows.waiting's last two answers), so
        # the first such ticket's serves them all.
        claimable = facts.gate.state == "open"
        common: bytes | None = None
        flows = facts.flows
        parts = []
        for ticket_id in self._newest_first(tickets):
            record = tickets[ticket_id]
            hit = kept.get(ticket_id)
            if hit is None or hit[0] is not record:
                row = rows.ticket_row(record, facts)
                del row["waiting"]
                hit = (record, orjson.dumps(row)[:-1] + b',"waiting":')
            fresh[ticket_id] = hit
            if claimable and record.state == "ready" and record.flow in flows:
                trigger = by_ticket.get(ticket_id)
                if trigger is not None and int(trigger.due_at_ms) <= now:
                    if common is None:
                        said = rows.waiting(ticket_id, "ready", record.flow, facts)
                        common = orjson.dumps(said) + b"}"
                    parts.append(hit[1] + common)
                    continue
            waiting = rows.waiting(ticket_id, record.state, record.flow, facts, record.name)
            if waiting is None:
                parts.append(hit[1] + b"null}")
                continue
            key = (waiting["reason"], waiting["message"], waiting.get("until_ms", ()))
            encoded = shared.get(key)
            if encoded is None:
                encoded = shared[key] = orjson.dumps(waiting)
            parts.append(hit[1] + encoded + b"}")
        self._tickets = fresh
        return b",".join(parts)

    def _newest_first(self, tickets: dict[str, TicketRow]) -> list[str]:
        """The ids by ordinal, newest first; sorted again only when a ticket came (one
        that settled leaves the others in order: kept, less it, a tenth of a sort)."""
        order = self._order
        if order is None or tickets.keys() != order[0]:
            ids = [] if order is None else [i for i in order[1] if i in tickets]
            if len(ids) != len(tickets):
                ids = sorted(tickets, key=ordinal, reverse=True)
            order = self._order = (frozenset(ids), ids)
        return order[1]
