"""The scheduler: turns due triggers of ready tickets into runs.

Claims happen in one write transaction (highest priority, then the oldest
due trigger first) while fewer than ``parallel`` runs are in flight and the
gate is open.  It sleeps until the next due trigger or until poked by a verb
that may have made work claimable.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import orjson

from sloopd.core.state import Daemon
from sloopd.flows.flow import Flow
from sloopd.queue import gate
from sloopd.store import ClaimableTrigger, ClaimFacts, StoreUnavailable, Transaction
from sloopd.util.clock import now_ms

log = logging.getLogger(__name__)

IDLE_SECONDS = 60.0


def _no_floor(_stem: str) -> int:
    return 0


class Scheduler:
    def __init__(
        self,
        daemon: Daemon,
        start_run: Callable[[str], None],
        attempt_floor: Callable[[str], int] = _no_floor,
    ) -> None:
        """``attempt_floor`` says, for a branch stem (``sloop/fix-login``), the highest
        attempt a branch already has that the store may not know of (a store restored
        from an older backup: sloopd.core.leftovers); a claim numbers past it."""
        self.daemon = daemon
        self._start_run = start_run
        self._attempt_floor = attempt_floor
        self._poked = asyncio.Event()

    def poke(self) -> None:
        self._poked.set()

    async def loop(self) -> None:
        while True:
            self._poked.clear()
            # One instant per look: a trigger falling due between the claim and the
            # wake-up read would be neither claimed (not yet due) nor a next wake
            # (no longer in the future), and the scheduler slept IDLE_SECONDS.
            looked_at = now_ms()
            try:
                for run_id in self.claim_due(looked_at):
                    self._start_run(run_id)
            except StoreUnavailable as exc:
                log.warning("claiming waits for the store: %s", exc)
                await asyncio.sleep(1.0)
                continue
            except Exception:
                log.exception("claiming due triggers failed; retrying shortly")
                await asyncio.sleep(1.0)
                continue
            try:
                await self._sleep_until_next(looked_at)
            except StoreUnavailable as exc:
                # Reading when to wake failed (a lock held elsewhere): look again soon.
                # Raised out of here, it would end the scheduler for good, silently.
                log.warning("the scheduler waits for the store: %s", exc)
                await asyncio.sleep(1.0)

    async def _sleep_until_next(self, looked_at: int) -> None:
        wake = next_wake(self.daemon, looked_at)
        timeout = IDLE_SECONDS
        if wake is not None:
            timeout = min(timeout, max(0.0, (wake - now_ms()) / 1000))
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a
        # cancellation that races a poke, and shutdown would wait forever.
        try:
            async with asyncio.timeout(timeout):
                await self._poked.wait()
        except TimeoutError:
            pass

    def claim_due(self, now: int) -> list[str]:
        daemon = self.daemon
        store = daemon.require_store()
        gate.reopen_if_due(daemon)
        if daemon.gate.state != "open":
            return []
        settings = daemon.config
        claimed: list[tuple[str, str]] = []
        with store.writer.transaction() as tx:
            in_flight = tx.scalar("runs_in_flight_count")
            slots = settings.repo.parallel - int(in_flight or 0)
            # Triggers of tickets whose flow vanished from sloop.toml since the post
            # stay queued (a reload that restores the flow runs them; until then the
            # ticket shows waiting 'invalid_flow') and are stepped over, so they
            # never hold the head of the queue for the tickets behind them.
            skipped: set[str] = set()
            while slots > 0:
                due = tx.rows(ClaimableTrigger, "claimable_triggers", (now, slots + len(skipped)))
                fresh = [row for row in due if row.id not in skipped]
                if not fresh:
                    break
                for trigger_id, ticket_id, due_at_ms in fresh:
                    facts = tx.row(ClaimFacts, "ticket_claim_facts", (ticket_id,))
                    assert facts is not None
                    name, flow_name, last_attempt = facts
                    flow = settings.flows.get(flow_name)
                    if flow is None:
                        skipped.add(str(trigger_id))
                        continue
                    claimed.append(
                        (
                            self._claim(tx, trigger_id, ticket_id, (name, flow), last_attempt, now),
                            ticket_id,
                        )
                    )
                    slots -= 1
                    if daemon.metrics is not None:
                        daemon.metrics.queue_wait.observe(max(0, now - int(due_at_ms)) / 1000)
        for run_id, ticket_id in claimed:
            daemon.append_event("run_claimed", ticket=ticket_id, run=run_id)
        return [run_id for run_id, _ in claimed]

    def _claim(
        self,
        tx: Transaction,
        trigger_id: str,
        ticket_id: str,
        named: tuple[str, Flow],
        last: int,
        now: int,
    ) -> str:
        """Turn one trigger into a run with a snapshot of its flow; the run's id."""
        settings = self.daemon.config
        name, flow = named
        stem = f"{settings.repo.branch_prefix}{name}"
        # Past both the store's last attempt and any branch an attempt it forgot left:
        # reusing a number would find that branch and fail the run at its start.
        floor = self._attempt_floor(stem)
        attempt = max(int(last), floor) + 1
        if floor > int(last):
            log.warning(
                "%s: branch %s/%d exists but the store knows no such attempt (a store "
                "restored from an older backup?); the branch stays, this run is %s#%d",
                name,
                stem,
                floor,
                name,
                attempt,
            )
        run_id = tx.scalar(
            "run_insert",
            {
                "alias": f"{name}#{attempt}",
                "ticket": ticket_id,
                "attempt": attempt,
                "trigger": trigger_id,
                "flow": flow.name,
                "snapshot": orjson.dumps(flow.to_json()).decode(),
                "branch": f"{stem}/{attempt}",
                "now": now,
            },
        )
        assert isinstance(run_id, str)
        tx.run(
            "run_set_worktree",
            (str(self.daemon.layout.state_dir / "checkouts" / run_id), run_id),
        )
        tx.run("trigger_claim", {"id": trigger_id, "run": run_id})
        tx.run("ticket_set_state", {"id": ticket_id, "state": "running", "now": now})
        return run_id


def next_wake(daemon: Daemon, after: int | None = None) -> int | None:
    """When the daemon will next look at the queue by itself (epoch ms).

    ``after`` is the instant the scheduler last looked: a trigger due after it
    was not claimable then, so it is a wake-up even if it is due by now.
    """
    store = daemon.require_store()
    now = now_ms() if after is None else after
    candidates: list[int] = []
    due = store.scalar("trigger_next_wake", (now,))
    if due is not None:
        candidates.append(int(due))
    if daemon.gate.until_ms is not None and daemon.gate.until_ms > now:
        candidates.append(daemon.gate.until_ms)
    return min(candidates) if candidates else None
