"""``[[notify]]``: which committed events are told to which webhook targets.

The source is the event feed itself, read back from the store after the
write that appended the event committed: a settle is one transaction (the
run, its ticket and its event), and nothing is told that was rolled back.
``Daemon.append_event`` only wakes this reader; it reads on the loop, between
writes, from the cursor it reached (the feed's end when the daemon started, so
a restart tells nothing twice and runs that recovery settles are told).

What is told: a run that settles (``run_finished`` with its state, or
``run_aborted``), a gate change (``gate_changed``) and (0.9.0) a needs_review run
resolved (``run_resolved``, told as ``resolved``), to every target whose
``on`` names it, read from the configuration in force when the event is read
(a reload applies at once).  Delivery is ``sloopd.ops.webhooks``'s; each
attempt comes back here to be recorded as a ``notify_delivered`` or
``notify_failed`` event of the same ticket and run, and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any, Final

import orjson

from sloopd.core.rows import run_row
from sloopd.core.state import Daemon
from sloopd.ops.webhook_body import Notice, encode
from sloopd.ops.webhook_targets import Target
from sloopd.ops.webhooks import DELIVERED, DROPPED, FAILED, Deliveries, Delivery, Outcome
from sloopd.store import StoreUnavailable

log = logging.getLogger(__name__)

PAGE: Final = 100
# On stop: how long deliveries still pending may take before they are dropped.
STOP_GRACE_S: Final = 2.0
# A store that refused a read (full, busy) is read again after this.
RETRY_READ_S: Final = 1.0
_RUN_FIELDS: Final = (
    "id",
    "alias",
    "ticket",
    "attempt",
    "state",
    "halt",
    "reason",
    "classification",
    "flow",
    "branch",
    "claimed_at_ms",
    "started_at_ms",
    "finished_at_ms",
    "usage",
    "resolution",
)


def notice_name(kind: str, data: dict[str, Any]) -> str | None:
    """The ``on`` name an event answers to; None for events nobody is told of."""
    if kind == "run_finished":
        state = data.get("state")
        return state if state in ("merged", "failed", "needs_review") else None
    if kind == "run_aborted":
        return "aborted"
    if kind == "gate_changed":
        return "gate_changed"
    if kind == "run_resolved":  # 0.9.0
        return "resolved"
    return None


class Notices:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.deliveries = Deliveries(self._report)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.cursor = self._feed_end()

    def _feed_end(self) -> int:
        return int(self.daemon.require_store().scalar("events_max_position") or 0)

    @classmethod
    def started(cls, daemon: Daemon) -> Notices:
        """Reading from the feed's end now, woken by every event the daemon appends
        once ``Daemon.connect`` hands it ``poke``."""
        notices = cls(daemon)
        notices._task = asyncio.get_running_loop().create_task(notices._follow())
        return notices

    def poke(self) -> None:
        self._wake.set()

    async def close(self, grace_s: float = STOP_GRACE_S) -> int:
        """Read what the stop itself appended, give deliveries ``grace_s``; how many
        were dropped."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        with contextlib.suppress(StoreUnavailable):
            self.read_feed()
        dropped = await self.deliveries.close(grace_s)
        if dropped:
            log.warning("%d notifications dropped: the daemon stopped", dropped)
        return dropped

    async def _follow(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                self.read_feed()
            except StoreUnavailable as exc:
                log.warning("notifications wait for the store: %s", exc)
                await asyncio.sleep(RETRY_READ_S)
                self.poke()
            except Exception:
                # A bug here must not end notifications for the daemon's life.
                log.exception("reading events for notifications failed")

    def read_feed(self) -> None:
        """Every committed event after the cursor, told to the targets that want it."""
        store = self.daemon.store
        if store is None:
            return
        targets = self.daemon.config.notify
        if not targets:
            self.cursor = self._feed_end()  # nobody to tell: skip ahead for free
            return
        while True:
            page = store.all("events_page", (self.cursor, PAGE))
            for position, body in page:
                self.cursor = int(position)
                self._consider(orjson.loads(body), targets)
            if len(page) < PAGE:
                return

    def _consider(self, event: dict[str, Any], targets: tuple[Target, ...]) -> None:
        data = event.get("data") or {}
        on = notice_name(str(event.get("kind")), data)
        if on is None:
            return
        chosen = [target for target in targets if on in target.on]
        if not chosen:
            return
        notice = self._notice(on, event, data)
        for target in chosen:
            delivery = uuid.uuid4().hex
            self.deliveries.submit(
                Delivery(
                    id=delivery,
                    target=target,
                    on=on,
                    event=str(event["cursor"]),
                    ticket=event.get("ticket"),
                    run=event.get("run"),
                    body=encode(target, notice, delivery),
                )
            )

    def _notice(self, on: str, event: dict[str, Any], data: dict[str, Any]) -> Notice:
        run: dict[str, Any] | None = None
        gate: dict[str, Any] | None = None
        if event.get("run") is not None:
            run = self._run_facts(str(event["run"]), data)
        else:
            gate = {key: data.get(key) for key in ("from", "state", "until_ms", "reason")}
        return Notice(
            on=on,
            cursor=str(event["cursor"]),
            kind=str(event["kind"]),
            at_ms=int(event["at_ms"]),
            repo=self.daemon.layout.repo.name,
            run=run,
            gate=gate,
        )

    def _run_facts(self, run_id: str, data: dict[str, Any]) -> dict[str, Any]:
        store = self.daemon.require_store()
        row = run_row(store, run_id) or {"id": run_id, **data}
        facts = {key: row.get(key) for key in _RUN_FIELDS}
        ticket = store.ticket_by_id(facts["ticket"]) if facts["ticket"] else None
        facts["ticket_name"] = ticket.name if ticket is not None else None
        return facts

    def _report(self, outcome: Outcome) -> None:
        """Record an attempt (or a drop) as an event and count it."""
        delivery = outcome.delivery
        metrics = self.daemon.metrics
        if metrics is not None:
            if outcome.final in (DELIVERED, FAILED, DROPPED):
                metrics.notify_deliveries.labels(outcome.final).inc()
            if outcome.final in (None, FAILED):
                metrics.notify_attempt_failures.inc()
        if self.daemon.store is None:
            return
        try:
            self.daemon.append_event(
                outcome.kind, ticket=delivery.ticket, run=delivery.run, data=outcome.data()
            )
        except StoreUnavailable as exc:
            log.warning("%s not recorded: %s", outcome.kind, exc)
