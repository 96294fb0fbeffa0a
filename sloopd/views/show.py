"""``show``: the dashboard, exact references, and the pattern rung."""

from __future__ import annotations

from typing import Any

import orjson

from sloopd.core import bodies, rows
from sloopd.core.model import Settled
from sloopd.core.state import Daemon
from sloopd.queue import refs
from sloopd.store import RecentRunRow, TicketExtra, TicketRow, TriggerRow
from sloopd.util.clock import now_ms
from sloopd.views import runview
from sloopd.views.board import Board, in_flight_rows, queue_fields
from sloopd.wire import api


def dashboard(daemon: Daemon, board: Board, limit: int | None) -> Any:
    """The dashboard; on a refused store, the status fields with empty lists."""
    recent_limit = limit or api.DEFAULT_RECENT_LIMIT
    if daemon.model is None:
        view: dict[str, Any] = {"kind": "dashboard", **status(daemon)}
        view.update(recent=[], recent_total=0, recent_limit=recent_limit, usage=None)
        view.update(attention=[], attention_total=0)
        view["epoch"] = daemon.changes.epoch
        return view
    return orjson.Fragment(board.dashboard(recent_limit))


def status(daemon: Daemon) -> dict[str, Any]:
    """The v1 status fields (the deprecated ``status``), from the read model."""
    fields: dict[str, Any] = {"daemon": daemon.info(), "gate": daemon.gate.row()}
    model = daemon.model
    if model is None:
        fields.update(runs=[], queued_triggers=[], tickets=[])
        return fields
    snapshot = model.current()
    fields["gate"] = snapshot.gate.row()
    fields["runs"] = in_flight_rows(daemon, snapshot)
    fields.update(queue_fields(daemon, snapshot, now_ms())[0])
    return fields


def settled_runs(daemon: Daemon, args: dict[str, Any]) -> dict[str, Any]:
    """The ``runs`` verb: a page of settled runs, so a person can reach one that left
    the dashboard's recent window (newest first, one state or all, by offset)."""
    store = daemon.require_store()
    state = args.get("state")
    limit = min(args.get("limit") or api.DEFAULT_RUNS_PAGE, api.MAX_RUNS_PAGE)
    offset = args.get("offset", 0)
    with store.snapshot():  # the page and its total of one moment
        found = store.rows(RecentRunRow, "runs_settled_page", (state, limit, offset))
        total = int(store.scalar("runs_settled_page_count", (state,)) or 0)
    page = [Settled.of(r.run(), rows.usage_of_sums(r.usage())).encoded for r in found]
    return {
        "runs": [orjson.Fragment(encoded) for encoded in page],
        "total": total,
        "state": state,
        "limit": limit,
        "offset": offset,
    }


def show_ref(daemon: Daemon, ref: str, limit: int | None) -> dict[str, Any]:
    """An exact reference's detail, else the pattern rung's matches."""
    store = daemon.require_store()
    exact = refs.resolve_exact(store, daemon.layout.repo, ref)
    if exact is None:
        return matches(daemon, ref, limit)
    if exact.kind == "ticket":
        return {"kind": "ticket", "value": ticket_detail(daemon, exact.key)}
    if exact.kind == "run":
        return {"kind": "run", "value": run_detail(daemon, exact.key)}
    return {"kind": "project", "value": project_detail(daemon, exact.key)}


def matches(daemon: Daemon, ref: str, limit: int | None) -> dict[str, Any]:
    """The pattern rung: ticket rows whose id, name or title match, newest first."""
    store = daemon.require_store()
    expression = refs.pattern(ref)
    facts = daemon.queue_facts()
    found = [
        t
        for t in store.rows(TicketRow, "tickets_all")
        # 0.8.0: titles too, so a search box finds a ticket by what it is about.
        if refs.matches(expression, t.id, t.name) or expression.search(t.title)
    ]
    shown = found[:limit] if limit else found
    return {
        "kind": "matches",
        "ref": ref,
        "tickets": [rows.ticket_row(t, facts) for t in shown],
        "total": len(found),
    }


def ticket_detail(daemon: Daemon, ticket_id: str) -> dict[str, Any]:
    store = daemon.require_store()
    record = store.ticket_by_id(ticket_id)
    extra = store.row(TicketExtra, "ticket_extra", (ticket_id,))
    assert record is not None and extra is not None
    value = rows.ticket_row(record, daemon.queue_facts())
    queued = store.row(TriggerRow, "trigger_queued_for_ticket", (ticket_id,))
    runs = [_run_summary(daemon, run) for (run,) in store.all("run_ids_for_ticket", (ticket_id,))]
    value.update(
        # 0.8.0: at most MAX_SHOWN_BODY_BYTES of it, with body_bytes and body_clipped.
        **bodies.shown(extra.body, f"the whole ticket is its file, {record.path}"),
        manual=bool(extra.manual),
        trigger=rows.trigger_row(queued) if queued else None,
        runs=runs,
        # Additive in 0.6.0: every run of the ticket, summed.
        usage=rows.usage_sum(run["usage"] for run in runs),
    )
    return value


def _run_summary(daemon: Daemon, run_id: str) -> dict[str, Any]:
    """One entry of a ticket's ``value.runs`` (protocol: "Read a ticket's run history")."""
    detail = run_detail(daemon, run_id)
    keys = (
        "id",
        "alias",
        "attempt",
        "state",
        "terminal",
        "started_at_ms",
        "finished_at_ms",
        "reason",
        "stall",
        "usage",
    )
    summary = {key: detail[key] for key in keys}
    summary["stages"] = [
        # unreached and aborted: additive in 0.8.0, ended_by in 0.9.0, as on the run's rows.
        {
            key: stage[key]
            for key in (
                "stage",
                "state",
                "attempt",
                "advisory",
                "silent_for_ms",
                "unreached",
                "aborted",
                "ended_by",
            )
        }
        for stage in detail["stages"]
    ]
    return summary


def run_detail(daemon: Daemon, run_id: str) -> dict[str, Any]:
    return runview.run_detail(daemon, run_id, daemon.active_runs.get(run_id))


def project_detail(daemon: Daemon, name: str) -> dict[str, Any]:
    store = daemon.require_store()
    facts = daemon.queue_facts()
    found = store.rows(TicketRow, "tickets_in_project", (name,))
    members = [rows.ticket_row(t, facts) for t in found]
    counts = {state: 0 for state in api.TICKET_STATES}
    for ticket in members:
        counts[ticket["state"]] += 1
    return {"name": name, "tickets": members, "counts": counts}
