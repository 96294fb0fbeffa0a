"""The once-a-second look at every child: stalled past stall_kill_after, or past its timeout.

Both stop the child the same way (its sandbox gets SIGTERM, then SIGKILL) and let
the stage fail with a classification: ``stalled`` for silence, ``timed_out`` for
wall-clock time.  Time the daemon did not run is credited to both clocks before
they are read (``ActiveRun.credit_pause``), so a suspended host stops nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from sloopd.core.state import Daemon
from sloopd.runs import stop as stops
from sloopd.runs.runstate import ActiveRun
from sloopd.util.durations import format_ms

log = logging.getLogger(__name__)

STALL_CHECK_SECONDS = 1.0
# A stall tick later than this means the daemon was stopped or held, not the agents.
PAUSE_TOLERANCE_SECONDS = 0.5


def check(active: ActiveRun) -> None:
    child = active.child
    if child is None or stops.child_stopped(active.stop) is not None:
        return
    if active.stop is None or active.stop.find(stops.STALLED) is None:
        kill_after = active.config.agent.stall_kill_after_ms
        silent = active.silent_for_ms()
        if silent is not None and silent >= kill_after:
            active.stop_with(stops.stalled(kill_after))
            log.warning(
                "%s: stage %s silent for %d ms; stopping it", active.run_id, active.stage, silent
            )
            asyncio.get_running_loop().create_task(child.stop())
            return
    limit = active.child_timeout_ms
    running = active.running_for_ms()
    if limit is not None and running is not None and running >= limit:
        log.warning(
            "%s: stage %s ran %d ms, past its timeout; stopping it",
            active.run_id,
            active.stage,
            running,
        )
        active.stop_child(stops.timed_out(f"ran longer than timeout {format_ms(limit)}; stopped"))


async def watch(daemon: Daemon, active_runs: Mapping[str, ActiveRun]) -> None:
    """Stop a stage whose child has been silent past stall_kill_after, or ran past
    its timeout (``check``).

    Time the daemon itself did not run (SIGSTOP, a suspended VM, a loop held by
    a long call) is not the agents' silence: an agent blocked on a request to a
    stopped daemon is waiting for us.  A tick that comes late by more than
    PAUSE_TOLERANCE_SECONDS credits the gap to every child before judging.
    """
    last_tick = time.monotonic()
    stalled: set[str] = set()
    while True:
        await asyncio.sleep(STALL_CHECK_SECONDS)
        tick = time.monotonic()
        paused = tick - last_tick - STALL_CHECK_SECONDS
        last_tick = tick
        if paused > PAUSE_TOLERANCE_SECONDS:
            log.warning("the daemon did not run for %.1f s; not counted as silence", paused)
            for active in active_runs.values():
                active.credit_pause(paused)
        for active in list(active_runs.values()):
            check(active)
        # A stall is read from the clock, not written: a run crossing its
        # stall_after (or leaving it) is a new revision, so a held `show` (the
        # web view's, `show --follow`) answers now rather than at its timeout.
        now_stalled = {run_id for run_id, a in active_runs.items() if a.stall() is not None}
        if now_stalled != stalled:
            stalled = now_stalled
            daemon.changes.bump()
