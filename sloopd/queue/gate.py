"""The gate: whether the scheduler may claim work.

``cooldown`` is closed by a vendor rate or usage limit until a deadline and
reopens by itself; ``paused`` is closed by an operator until they reopen it.
The gate lives in the store, so a restart keeps it and its deadline, and
every change is a repository-wide ``gate_changed`` event.

A limit whose reset nothing names is *probed*: the gate reopens after
``agent.probe_cooldown``, and each time a run meets the limit again after a
reopening the wait doubles, up to ``agent.cooldown``; an agent stage that gets
through starts the probe over (``limit_lifted``).  A wait of a fixed 30 minutes
kept the queue idle 25 minutes past a 5-minute limit (issue 24).  The count of
failed probes is the daemon's own, not the store's: a restart starts over.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from sloopd.core.rows import Gate
from sloopd.core.state import Daemon
from sloopd.store import GateRow
from sloopd.util.clock import now_ms
from sloopd.util.durations import format_ms

log = logging.getLogger(__name__)


def load(daemon: Daemon) -> None:
    row = daemon.require_store().row(GateRow, "gate_read")
    if row is not None:
        daemon.gate = Gate.of(row)


def change(daemon: Daemon, state: str, until_ms: int | None, reason: str | None) -> Gate:
    previous = daemon.gate
    gate = Gate(state=state, until_ms=until_ms, reason=reason)
    store = daemon.require_store()
    # The gate, its row and its event change together or not at all (a full store).
    with store.writer.transaction() as tx:
        tx.run("gate_write", {"state": state, "until": until_ms, "reason": reason, "now": now_ms()})
        daemon.append_event("gate_changed", data={"from": previous.state, **gate.row()})
    daemon.gate = gate
    log.info("gate %s -> %s%s", previous.state, state, f" ({reason})" if reason else "")
    daemon.poke()
    return gate


def reopen_by_hand(daemon: Daemon) -> Gate:
    """The operator ends a pause or a cooldown early; tickets queued for the
    cooldown's end become due now instead of waiting for the old deadline."""
    previous = daemon.gate
    if previous.state == "open":
        return previous
    if previous.state == "cooldown" and previous.until_ms is not None:
        with daemon.require_store().writer.transaction() as tx:
            tx.run("triggers_due_now", {"due": previous.until_ms, "now": now_ms()})
    return change(daemon, "open", None, None)


def cool_down(daemon: Daemon, until_ms: int, reason: str) -> Gate:
    """A vendor limit: close until ``until_ms``; a later deadline wins, a pause stays."""
    current = daemon.gate
    if current.state == "paused":
        return current
    if current.state == "cooldown" and (current.until_ms or 0) >= until_ms:
        return current
    return change(daemon, "cooldown", until_ms, reason)


def limit_deadline(
    now: int, reset_at_ms: int | None, cooldown_ms: int, max_cooldown_ms: int
) -> tuple[int, str]:
    """When the gate reopens after a vendor limit, and what its reason adds when capped.

    The vendor's reset time when it names one still ahead, else now plus
    ``agent.cooldown``; never later than now plus ``agent.max_cooldown``, so one
    line saying "resets in 31 days" (or a misread date) cannot close the gate
    for a month.  The note is empty unless the deadline was capped.
    """
    if reset_at_ms is not None and reset_at_ms > now:
        until, said = reset_at_ms, f"the agent said {_moment(reset_at_ms)}"
    else:
        until, said = now + cooldown_ms, f"cooldown {format_ms(cooldown_ms)}"
    cap = now + max_cooldown_ms
    if until <= cap:
        return until, ""
    return cap, f" ({said}; capped at max_cooldown {format_ms(max_cooldown_ms)})"


def probe_wait_ms(
    failed_probes: int, probe_ms: int, cooldown_ms: int, retry_after_ms: int | None = None
) -> int:
    """How long a limit with no named reset closes the gate.

    ``probe_ms`` doubled for each probe in a row that met the limit again, never
    longer than ``cooldown_ms``, and never shorter than the retry delay the CLI
    relayed for it (``retry_after_ms``) while that fits under ``cooldown_ms``.
    """
    doublings = min(max(failed_probes, 0), 32)  # past 2**32 every wait is capped anyway
    # Whole seconds up: the reason reads "6s", not Claude's jittered "5s465ms".
    relayed = -(-(retry_after_ms or 0) // 1000) * 1000
    return min(max(probe_ms << doublings, relayed), cooldown_ms)


def cool_down_for_limit(
    daemon: Daemon, reset_at_ms: int | None, reason: str, retry_after_ms: int | None = None
) -> int:
    """A vendor limit: close the gate until its (capped) deadline; the deadline."""
    agent = daemon.config.agent
    now = now_ms()
    if reset_at_ms is not None and reset_at_ms > now:
        until, note = limit_deadline(now, reset_at_ms, agent.cooldown_ms, agent.max_cooldown_ms)
    else:
        wait = probe_wait_ms(
            _next_probe(daemon), agent.probe_cooldown_ms, agent.cooldown_ms, retry_after_ms
        )
        until, note = limit_deadline(now, None, wait, agent.max_cooldown_ms)
        note = note or f" (no reset named: trying again after {format_ms(wait)})"
    cool_down(daemon, until, reason + note)
    return until


def _next_probe(daemon: Daemon) -> int:
    """Failed probes so far; counted once per reopening, not once per run that met it.

    Runs in flight when a limit strikes meet it together: only the first, with
    the gate still open, counts; the others find the gate closed and reuse its wait.
    """
    if daemon.gate.state == "open":
        daemon.limit_probes += 1
        return daemon.limit_probes - 1
    return max(daemon.limit_probes - 1, 0)


def limit_lifted(daemon: Daemon) -> None:
    """An agent stage got through without a limit: the next one is probed from the start."""
    daemon.limit_probes = 0


def _moment(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC")


def reopen_if_due(daemon: Daemon) -> None:
    gate = daemon.gate
    if gate.state == "cooldown" and gate.until_ms is not None and gate.until_ms <= now_ms():
        change(daemon, "open", None, None)
