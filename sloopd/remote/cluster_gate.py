"""The gate while the Ray cluster cannot be reached: closed with the reason, reopened
when it is back.

A claimed run whose stages cannot be placed would only fail; so while the
executor knows the cluster down, the gate is in ``cooldown`` with a reason that
names the cluster and leads with the cause (``sloopctl status``, the dashboard and
``doctor`` show it).  The executor says so at every sign and every few seconds
while the outage lasts (``sloopd.remote.launcher``), and each saying pushes the
deadline ``HOLD_MS`` on when less than half of it is left; the first ``up``
reopens the gate.  The deadline is only a backstop: a daemon that stops using Ray
(or stops) leaves a gate that reopens by itself.  A gate an operator paused, or a
vendor limit closed, is left as it is.
"""

from __future__ import annotations

from sloopd.core.state import Daemon
from sloopd.queue import gate
from sloopd.util.clock import now_ms

PREFIX = "the Ray cluster at "
# How far each saying pushes the deadline: far past the next one (every few seconds),
# so the gate never reopens while the cluster is down, and pushed about once a
# minute, each push a gate_changed event.
HOLD_MS = 120_000
# The most characters of a reason: one line of `sloopctl status`.
MAX_REASON = 400


class ClusterGate:
    def __init__(self, daemon: Daemon, address: str) -> None:
        self.daemon = daemon
        self.address = address

    def __call__(self, down: str | None) -> None:
        self.daemon.executor_problem = down or ""  # status and doctor say it
        current = self.daemon.gate
        ours = current.state == "cooldown" and (current.reason or "").startswith(PREFIX)
        if down is None:
            if ours:
                gate.change(self.daemon, "open", None, None)
            return
        reason = f"{PREFIX}{self.address} cannot be reached: {down}"
        if len(reason) > MAX_REASON:
            reason = reason[: MAX_REASON - 1] + "…"
        if ours and current.reason == reason and (current.until_ms or 0) > now_ms() + HOLD_MS // 2:
            return  # the same outage, still held: no store write and no gate_changed event
        if current.state == "open" or ours:
            gate.change(self.daemon, "cooldown", now_ms() + HOLD_MS, reason)
