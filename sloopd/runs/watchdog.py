"""The once-a-second look at every child: stalled past stall_kill_after, or past its timeout.

Both stop the child the same way (its sandbox gets SIGTERM, then SIGKILL) and let
the stage fail with a classification: ``stalled`` for silence, ``timed_out`` for
wall-clock time.  Time the daemon did not run is credited to both clocks before
they are read (``ActiveRun.credit_pause``), so a suspended host stops nothing.
"""

from __future__ import annotations

import asyncio
import logging

from sloopd.runs import stop as stops
from sloopd.runs.runstate import ActiveRun
from sloopd.util.durations import format_ms

log = logging.getLogger(__name__)


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
