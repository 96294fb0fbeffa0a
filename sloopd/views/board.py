"""The dashboard, assembled from the read model around its live parts.

What moves only with the model is encoded once per epoch and kept as bytes: the
daemon's fields but its uptime, the gate, the queue (triggers, tickets and their
``waiting``, ``next_wake``) and the recent runs of each ``limit``.  What moves
with the clock or with a live run is computed on every reply, cheaply: the
uptime, the runs in flight with their live ``stall`` and ``usage``, the usage
total while runs are in flight, and the queue once the clock passes the next
instant that changes it (a trigger falling due, a cooldown's end).  An unchanged
dashboard costs a few lookups and one join of bytes.
"""

from __future__ import annotations

import asyncio
import bisect
from typing import Any

import orjson

from sloopd.core import rows
from sloopd.core.model import RECENT_HELD_MAX, Settled, Snapshot, recent_runs
from sloopd.core.rows import QueueFacts
from sloopd.core.state import Daemon
from sloopd.flows import landings
from sloopd.flows.flow import Flow
from sloopd.store import RecentRunRow, TriggerRow
from sloopd.util import memory
from sloopd.util.clock import now_ms
from sloopd.views.queue_bytes import QueueBytes, ordinal
from sloopd.wire import api

NEVER = 2**63  # a queue with no instant ahead stays valid until the next epoch
TRIM_AFTER_RUNS = 1000


def queue_facts(
    daemon: Daemon, snapshot: Snapshot, now: int, order: TriggerOrder | None = None
) -> tuple[QueueFacts, list[TriggerRow], int | None, int]:
    """What the queue part is made of: the facts every ``waiting`` is derived from, the
    triggers in the queue's order, ``next_wake`` (or None), and until when all hold.
    ``order``: the dashboard's, kept while the triggers are the same."""
    triggers, first_by_ticket, dues = (order or TriggerOrder()).of(snapshot.triggers)
    facts = QueueFacts(
        now_ms=now,
        gate=snapshot.gate,
        parallel=daemon.config.repo.parallel,
        in_flight=len(snapshot.in_flight),
        triggers_by_ticket=first_by_ticket,
        flows=frozenset(daemon.config.flows),
    )
    # The next instant that changes any of it: a trigger falls due (its ticket stops
    # being 'scheduled'), or the cooldown's end (next_wake).
    later = bisect.bisect_right(dues, now)
    ahead = dues[later : later + 1]
    until = snapshot.gate.until_ms
    if until is not None and until > now:
        ahead.append(until)
    return facts, triggers, min(ahead, default=None), min(ahead, default=NEVER)


class TriggerOrder:
    """The triggers in the queue's order (due, then id), each ticket's first, and their
    due instants ascending; sorted again only when a trigger came or changed.

    A trigger that went (a claim: several a second while a queue drains) leaves the
    others in order, so they are kept as they were, less the ones gone: with 2,000
    queued a sort took about 1 ms a ``show``, a filter a fifth of that."""

    def __init__(self) -> None:
        self._kept: tuple[list[TriggerRow], list[TriggerRow], dict[str, TriggerRow], list[int]]
        self._kept = ([], [], {}, [])

    def of(
        self, triggers: dict[str, TriggerRow]
    ) -> tuple[list[TriggerRow], dict[str, TriggerRow], list[int]]:
        records = list(triggers.values())
        seen, ordered, first, dues = self._kept
        if records != seen:  # identity first, in C: the same records compare equal at once
            # Each kept record is alive (held here), so its id is no new record's.
            present = set(map(id, records))
            ordered = [t for t in ordered if id(t) in present]
            if len(ordered) != len(records):  # one came or was replaced
                ordered = sorted(records, key=lambda t: (t.due_at_ms, ordinal(t.id)))
            first = {}
            for trigger in ordered:
                first.setdefault(trigger.ticket, trigger)
            dues = [int(t.due_at_ms) for t in ordered]
            self._kept = (records, ordered, first, dues)
        return ordered, first, dues


