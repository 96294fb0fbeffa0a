"""Reading and appending a run's stage log (the rows ``walk.replay`` consumes)."""

from __future__ import annotations

from typing import Any

import orjson

from sloopd.flows import walk
from sloopd.store import Store, Transaction
from sloopd.util.clock import now_ms


def read_log(store: Store, run_id: str) -> list[walk.LogRow]:
    return [
        walk.LogRow(seq, kind, stage, attempt, seat, at, orjson.loads(data))
        for seq, kind, stage, attempt, seat, at, data in store.all("stage_log_for_run", (run_id,))
    ]


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
