"""What the daemon knows about a run in flight, beyond its stored rows."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sloopd.core.config import Config
from sloopd.flows.flow import Flow
from sloopd.runs.children import Child
from sloopd.vendor.tail import OutputTail


@dataclass
class ActiveRun:
    run_id: str
    # The configuration the run was admitted with: commands, limits, sandbox, patterns.
    # A reload (SIGHUP) applies to runs started after it, never to one in flight.
    config: Config
    task: asyncio.Task[None] | None = None
    child: Child | None = None
    stage: str | None = None
    attempt: int | None = None
    stage_started_ms: int | None = None
    # Set when the run must stop early: why, and whether its ticket is queued again.
    cancel_reason: str | None = None
    requeue: bool = False
    stall_after_ms: int = 0
    # A vendor limit settles the run failed and queues its ticket again then.
    requeue_at_ms: int | None = None
    # Set when the stall watchdog stopped the stage's group.
    stall_killed_after_ms: int | None = None
    # The stage's recent output, for classifying a failure: bounded as it is
    # collected (the last 500 lines, 256 Ki characters), whatever the child prints.
    recent_output: OutputTail = field(default_factory=OutputTail)

    def silent_for_ms(self) -> int | None:
        """Time since the executing child's last output (or its start)."""
        if self.child is None:
            return None
        return int((time.monotonic() - self.child.last_output_monotonic) * 1000)

    def credit_pause(self, seconds: float) -> None:
        """The daemon did not run for ``seconds``: that is not the child's silence."""
        if self.child is not None:
            now = time.monotonic()
            self.child.last_output_monotonic = min(now, self.child.last_output_monotonic + seconds)

    def stall(self) -> dict[str, Any] | None:
        silent = self.silent_for_ms()
        if silent is None or silent < self.stall_after_ms:
            return None
        return {
            "stage": self.stage,
            "attempt": self.attempt,
            "silent_for_ms": silent,
            "stall_after_ms": self.stall_after_ms,
        }


@dataclass(frozen=True, slots=True)
class RunFacts:
    run_id: str
    ticket: str
    ticket_name: str
    attempt: int
    branch: str
    worktree: Path
    flow: Flow
