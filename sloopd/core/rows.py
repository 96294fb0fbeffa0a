"""Wire rows built from store rows: ticket, trigger and run (DESIGN "Wire shapes")."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from sloopd.store import GateRow, RunRow, Store, TicketRow, TriggerRow, UsageRow
from sloopd.util import quoting
from sloopd.vendor import usage
from sloopd.wire.api import TERMINAL_RUN_STATES, TERMINAL_TICKET_STATES


@dataclass(frozen=True, slots=True)
class Gate:
    state: str = "open"
    until_ms: int | None = None
    reason: str | None = None

    @classmethod
    def of(cls, stored: GateRow) -> Gate:
        return cls(stored.state, stored.until_ms, stored.reason)

    def row(self) -> dict[str, Any]:
        return {"state": self.state, "until_ms": self.until_ms, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class QueueFacts:
    """What a ticket's ``waiting`` is derived from, read once per response."""

    now_ms: int
    gate: Gate
    parallel: int
    in_flight: int
    triggers_by_ticket: Mapping[str, TriggerRow]
    # The flows sloop.toml defines now: a ticket whose flow is gone cannot be claimed.
    flows: frozenset[str] = frozenset({"default"})


def trigger_row(record: TriggerRow) -> dict[str, Any]:
    trigger_id, ticket, due_at_ms, created_at_ms = record
    return {
        "id": trigger_id,
        "ticket": ticket,
        "due_at_ms": due_at_ms,
        "created_at_ms": created_at_ms,
    }


def ticket_row(record: TicketRow, facts: QueueFacts) -> dict[str, Any]:
    ticket_id, name, title, path, project, flow, priority, state, created, updated = record
    return {
        "id": ticket_id,
        "name": name,
        "title": title,
        "path": path,
        "project": project,
        "flow": flow,
        "priority": priority,
        "state": state,
        "created_at_ms": created,
        "updated_at_ms": updated,
        "waiting": waiting(ticket_id, state, flow, facts, name),
    }


def waiting(
    ticket_id: str, state: str, flow: str, facts: QueueFacts, name: str | None = None
) -> dict[str, Any] | None:
    """Why a ticket that is not running is not running (null: it is, or is about to)."""
    if state == "running":
        return None
    if state == "needs_review":
        # What a person can do, not the word "terminal" alone (0.9.0): resolve takes
        # the ticket's name for its latest run.
        ref = name or ticket_id
        return {
            "reason": "terminal",
            "message": f"needs review: resolve it (sloopctl resolve {ref} --merged or "
            f"--dismissed) or run it again (sloopctl run {ref})",
        }
    if state in TERMINAL_TICKET_STATES:
        hint = "" if state == "merged" else "; 'run' starts a new attempt"
        return {"reason": "terminal", "message": f"the ticket is {state}{hint}"}
    if state == "held":
        # The reason already says "held": every client shows it beside the message.
        return {"reason": "held", "message": "'ready' releases it"}
    if flow not in facts.flows:
        # The scheduler steps over its triggers until a reload brings the flow back.
        return {
            "reason": "invalid_flow",
            "message": f"its flow '{flow}' is not defined in sloop.toml; "
            "define it and reload (SIGHUP), or change the ticket's flow and post it again",
        }
    trigger = facts.triggers_by_ticket.get(ticket_id)
    if trigger is None:
        return {"reason": "no_trigger", "message": "no trigger queued; 'run' queues one"}
    due_at_ms = int(trigger.due_at_ms)
    if due_at_ms > facts.now_ms:
        return {
            "reason": "scheduled",
            "message": f"trigger {trigger.id} is due later",
            "until_ms": due_at_ms,
        }
    if facts.gate.state != "open":
        message = f"the gate is in {facts.gate.state}"
        if facts.gate.reason:
            message += f": {facts.gate.reason}"
        return {"reason": "cooldown", "message": message, "until_ms": facts.gate.until_ms}
    if facts.in_flight >= facts.parallel:
        return {
            "reason": "parallel_limit",
            "message": f"{facts.in_flight} of {facts.parallel} runs in flight",
        }
    return None


def run_row(store: Store, run_id: str) -> dict[str, Any] | None:
    record = store.run_by_id(run_id)
    if record is None:
        return None
    row = run_row_of(record)
    row["usage"] = run_usage(store, run_id)
    return row


def run_row_of(record: RunRow) -> dict[str, Any]:
    """A run's wire row (its usage and stall left for the caller) from its store row."""
    (
        rid,
        alias,
        ticket,
        attempt,
        state,
        trigger,
        flow,
        _snapshot,
        branch,
        worktree,
        claimed,
        started,
        finished,
        agent_exit_code,
        halt,
        reason,
        classification,
        resolution,
    ) = record
    diagnosis = orjson.loads(classification) if classification else None
    return {
        "id": rid,
        "alias": alias,
        "ticket": ticket,
        "attempt": attempt,
        "state": state,
        "terminal": state in TERMINAL_RUN_STATES,
        "trigger": trigger,
        "flow": flow,
        "branch": branch,
        "worktree": worktree or None,
        "claimed_at_ms": claimed,
        "started_at_ms": started,
        "finished_at_ms": finished,
        "agent_exit_code": agent_exit_code,
        "halt": halt,
        # Bounded here too, for runs a 0.7 daemon settled with every path in it: the
        # dashboard carries this row for every recent run.
        "reason": quoting.clip(reason, quoting.REASON_CHARS) if reason else reason,
        "classification": diagnosis.get("classification") if diagnosis else None,
        "diagnosis": diagnosis,
        "stall": None,
        # (0.9.0) how a person (or the daemon, auto) resolved a needs_review run; the
        # state stays needs_review: run states are a closed set in protocol v1.
        "resolution": orjson.loads(resolution) if resolution else None,
    }


def usage_sum(found: Iterable[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Stored usage objects summed; None when none was reported."""
    summed = usage.total(usage.from_row(r) for r in found)
    return summed.row() if summed is not None else None


def run_usage(store: Store, run_id: str) -> dict[str, Any] | None:
    """The summed usage of the run's stage_finished rows, as its stage log stored it."""
    return usage_of_sums(store.row(UsageRow, "usage_for_run", (run_id,)))


def usage_of_sums(record: UsageRow | None) -> dict[str, Any] | None:
    """A usage object from a ``usage_*`` row; None when no stage reported any."""
    if record is None or not record.reported:
        return None
    _reported, input_tokens, output_tokens, cached_tokens, cost = record
    priced = None if cost is None else float(cost)
    return usage.Usage(int(input_tokens), int(output_tokens), int(cached_tokens), priced).row()