def queue_fields(daemon: Daemon, snapshot: Snapshot, now: int) -> tuple[dict[str, Any], int]:
    """``queued_triggers``, ``tickets`` and ``next_wake``, and until when they hold."""
    facts, triggers, next_wake, until = queue_facts(daemon, snapshot, now)
    tickets = sorted(snapshot.tickets.values(), key=lambda t: ordinal(t.id), reverse=True)
    fields: dict[str, Any] = {
        "queued_triggers": [rows.trigger_row(t) for t in triggers],
        "tickets": [rows.ticket_row(t, facts) for t in tickets],
    }
    if next_wake is not None:
        fields["next_wake"] = next_wake
    return fields, until


def in_flight_rows(daemon: Daemon, snapshot: Snapshot) -> list[dict[str, Any]]:
    """Run rows of the runs in flight, oldest first, with their live fields."""
    found = []
    for run in sorted(snapshot.in_flight.values(), key=lambda r: ordinal(r.record.id)):
        row = dict(run.row)
        active = daemon.active_runs.get(row["id"])
        if active is not None:
            row["stall"] = active.stall()
            row["usage"] = active.usage_total()
        found.append(row)
    return found


def live_total(daemon: Daemon, snapshot: Snapshot) -> dict[str, Any] | None:
    """Every run's usage: the settled runs' summed, plus each run in flight's, live.

    A run the model has settled (its usage already in the sum) whose driver has not let
    go yet is counted once: the sum has it, so its live figure is left out."""
    live = [
        active.usage_total()
        for run_id, active in daemon.active_runs.items()
        if run_id in snapshot.in_flight
    ]
    return rows.usage_sum([snapshot.usage.row(), *live])


def live_recent_row(daemon: Daemon, settled: Settled) -> bytes:
    """A settled run whose driver has not let go yet: shown with its live fields."""
    active = daemon.active_runs.get(settled.id)
    if active is None:
        return settled.encoded
    row = orjson.loads(settled.encoded)
    row["stall"] = active.stall()
    row["usage"] = active.usage_total()
    return orjson.dumps(row)


def attention_runs(daemon: Daemon) -> tuple[list[Settled], int]:
    """``attention``, and ``attention_total``: the runs that left their ticket failed or
    needs_review. Read from the store, not the recent window, so such a run never ages
    off the dashboard (the board keeps the bytes for an epoch)."""
    store = daemon.require_store()
    with store.snapshot():
        found = store.rows(RecentRunRow, "runs_needing_attention", (api.MAX_ATTENTION,))
        total = int(store.scalar("runs_needing_attention_count") or 0)
    return [Settled.of(r.run(), rows.usage_of_sums(r.usage())) for r in found], total


def merge_queue_part(daemon: Daemon) -> bytes:
    """Additive in 0.9.0: ``queue`` (the merge queue's entries, head first) and
    ``merge_window``.  Every change of the queue bumps the epoch; a few entries at most
    (the runs in flight), so encoded on each reply."""
    merge_queue = daemon.merge_queue
    entries = merge_queue.rows() if merge_queue is not None else []
    if not entries and not any(flow_lands(flow) for flow in daemon.config.flows.values()):
        # Optional, like next_wake: a configuration with no landing has no queue to show.
        return b""
    window = daemon.config.repo.window
    return b',"queue":' + orjson.dumps(entries) + b',"merge_window":' + str(window).encode()


def flow_lands(flow: Flow) -> bool:
    return bool(landings.spans(flow.stages))


