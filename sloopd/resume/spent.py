"""What an execution a crash cut short spent, read back from the output it stored.

A child's usage lives in the driver's memory while it runs (``ActiveRun.live``) and
reaches the stage log with its row; a SIGKILLed daemon lost that memory, but the
child's stdout lines are stored as they arrive, and its agent's stream reported its
usage in them.  Reading them through the same parser gives the usage the run's budget
counts (issue 38: budgets count the interrupted execution's usage).  Lines the output
budget dropped are not there, so this is at most what the child spent.
"""

from __future__ import annotations

from typing import Any

import orjson

from sloopd.core.config import Config
from sloopd.flows.flow import Stage
from sloopd.store import Store
from sloopd.vendor import usage as usages
from sloopd.vendor.pricing import CostReader


def spent_by(
    store: Store, config: Config, run_id: str, stage: Stage, attempt: int, seat: int | None
) -> dict[str, Any] | None:
    """The usage row of one execution (or panel seat) from its stored stdout; None when
    its stream reported none."""
    try:
        parse = usages.for_execution(stage.stream_of(seat, config.agent.stream))
    except usages.UnknownStream:
        return None
    if parse is None:
        return None
    usage, reported = usages.Usage(), False
    for (body,) in store.all("logs_execution_stdout", (run_id, stage.name, attempt)):
        record = orjson.loads(body)
        text = record.get("text")
        if record.get("reviewer") != seat or not isinstance(text, str):
            continue
        try:
            reported = parse(text, usage) or reported
        except Exception:  # an agent's output is untrusted text: a line it cannot read
            continue
    if not reported:
        return None
    return CostReader(config.pricing, None, None)(usage).row()
