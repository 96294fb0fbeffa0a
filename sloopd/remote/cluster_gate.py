"""The gate while the Ray cluster cannot be reached: closed with the reason, reopened
when it is back.

A claimed run whose stages cannot be placed would only fail; so while the driver
reports the cluster down, the gate is in ``cooldown`` with a reason that names the
cluster (``sloopctl status``, the dashboard and ``doctor`` show it), its deadline
pushed on at every failed reconnect, and the first ``up`` reopens it.  A gate an
operator paused, or a vendor limit closed, is left as it is.
"""

from __future__ import annotations

from sloopd.core.state import Daemon
from sloopd.queue import gate
from sloopd.util.clock import now_ms

PREFIX = "the Ray cluster at "
# How far each failed reconnect pushes the deadline: past the next attempt.
HOLD_MS = 30_000


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
        if ours and current.reason == reason and (current.until_ms or 0) > now_ms() + HOLD_MS // 2:
            return  # the same outage, still held: no store write and no gate_changed event
        if current.state == "open" or ours:
            gate.change(self.daemon, "cooldown", now_ms() + HOLD_MS, reason)
