"""What the daemon knows about a run in flight, beyond its stored rows."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sloopd.core.config import Config
from sloopd.flows.flow import Budget, Flow
from sloopd.proc.lines import LastWords
from sloopd.proc.stage_io import RunningChild
from sloopd.runs import stop as stops
from sloopd.runs.stop import Stop
from sloopd.vendor.tail import OutputTail
from sloopd.vendor.usage import Usage, total


@dataclass
class ActiveRun:
    run_id: str
    # The configuration the run was admitted with: commands, limits, sandbox, patterns.
    # A reload (SIGHUP) applies to runs started after it, never to one in flight.
    config: Config
    task: asyncio.Task[None] | None = None
    child: RunningChild | None = None  # where it runs is its launcher's
    stage: str | None = None
    attempt: int | None = None
    stage_started_ms: int | None = None
    stall_after_ms: int = 0
    # Why the run (or its executing child) must stop, strongest first; set only
    # through ``stop_with``, which keeps today's precedence (sloopd.runs.stop).
    stop: Stop | None = None
    # The stage's recent output, for classifying a failure: bounded as it is
    # collected (the last 500 lines, 256 Ki characters), whatever the child prints.
    recent_output: OutputTail = field(default_factory=OutputTail)
    # The executing child's last non-empty line of each stream, which a failure by its
    # exit code quotes (one short string per stream: sloopd.proc.lines.LastWords).
    last_words: LastWords = field(default_factory=LastWords)
    # The executing child's wall clock (time.monotonic() at its start, moved on by
    # the daemon's own pauses) and its limit (stage timeout, else the agent's).
    child_started_monotonic: float | None = None
    child_timeout_ms: int | None = None
    # What the run's agents reported spending: finished children, and the one
    # executing (None until its stream reports).  A run continued after a restart
    # starts from what its stage log stored (sloopd.runs.runner.resume).
    budget: Budget = field(default_factory=Budget)
    spent: Usage | None = None
    live: Usage | None = None
    # Tools the child's CLI said it refused for want of permission (Claude Code's
    # permission_denials): named in the stage's reason.
    refused_tools: tuple[str, ...] = ()
    # Set once the run is cancelled or the daemon stops: the git call that
    # makes the run's branch or moves main is killed then, with its hooks, instead of
    # being waited for (sloopd.git.ops.update_refs, ff_only), so a hook that hangs
    # cannot hold the answer.
    interrupt: asyncio.Event = field(default_factory=asyncio.Event)

    def stop_with(self, new: Stop) -> None:
        """The one way a run is told to stop: the stronger stop stays (sloopd.runs.stop)."""
        self.stop = stops.stop_with(self.stop, new)
        if stops.interrupts_git(self.stop):
            self.interrupt.set()

    def stop_child(self, why: Stop) -> None:
        """Stop the executing child (as the stall watchdog does); its stage fails with why.

        A child not started yet is stopped as soon as it is (sloopd.runs.spawning).
        """
        self.stop_with(why)
        if self.child is not None:
            asyncio.get_running_loop().create_task(self.child.stop())

    def rebuild(self, cause: str) -> None:
        """The merge queue's word that the run's candidate is stale: the executing child
        stops and its stage ends ``rebuilt`` (sloopd.landing.steps)."""
        self.stop_child(stops.rebuilt(cause))

    def aborted(self) -> str | None:
        """The abort's reason while the run is cancelled (``cancel`` always gives one)."""
        found = stops.cancelled(self.stop)
        return None if found is None else found.reason or ""

    def continues(self) -> bool:
        """The daemon stops and nothing stronger settles the run: it continues at next start."""
        return stops.suspended(self.stop)

    def seat_ended(self) -> None:
        """A panel seat's timeout is spent: each seat has its own clock."""
        self.stop = stops.after_seat(self.stop)

    def stage_ended(self) -> None:
        """The child's stops end with its stage; an abort or a halt outlives it."""
        self.stop = stops.after_stage(self.stop)

    def used(self) -> Usage | None:
        """The run's usage so far, the executing child's included."""
        return total([self.spent, self.live])

    def usage_total(self) -> dict[str, Any] | None:
        used = self.used()
        return used.row() if used is not None else None

    def live_usage(self) -> dict[str, Any] | None:
        """The executing child's usage so far (a panel's earlier seats are stored)."""
        return self.live.row() if self.live is not None else None

    def live_node(self) -> dict[str, Any] | None:
        """The Ray node the executing child runs on (None: this host, or still placed)."""
        node = self.child.node if self.child is not None else None
        # Its clock starts once it really started (ChildStarter.run: wait_started).
        if node is not None and self.child_started_monotonic is not None:
            return dict(node)
        return None

    def running_for_ms(self) -> int | None:
        """Wall-clock time of the executing child, without the daemon's pauses."""
        if self.child is None or self.child_started_monotonic is None:
            return None
        return int((time.monotonic() - self.child_started_monotonic) * 1000)

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
            if self.child_started_monotonic is not None:
                self.child_started_monotonic = min(now, self.child_started_monotonic + seconds)

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
    # The commit the run's branch started from; "" until its driver prepared the run.
    base: str = ""

    def execution_name(self, stage: str, attempt: int, seat: int | None) -> str:
        """The name an execution's ref carries (``refs/sloop/runs/<run>/<name>``): stage
        names are free text, refs are not, so executions are named by flow position."""
        index = self.flow.index(stage)
        return f"{index}-{attempt}" + (f"-seat{seat}" if seat is not None else "")