class Board:
    """The dashboard's bytes; caches keyed by epoch (and configuration, and limit)."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self._head: tuple[tuple[int, int], bytes] | None = None
        self._queue: tuple[tuple[int, int, int], int, bytes] | None = None
        self._recent: tuple[tuple[int, int], bytes] | None = None
        self._attention: tuple[int, bytes] | None = None
        self._queue_bytes = QueueBytes()
        self._trigger_order = TriggerOrder()
        # The whole reply but the uptime, while no run is in flight (nothing live).
        self._body: tuple[tuple[tuple[int, int], int], int, bytes] | None = None

    def dashboard(self, limit: int) -> bytes:
        daemon = self.daemon
        model = daemon.model
        assert model is not None
        snapshot = model.current()
        epoch = daemon.changes.epoch
        # A reload replaces the configuration object (and bumps the epoch); keyed by
        # both, a cache never outlives what it was computed from.
        key = (epoch, id(daemon.config))
        now = now_ms()
        live = bool(snapshot.in_flight or daemon.active_runs)
        body, head = self._body, self._head
        if not live and body is not None and body[0] == (key, limit) and now < body[1]:
            # Nothing moved: the cached reply (its head has the same key: set before it).
            assert head is not None
            return b"".join((head[1], str(now - daemon.started_at_ms).encode(), body[2]))
        if head is None or head[0] != key:
            head = self._head = (key, self._encode_head())
        uptime = str(now - daemon.started_at_ms).encode()
        queue = self._queue
        # Not the epoch: the queue part is made of the tickets, triggers and gate (the
        # model's queue revision), the count in flight, the configuration and the clock
        # (valid until ``queue[1]``), and it is encoded again only when one moved.
        queue_key = (model.queue_revision, len(snapshot.in_flight), id(daemon.config))
        if queue is None or queue[0] != queue_key or now >= queue[1]:
            facts, triggers, next_wake, until = queue_facts(
                daemon, snapshot, now, self._trigger_order
            )
            encoded = self._queue_bytes.encode(snapshot, facts, triggers)
            if next_wake is not None:
                encoded += b',"next_wake":' + str(next_wake).encode()
            queue = self._queue = (queue_key, until, encoded)
        recent = self._recent
        if recent is None or recent[0] != (epoch, limit):
            recent = ((epoch, limit), self._encode_recent(snapshot, limit))
            if limit <= RECENT_HELD_MAX:  # a larger window is read, served, and let go
                self._recent = recent
        recent_bytes = recent[1]
        active = daemon.active_runs
        if active and any(run.id in active for run in snapshot.recent[:limit]):
            recent_bytes = self._encode_recent(snapshot, limit, live=True)
        runs = orjson.dumps(in_flight_rows(daemon, snapshot)) if snapshot.in_flight else b"[]"
        attention = self._attention
        if attention is None or attention[0] != epoch:
            attention = self._attention = (epoch, self._encode_attention())
        usage = orjson.dumps(live_total(daemon, snapshot))
        rest = b"".join(
            (
                b'},"gate":',
                orjson.dumps(snapshot.gate.row()),
                b',"runs":',
                runs,
                merge_queue_part(daemon),
                attention[1],
                queue[2],
                recent_bytes,
                b',"recent_limit":',
                str(limit).encode(),
                b',"usage":',
                usage,
                b',"epoch":',
                str(epoch).encode(),
                b"}",
            )
        )
        if not live and limit <= RECENT_HELD_MAX:
            self._body = ((key, limit), queue[1], rest)
        return b"".join((head[1], uptime, rest))

    def _encode_head(self) -> bytes:
        info = self.daemon.info()
        # uptime_ms moves every millisecond: written last, by hand, on each reply.
        del info["uptime_ms"]
        return b'{"kind":"dashboard","daemon":' + orjson.dumps(info)[:-1] + b',"uptime_ms":'

    def _encode_attention(self) -> bytes:
        found, total = attention_runs(self.daemon)
        listed = b",".join(run.encoded for run in found)
        return b',"attention":[' + listed + b'],"attention_total":' + str(total).encode()

    def _encode_recent(self, snapshot: Snapshot, limit: int, live: bool = False) -> bytes:
        daemon = self.daemon
        model = daemon.model
        assert model is not None
        if model.hold_recent(limit):
            shown = snapshot.recent[:limit]
        else:
            # Past what the model holds: read from the store (one statement), kept by no one.
            store = daemon.require_store()
            with store.snapshot():
                shown = recent_runs(store, limit)
        encoded = [live_recent_row(daemon, r) if live else r.encoded for r in shown]
        part = (
            b',"recent":['
            + b",".join(encoded)
            + b'],"recent_total":'
            + str(snapshot.recent_total).encode()
        )
        if len(shown) > TRIM_AFTER_RUNS:
            # Thousands of rows read, encoded and copied into the reply leave megabytes
            # of freed heap behind: hand it back once the reply is written.
            asyncio.get_running_loop().call_soon(memory.release_free_heap)
        return part
