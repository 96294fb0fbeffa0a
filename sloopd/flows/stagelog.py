"""Reading and appending a run's stage log (the rows ``walk.replay`` consumes).

``replay_run`` is where every reader of a run's walk gets it (the run driver,
the stage executor, recovery, the worker verbs, ``show`` and ``diff``): the
run's flow snapshot and its stage log, replayed, in one place.
"""

from __future__ import annotations

from typing import Any

import orjson

from sloopd.flows import walk
from sloopd.flows.flow import Flow
from sloopd.store import RunRow, Store, Transaction
from sloopd.util.clock import now_ms


def read_log(store: Store, run_id: str) -> list[walk.LogRow]:
    return [
        walk.LogRow(seq, kind, stage, attempt, seat, at, orjson.loads(data))
        for seq, kind, stage, attempt, seat, at, data in store.all("stage_log_for_run", (run_id,))
    ]


def flow_of(run: RunRow) -> Flow:
    """The flow ``run`` was claimed with: its snapshot, never sloop.toml's flow now."""
    assert run.flow_snapshot is not None, f"{run.id} was read without its flow snapshot"
    return Flow.from_json(orjson.loads(run.flow_snapshot))


def replay_run(store: Store, run_id: str, flow: Flow | None = None) -> walk.Walk:
    """Where ``run_id``'s walk stands: its stage log replayed over its flow snapshot.

    ``flow`` is that snapshot when the caller holds it parsed already (a run's
    facts); otherwise it is read from the run's row.
    """
    if flow is None:
        run = store.run_by_id(run_id)
        if run is None:
            raise LookupError(f"no run '{run_id}'")
        flow = flow_of(run)
    return walk.replay(flow, read_log(store, run_id))


def append_step(
    tx: Transaction,
    run_id: str,
    kind: str,
    stage: str | None = None,
    attempt: int | None = None,
    seat: int | None = None,
    data: dict[str, Any] | None = None,
    at_ms: int | None = None,
) -> None:
    tx.run(
        "stage_log_append",
        {
            "run": run_id,
            "kind": kind,
            "stage": stage,
            "attempt": attempt,
            "seat": seat,
            "at": now_ms() if at_ms is None else at_ms,
            "data": orjson.dumps(data or {}).decode(),
        },
    )
