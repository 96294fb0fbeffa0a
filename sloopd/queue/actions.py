"""The operator's queue: ``post``, ``hold``, ``ready`` and ``run``.

Each verb is one write transaction that reads what it decides on inside the
same transaction, so two requests can never queue two triggers for a ticket.
``post`` reads its file first (``read_posted``, blocking: the operator verbs run
it off the loop), then registers it in that one transaction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sloopd.core import rows
from sloopd.core.state import Daemon
from sloopd.flows import prompts
from sloopd.queue import places, refs, tickets
from sloopd.store import TicketRow, Transaction, TriggerRow
from sloopd.util.clock import now_ms
from sloopd.wire import api
from sloopd.wire.api import ErrorCode, ProtocolError

# Linux's limits on a path, checked before a system call sees one: it would
# fail there (ENAMETOOLONG), and Python refuses a NUL before asking the kernel.
PATH_MAX_BYTES = 4096  # counting the terminating NUL
NAME_MAX_BYTES = 255  # one component


def check_path(repo: Path, given: str) -> None:
    """Refuse a ``post`` path no file can have, naming the rule it breaks."""
    if "\0" in given:
        raise api.invalid_arguments("'path' must not contain a NUL character", field="path")
    full = str(repo / given).encode()
    if len(full) >= PATH_MAX_BYTES:
        raise api.invalid_arguments(
            f"'path' is longer than PATH_MAX ({PATH_MAX_BYTES - 1} bytes, from the root)",
            field="path",
            limit_bytes=PATH_MAX_BYTES - 1,
        )
    if max(len(part) for part in full.split(b"/")) > NAME_MAX_BYTES:
        raise api.invalid_arguments(
            f"a component of 'path' is longer than NAME_MAX ({NAME_MAX_BYTES} bytes)",
            field="path",
            limit_bytes=NAME_MAX_BYTES,
        )


def read_posted(daemon: Daemon, args: dict[str, Any]) -> tickets.TicketFile:
    """The file a post names, read and checked; it blocks on the file system.

    Besides the file's own checks, the ticket must fit how its flow hands the
    prompt over: a flow with ``{prompt}`` in a command refuses a ticket that would
    not fit one argument, here rather than when its run's child cannot start.
    """
    config = daemon.config
    repo = daemon.layout.repo
    check_path(repo, args["path"])
    ticket = tickets.read(
        repo,
        config.repo.tickets,
        args["path"],
        set(config.flows),
        max_bytes=config.repo.max_ticket_bytes,
        guarded=places.guarded(daemon.layout),
        sha256=args.get("sha256"),
    )
    too_long = prompts.ticket_problem(
        config.flows[ticket.flow], config.agent, ticket.name, ticket.title, ticket.body
    )
    if too_long is not None:
        raise api.invalid_arguments(
            f"{ticket.path}: cannot run in flow '{ticket.flow}' (stage '{too_long.stage}'): "
            f"{too_long.message}",
            path=ticket.path,
            stage=too_long.stage,
            key=too_long.key,
            size_bytes=too_long.size_bytes,
            limit_bytes=too_long.limit_bytes,
        )
    return ticket


def post(
    daemon: Daemon, args: dict[str, Any], ticket: tickets.TicketFile | None = None
) -> dict[str, Any]:
    """Register (or refresh) ``ticket``, the file ``read_posted`` read (read now if None)."""
    store = daemon.require_store()
    if ticket is None:
        ticket = read_posted(daemon, args)
    hold = bool(args.get("hold"))
    manual = bool(args.get("manual"))
    now = now_ms()
    due = args.get("trigger", {}).get("at_ms", now)
    fields = {
        "title": ticket.title,
        "body": ticket.body,
        "project": ticket.project,
        "flow": ticket.flow,
        "priority": ticket.priority,
        "manual": int(manual),
        "now": now,
    }
    with store.writer.transaction() as tx:
        existing = tx.row(TicketRow, "ticket_by_path", (ticket.path,))
        if existing is None:
            clash = tx.row(TicketRow, "ticket_by_name", (ticket.name,))
            if clash is not None:
                raise ProtocolError(
                    ErrorCode.CONFLICT,
                    f"{ticket.path}: a ticket named '{ticket.name}' is already registered "
                    f"from {clash.path} ({clash.id}); ticket names must be unique",
                    {"ticket": clash.id, "path": clash.path},
                )
            inserted = tx.scalar(
                "ticket_insert",
                {
                    **fields,
                    "name": ticket.name,
                    "path": ticket.path,
                    "state": "held" if hold else "ready",
                },
            )
            assert inserted is not None
            ticket_id, created = str(inserted), True
        else:
            ticket_id, created = existing.id, False
            tx.run("ticket_refresh", {**fields, "id": ticket_id})
            if hold and existing.state == "ready":
                tx.run("ticket_set_state", {"id": ticket_id, "state": "held", "now": now})
        state = _state(tx, ticket_id)
        trigger: dict[str, Any] | None = None
        suppressed: dict[str, Any] | None = None
        if not (hold or manual):
            if state == "ready":
                trigger = _queue_trigger(tx, ticket_id, due, now)
            else:
                suppressed = _suppression(state)
        record = tx.ticket_by_id(ticket_id)
    assert record is not None
    return {
        "ticket": rows.ticket_row(record, daemon.queue_facts()),
        "created": created,
        "trigger": trigger,
        "trigger_suppressed": suppressed,
    }


def _suppression(state: str) -> dict[str, Any]:
    """Why a post that asked for a trigger got none (``trigger_suppressed``)."""
    if state in api.TERMINAL_TICKET_STATES:
        return {"reason": "terminal_ticket", "state": state}
    return {"reason": f"{state}_ticket", "state": state}


def _state(tx: Transaction, ticket_id: str) -> str:
    row = tx.one("ticket_state_manual", (ticket_id,))
    assert row is not None
    state, _manual = row
    return str(state)


def _queue_trigger(tx: Transaction, ticket_id: str, due: int, now: int) -> dict[str, Any]:
    """The ticket's queued trigger; a new one only when it has none."""
    queued = tx.row(TriggerRow, "trigger_queued_for_ticket", (ticket_id,))
    if queued is None:
        queued = tx.row(TriggerRow, "trigger_insert", {"ticket": ticket_id, "due": due, "now": now})
        assert queued is not None
    return rows.trigger_row(queued)


