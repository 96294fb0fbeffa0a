"""``show``: the dashboard, exact references, and the pattern rung."""

from __future__ import annotations

from typing import Any

from sloopd import api, rows
from sloopd.clock import now_ms
from sloopd.daemon import Daemon


def dashboard(daemon: Daemon, limit: int | None) -> dict[str, Any]:
    """The status fields plus ``kind``/``recent``; empty lists on a refused store."""
    recent_limit = limit or api.DEFAULT_RECENT_LIMIT
    view: dict[str, Any] = {"kind": "dashboard", **status(daemon)}
    store = daemon.store
    if store is None:
        view.update(recent=[], recent_total=0, recent_limit=recent_limit)
        return view
    recent = [rows.run_row(store, r[0]) for r in store.all("runs_recent", (recent_limit,))]
    total = store.one("runs_recent_count")
    view.update(
        recent=[r for r in recent if r is not None],
        recent_total=int(total[0]) if total else 0,
        recent_limit=recent_limit,
    )
    return view


def status(daemon: Daemon) -> dict[str, Any]:
    """The v1 status fields, shared by ``status`` and the dashboard."""
    fields: dict[str, Any] = {"daemon": daemon.info(), "gate": daemon.gate.row()}
    store = daemon.store
    if store is None:
        fields.update(runs=[], queued_triggers=[], queued_activations=[], tickets=[])
        return fields
    facts = daemon.queue_facts()
    runs = [rows.run_row(store, r[0]) for r in store.all("runs_in_flight")]
    queued = [rows.trigger_row(r) for r in store.all("triggers_queued")]
    fields.update(
        runs=[r for r in runs if r is not None],
        queued_triggers=queued,
        # Deprecated alias of queued_triggers, same value, removed in 0.5.0.
        queued_activations=queued,
        tickets=[rows.ticket_row(t, facts) for t in store.all("tickets_nonterminal")],
    )
    wake = next_wake(daemon)
    if wake is not None:
        fields["next_wake"] = wake
    return fields


def next_wake(daemon: Daemon) -> int | None:
    """When the daemon will next look at the queue by itself (epoch ms)."""
    store = daemon.require_store()
    now = now_ms()
    candidates: list[int] = []
    row = store.one("trigger_next_wake", (now,))
    if row is not None and row[0] is not None:
        candidates.append(int(row[0]))
    if daemon.gate.until_ms is not None and daemon.gate.until_ms > now:
        candidates.append(daemon.gate.until_ms)
    return min(candidates) if candidates else None
