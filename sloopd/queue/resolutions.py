"""Ways out of ``needs_review`` (0.9.0): a person resolves a run, or the daemon notices.

Run and ticket states are closed sets in protocol v1, so a resolved run keeps its state
(``needs_review``) and gains a ``resolution``: what (``merged`` by a person, or
``dismissed``), who, why, when, and whether the daemon found it by itself.  In the same
transaction the ticket follows (``merged``, or ``failed`` for a dismissed run) when that
run is its latest and the ticket still waits on it, and the ``run_resolved`` event is
appended: a resolution is whole or absent.

The daemon resolves a run by itself (``auto``) when its branch holds at least one commit
beyond its base and main now holds the branch's tip: someone merged it by hand.  It
looks when main moves (and once when it starts), with one ``git for-each-ref --merged``
for every unresolved run, so the check costs the same for one run or a thousand.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Final

import orjson

from sloopd.core import rows
from sloopd.core.state import Daemon
from sloopd.git import ops as gitops
from sloopd.git import runner
from sloopd.queue import refs
from sloopd.store import RunRow, StoreUnavailable, TicketRow
from sloopd.util.clock import now_ms
from sloopd.util.quoting import REASON_CHARS, clip, without_escapes
from sloopd.wire.api import ErrorCode, ProtocolError

log = logging.getLogger(__name__)

MERGED: Final = "merged"
DISMISSED: Final = "dismissed"
# The ticket a resolution leaves behind, when the run is the ticket's latest.
TICKET_STATE: Final = {MERGED: "merged", DISMISSED: "failed"}
# How often the daemon looks at main's tip for a hand merge; it reads the branches
# only when the tip moved.
WATCH_SECONDS: Final = 2.0
# The most unresolved runs one look examines (the newest): a store holding more
# resolves the rest as they come within this window.
WATCH_RUNS_MAX: Final = 1000
BY_CHARS: Final = 200
GIT_TIMEOUT_S: Final = 30.0


def resolve(daemon: Daemon, args: dict[str, Any]) -> dict[str, Any]:
    """The operator verb: ``{"run", "resolution", "reason"?, "by"?}`` → run and ticket rows."""
    store = daemon.require_store()
    run_id = refs.run_id(store, daemon.layout.repo, args["run"])
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


class HandMerges:
    """Resolves, as merged by hand, the needs_review runs whose branch main now holds."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self._seen_main: str | None = None

    async def watch(self) -> None:
        while True:
            try:
                await self.look()
            except (gitops.GitError, StoreUnavailable) as exc:
                # Main unreadable for a moment, or the store busy: look again later.
                log.debug("looking for runs merged by hand: %s", exc)
                self._seen_main = None
            await asyncio.sleep(WATCH_SECONDS)

    async def look(self) -> list[str]:
        """One look; the runs it resolved (none while main has not moved since the last)."""
        daemon = self.daemon
        repo = daemon.layout.repo
        main = f"refs/heads/{daemon.config.repo.main}"
        tip = await gitops.rev_parse(repo, main)
        if tip is None or tip == self._seen_main:
            return []
        waiting = daemon.require_store().all("runs_unresolved_needing_review", (WATCH_RUNS_MAX,))
        if not waiting:
            self._seen_main = tip
            return []
        held = await _held_by(repo, tip, [f"refs/heads/{b}" for _, _, b in waiting])
        resolved: list[str] = []
        for run_id, _ticket, branch in waiting:
            branch_tip = held.get(f"refs/heads/{branch}")
            if branch_tip is None:
                continue
            base = await gitops.rev_parse(repo, f"refs/sloop/runs/{run_id}/base")
            # A branch with no commit of its own is on main from the start: that is
            # no merge.  Without its base (collected) nothing can be told: left alone.
            if base is None or base == branch_tip:
                continue
            short = tip[:12]
            if record(
                daemon,
                run_id,
                MERGED,
                by=None,
                reason=f"its branch {branch} is on {daemon.config.repo.main} (at {short})",
                auto=True,
            ):
                log.info("%s resolved as merged: main holds its branch %s", run_id, branch)
                resolved.append(run_id)
        self._seen_main = tip
        return resolved


async def _held_by(repo: Path, tip: str, branches: list[str]) -> dict[str, str]:
    """Of ``branches``, those ``tip`` holds, with their own tips: one git for all."""
    argv = runner.git(
        repo, "for-each-ref", f"--merged={tip}", "--format=%(objectname) %(refname)", *branches
    )
    try:
        done = await runner.run(argv, timeout=GIT_TIMEOUT_S, env=runner.environment())
    except runner.TimedOut:
        raise gitops.GitError(
            f"listing the branches {tip[:12]} holds took over {GIT_TIMEOUT_S} s"
        ) from None
    if done.returncode != 0:
        raise gitops.GitError(f"listing the branches {tip[:12]} holds: {done.stderr.strip()}")
    held: dict[str, str] = {}
    for line in done.stdout.splitlines():
        sha, _, ref = line.partition(" ")
        held[ref] = sha
    return held
