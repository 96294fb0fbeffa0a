"""Ways out of ``needs_review`` (0.9.0): a person resolves a run, or the daemon notices.

Run and ticket states are closed sets in protocol v1, so a resolved run keeps its state
(``needs_review``) and gains a ``resolution``: what (``merged`` by a person, or
``dismissed``), who, why, when, and whether the daemon found it by itself.  In the same
transaction the ticket follows (``merged``, or ``failed`` for a dismissed run) when that
run is its latest and the ticket still waits on it, and the ``run_resolved`` event is
appended: a resolution is whole or absent.

The daemon resolves a run by itself (``auto``) when someone merged its branch by hand:
``sloopd.landing.hand_merges`` watches main and calls ``record`` here.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import orjson

from sloopd.core import rows
from sloopd.core.state import Daemon
from sloopd.queue import refs
from sloopd.store import RunRow, TicketRow
from sloopd.util.clock import now_ms
from sloopd.util.quoting import REASON_CHARS, clip, without_escapes
from sloopd.wire.api import ErrorCode, ProtocolError

log = logging.getLogger(__name__)

MERGED: Final = "merged"
DISMISSED: Final = "dismissed"
# The ticket a resolution leaves behind, when the run is the ticket's latest.
TICKET_STATE: Final = {MERGED: "merged", DISMISSED: "failed"}
BY_CHARS: Final = 200


def resolve(daemon: Daemon, args: dict[str, Any]) -> dict[str, Any]:
    """The operator verb: ``{"run", "resolution", "reason"?, "by"?}`` → run and ticket rows."""
    store = daemon.require_store()
    run_id = _run_of(daemon, args["run"])
    resolved = record(
        daemon,
        run_id,
        args["resolution"],
        by=_bounded(args.get("by"), BY_CHARS),
        reason=_bounded(args.get("reason"), REASON_CHARS),
        auto=False,
    )
    if not resolved:
        run = store.run_by_id(run_id)
        assert run is not None  # runs are never deleted
        if run.state != "needs_review":
            message = f"{run_id} is {run.state}: only a needs_review run can be resolved"
        else:
            message = f"{run_id} is already resolved"
        raise ProtocolError(
            ErrorCode.CONFLICT,
            message,
            {"run": run_id, "state": run.state, "resolution": _resolution_of(run)},
        )
    daemon.poke()  # the ticket left needs_review: nothing to claim, but the board moved
    return _rows(daemon, run_id)


def _run_of(daemon: Daemon, ref: str) -> str:
    """A run reference, or a ticket's (its latest run: what its waiting message names)."""
    store = daemon.require_store()
    exact = refs.resolve_exact(store, daemon.layout.repo, ref)
    if exact is not None and exact.kind == "ticket":
        latest = store.scalar("run_ids_for_ticket", (exact.key,))
        if latest is None:
            raise ProtocolError(
                ErrorCode.NOT_FOUND, f"ticket '{ref}' has no run to resolve", {"ref": ref}
            )
        return str(latest)
    return refs.run_id(store, daemon.layout.repo, ref)


def record(
    daemon: Daemon,
    run_id: str,
    resolution: str,
    *,
    by: str | None,
    reason: str | None,
    auto: bool,
) -> bool:
    """Resolve ``run_id`` in one transaction; False when it is not an unresolved
    needs_review run (the update names both in its WHERE: no read-then-write race)."""
    store = daemon.require_store()
    at_ms = now_ms()
    written = {"resolution": resolution, "by": by, "reason": reason, "at_ms": at_ms, "auto": auto}
    with store.writer.transaction() as tx:
        changed = tx.one(
            "run_resolve", {"id": run_id, "resolution": orjson.dumps(written).decode()}
        )
        if changed is None:
            return False
        run = tx.row(RunRow, "run_by_id", (run_id,))
        assert run is not None
        ticket = tx.row(TicketRow, "ticket_by_id", (run.ticket,))
        latest = tx.scalar("run_ids_for_ticket", (run.ticket,))
        # A ticket run again since waits on its newer run, not on this one.
        if ticket is not None and ticket.state == "needs_review" and latest == run_id:
            tx.run(
                "ticket_set_state",
                {"id": run.ticket, "state": TICKET_STATE[resolution], "now": at_ms},
            )
        daemon.append_event(
            "run_resolved",
            ticket=run.ticket,
            run=run_id,
            data={"resolution": resolution, "by": by, "reason": reason, "auto": auto},
        )
    return True


def _rows(daemon: Daemon, run_id: str) -> dict[str, Any]:
    store = daemon.require_store()
    run = rows.run_row(store, run_id)
    assert run is not None
    ticket = store.ticket_by_id(run["ticket"])
    assert ticket is not None
    return {"run": run, "ticket": rows.ticket_row(ticket, daemon.queue_facts())}


def _resolution_of(run: RunRow) -> Any:
    return orjson.loads(run.resolution) if run.resolution else None


def _bounded(text: Any, limit: int) -> str | None:
    """An operator's words kept as data: one line, escapes stripped, bounded."""
    if not text:
        return None
    return clip(" ".join(without_escapes(str(text)).split()), limit) or None