def hold(daemon: Daemon, args: dict[str, Any]) -> dict[str, Any]:
    return _set_state(daemon, args["ref"], target="held", allowed={"ready", "held"})


def ready(daemon: Daemon, args: dict[str, Any]) -> dict[str, Any]:
    return _set_state(daemon, args["ref"], target="ready", allowed={"ready", "held"})


def _set_state(daemon: Daemon, ref: str, target: str, allowed: set[str]) -> dict[str, Any]:
    store = daemon.require_store()
    ticket_id = refs.ticket_id(store, daemon.layout.repo, ref)
    now = now_ms()
    with store.writer.transaction() as tx:
        row = tx.one("ticket_state_manual", (ticket_id,))
        assert row is not None
        state, manual = row
        if state not in allowed:
            raise ProtocolError(
                ErrorCode.CONFLICT,
                _refusal(ticket_id, state, target),
                {"ticket": ticket_id, "state": state},
            )
        if state != target:
            tx.run("ticket_set_state", {"id": ticket_id, "state": target, "now": now})
            # Releasing a held ticket puts it back in the queue, unless it was
            # posted --manual: then only 'run' queues it.
            if target == "ready" and not manual:
                _queue_trigger(tx, ticket_id, now, now)
        record = tx.ticket_by_id(ticket_id)
    assert record is not None
    return {"ticket": rows.ticket_row(record, daemon.queue_facts())}


def _refusal(ticket_id: str, state: str, target: str) -> str:
    verb = "hold" if target == "held" else "ready"
    if state == "running":
        return f"{ticket_id} is running; 'abort' its run first"
    if state == "merged":
        return f"{ticket_id} is merged; there is nothing to {verb}"
    return f"{ticket_id} is {state}; 'run' starts its next attempt"


def run(daemon: Daemon, args: dict[str, Any]) -> dict[str, Any]:
    store = daemon.require_store()
    ticket_id = refs.ticket_id(store, daemon.layout.repo, args["ref"])
    gate = daemon.gate
    if gate.state == "cooldown":
        raise ProtocolError(
            ErrorCode.COOLDOWN_ACTIVE,
            f"the gate is in cooldown until {gate.until_ms}: {gate.reason}",
            {"until_ms": gate.until_ms, "reason": gate.reason},
        )
    now = now_ms()
    due = args.get("trigger", {}).get("at_ms", now)
    with store.writer.transaction() as tx:
        state = _state(tx, ticket_id)
        if state in ("merged", "running"):
            raise ProtocolError(
                ErrorCode.CONFLICT,
                f"{ticket_id} is {state}; 'run' starts attempts of failed, needs_review, "
                "ready or held tickets",
                {"ticket": ticket_id, "state": state},
            )
        if state in ("failed", "needs_review"):
            tx.run("ticket_set_state", {"id": ticket_id, "state": "ready", "now": now})
        trigger = _queue_trigger(tx, ticket_id, due, now)
        record = tx.ticket_by_id(ticket_id)
    assert record is not None
    return {"ticket": rows.ticket_row(record, daemon.queue_facts()), "trigger": trigger}
