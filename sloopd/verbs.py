"""The operator socket's verb handlers, by name."""

from __future__ import annotations

import asyncio
from typing import Any

from sloopd import api, queue, refs, rows, show
from sloopd.clock import now_ms
from sloopd.daemon import Daemon
from sloopd.dispatch import Handler

WAIT_POLL_SECONDS = 0.05
WAIT_DEFAULT_TIMEOUT_MS = 30_000


def operator_handlers(daemon: Daemon) -> dict[str, Handler]:
    def show_verb(args: dict[str, Any]) -> dict[str, Any]:
        if "ref" not in args:
            return show.dashboard(daemon, args.get("limit"))
        return show.show_ref(daemon, args["ref"], args.get("limit"))

    def status_verb(args: dict[str, Any]) -> dict[str, Any]:
        return show.status(daemon)

    def list_verb(args: dict[str, Any]) -> dict[str, Any]:
        store = daemon.require_store()
        limit = args.get("limit")
        if "ref" in args:
            return {"tickets": show.matches(daemon, args["ref"], limit)["tickets"]}
        facts = daemon.queue_facts()
        listed = [rows.ticket_row(t, facts) for t in store.all("tickets_nonterminal")]
        return {"tickets": listed[:limit] if limit else listed}

    async def wait_verb(args: dict[str, Any]) -> dict[str, Any]:
        run_id = _run_id(daemon, args["run"])
        deadline = now_ms() + args.get("timeout_ms", WAIT_DEFAULT_TIMEOUT_MS)
        while True:
            detail = show.run_detail(daemon, run_id)
            if detail["terminal"] or now_ms() >= deadline:
                return {"kind": "run", "value": detail}
            await asyncio.sleep(WAIT_POLL_SECONDS)

    def abort_verb(args: dict[str, Any]) -> dict[str, Any]:
        _run_id(daemon, args["run"])
        raise api.ProtocolError(api.ErrorCode.CONFLICT, "the run is not in flight")

    return {
        "show": show_verb,
        "status": status_verb,
        "list": list_verb,
        "wait": wait_verb,
        "post": lambda args: queue.post(daemon, args),
        "hold": lambda args: queue.hold(daemon, args),
        "ready": lambda args: queue.ready(daemon, args),
        "run": lambda args: queue.run(daemon, args),
        "abort": abort_verb,
    }


def _run_id(daemon: Daemon, ref: str) -> str:
    """A run reference (id or alias) or not_found."""
    store = daemon.require_store()
    exact = refs.resolve_exact(store, daemon.layout.repo, ref)
    if exact is None or exact.kind != "run":
        raise api.ProtocolError(api.ErrorCode.NOT_FOUND, f"no run matches '{ref}'", {"ref": ref})
    return exact.key
