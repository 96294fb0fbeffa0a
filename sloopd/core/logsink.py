"""Captured output into the store, batched so a flooding agent cannot starve requests.

Records are buffered in memory and written in one transaction per batch: at
most every FLUSH_INTERVAL seconds, sooner when FLUSH_RECORDS are waiting.
Each record's wire JSON (cursor included) is built once here, at ingest,
so reading a page splices stored bytes instead of rebuilding objects.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import orjson

from sloopd.store import Store
from sloopd.util.clock import now_ms

log = logging.getLogger(__name__)

FLUSH_INTERVAL = 0.05
# Small batches bound how long one flush holds the loop (a few ms).
FLUSH_RECORDS = 1000


class LogSink:
    def __init__(self, store: Store, on_flush: Callable[[int], None] | None = None) -> None:
        self._store = store
        self._pending: list[tuple[Any, ...]] = []
        self._positions: dict[str, int] = {}
        self._stage_positions: dict[tuple[str, str | None], int] = {}
        self._execution_positions: dict[tuple[str, str | None, int | None], int] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._on_flush = on_flush

    def append(
        self,
        run: str,
        stage: str | None,
        attempt: int | None,
        stream: str,
        text: str,
        split: bool = False,
        ts_ms: int | None = None,
    ) -> None:
        position = self._next(self._positions, run, "log_max_position", (run,))
        stage_position = self._next(
            self._stage_positions, (run, stage), "log_max_stage_position", (run, stage)
        )
        execution_position = self._next(
            self._execution_positions,
            (run, stage, attempt),
            "log_max_execution_position",
            (run, stage, attempt),
        )
        ts = now_ms() if ts_ms is None else ts_ms
        record: dict[str, Any] = {
            "ts_ms": ts,
            "stage": stage,
            "attempt": attempt,
            "stream": stream,
            "text": text,
        }
        if split:
            record["split"] = True
        self._pending.append(
            (
                run,
                position,
                stage,
                attempt,
                stage_position,
                execution_position,
                stream,
                ts,
                # The wire record, cursor included, stored once: pages are joined
                # from these strings by SQLite.
                f'{{"cursor":"{position}",' + orjson.dumps(record).decode()[1:],
            )
        )
        if len(self._pending) >= FLUSH_RECORDS:
            self.flush()
        elif self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.flush()
                return
            self._timer = loop.call_later(FLUSH_INTERVAL, self.flush)

    def _next(self, counters: dict[Any, int], key: Any, query: str, params: tuple[Any, ...]) -> int:
        current = counters.get(key)
        if current is None:
            row = self._store.one(query, params)
            current = int(row[0]) if row and row[0] is not None else 0
        counters[key] = current + 1
        return current + 1

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        with self._store.writer.transaction() as tx:
            tx.run_many("log_insert", batch)
        if self._on_flush is not None:
            self._on_flush(len(batch))

    def forget(self, run: str) -> None:
        """Drop a settled run's counters (they are re-read if it ever writes again)."""
        self.flush()
        self._positions.pop(run, None)
        self._stage_positions = {k: v for k, v in self._stage_positions.items() if k[0] != run}
        self._execution_positions = {
            k: v for k, v in self._execution_positions.items() if k[0] != run
        }
