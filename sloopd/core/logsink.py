"""Captured output into the store, batched so a flooding agent cannot starve requests.

Records are buffered in memory (a read of a child's pipe arrives as one batch of
lines, ``append_many``) and written in one transaction per batch: at
most every FLUSH_INTERVAL seconds, sooner when FLUSH_RECORDS are waiting, and
at the next turn of the loop when a follower waits on the run (long-poll).
Each record's wire JSON (cursor included) is built once here, at ingest, by
formatting around the one ``orjson`` encoding of its text, so reading a page
splices stored bytes instead of rebuilding objects.  After each commit the
sink knows how far every run it wrote is stored (``stored_through``) and tells
the feed waiters (``FeedNotices.logs_stored``).

Writing is ``logwrite``'s: what a refusing store or the free space kept for runs
holds back, what is dropped past the memory bound, and how it is counted.  Nothing
is lost silently.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from sloopd.core.logcache import LogCache
from sloopd.core.logheld import Execution, GivenUp, Loss, record_body
from sloopd.core.logroom import Room
from sloopd.core.logwrite import FLUSH_RECORDS as FLUSH_RECORDS  # tests, benchmarks
from sloopd.core.logwrite import OWN_STREAM, LogWriter
from sloopd.core.longpoll import FeedNotices
from sloopd.store import Store, StoreUnavailable
from sloopd.util.clock import now_ms

FLUSH_INTERVAL = 0.05


@dataclass(slots=True)
class _Counters:
    """One stage execution's ordinals, and its stage and attempt as the wire JSON spells them.

    ``run`` and ``stage`` are one-element lists shared by every execution of the
    run (of the stage), so one lookup per line finds all three ordinals.
    """

    run: list[int]
    stage: list[int]
    execution: int
    tag: str  # '"stage":"implement","attempt":2,'


_STREAM_JSON: dict[str, str] = {}


class LogSink(LogWriter):
    def __init__(
        self,
        store: Store,
        on_flush: Callable[[int], None] | None = None,
        notices: FeedNotices | None = None,
        room: Room | None = None,
        cache: LogCache | None = None,
    ) -> None:
        super().__init__(store, on_flush, notices, room, cache)
        self._runs: dict[str, list[int]] = {}
        self._stages: dict[tuple[str, str | None], list[int]] = {}
        self._executions: dict[Execution, _Counters] = {}
        self._followed = notices.followed_runs if notices is not None else None
        self._forget_later: set[str] = set()

    def append(
        self,
        run: str,
        stage: str | None,
        attempt: int | None,
        stream: str,
        text: str,
        split: bool = False,
        ts_ms: int | None = None,
        extra: dict[str, Any] | None = None,
        seat: int | None = None,
    ) -> None:
        """Buffer one record; never raises, whatever the store does."""
        if not (split or extra or ts_ms is not None):
            self.append_many(run, stage, attempt, stream, [text], seat=seat)
            return
        ts = time.time_ns() // 1_000_000 if ts_ms is None else ts_ms
        if seat is not None:
            extra = {**(extra or {}), "reviewer": seat}
        if self._buffer_or_drop(run, stage, attempt, stream, text, split, ts, extra):
            self._flush_if_full()
            self._wake(run)

    def append_many(
        self,
        run: str,
        stage: str | None,
        attempt: int | None,
        stream: str,
        texts: list[str],
        split: bool = False,
        seat: int | None = None,
    ) -> None:
        """Buffer a batch of lines of one stream, in order, read at one moment.

        The same records as ``append`` of each (cursors, batches of at most
        FLUSH_RECORDS, the held and dropped lines), at one call per batch.
        A panel seat's lines carry its index as ``reviewer`` (the name ``show``
        gives a seat), so a reader tells the seats of one execution apart.
        """
        ts = time.time_ns() // 1_000_000
        extra = None if seat is None else {"reviewer": seat}
        first = 0
        while first < len(texts):
            counters = self._executions.get((run, stage, attempt))
            if counters is None or split or self.held is not None:
                # An execution's first line, a split piece, records being held.
                if self._buffer_or_drop(
                    run, stage, attempt, stream, texts[first], split, ts, extra
                ):
                    self._flush_if_full()
                first += 1
                continue
            room = FLUSH_RECORDS - len(self._pending)
            if room <= 0:  # a batch of system records filled it
                self.flush()
                continue
            batch = texts[first : first + room] if first or room < len(texts) else texts
            first += len(batch)
            self._buffer_lines(run, stage, attempt, stream, batch, ts, counters, seat)
            self._flush_if_full()
        self._wake(run)

    def _buffer_lines(
        self,
        run: str,
        stage: str | None,
        attempt: int | None,
        stream: str,
        texts: list[str],
        ts: int,
        counters: _Counters,
        seat: int | None = None,
    ) -> None:
        """The common lines, inline: this runs for every line a child prints."""
        position, stage_position, execution_position = (
            counters.run[0],
            counters.stage[0],
            counters.execution,
        )
        count = len(texts)
        counters.run[0] += count
        counters.stage[0] += count
        counters.execution += count
        stream_json = _STREAM_JSON.get(stream) or _stream_json(stream)
        # The same bytes orjson writes for that record, without building it; the wire
        # record, cursor included, is stored once: pages are joined from these by SQLite.
        tag = counters.tag if seat is None else f'{counters.tag}"reviewer":{seat},'
        head = f'","ts_ms":{ts},{tag}"stream":{stream_json},"text":'
        dumps = orjson.dumps
        self._pending.extend(
            [
                (
                    run,
                    position + i,
                    stage,
                    attempt,
                    stage_position + i,
                    execution_position + i,
                    stream,
                    ts,
                    f'{{"cursor":"{position + i}{head}{dumps(text).decode()}}}',
                )
                for i, text in enumerate(texts, 1)
            ]
        )
        self._pending_last[run] = position + count

    def _flush_if_full(self) -> None:
        if len(self._pending) >= FLUSH_RECORDS and self.held is None:
            self.flush()

    def _wake(self, run: str) -> None:
        """Schedule the next flush: at the next turn when a follower waits on ``run``."""
        if not self._pending and not self.losses:
            return
        if self._followed is not None and run in self._followed:
            # A follower is held for this run: it sees the line at the next turn.
            if not self._soon and self.held is None:
                self._schedule(0)
        elif self._timer is None:
            self._schedule(FLUSH_INTERVAL)

    def _buffer_or_drop(
        self,
        run: str,
        stage: str | None,
        attempt: int | None,
        stream: str,
        text: str,
        split: bool,
        ts: int,
        extra: dict[str, Any] | None,
    ) -> bool:
        """The other lines: an execution's first, a split piece, records being held."""
        if not self.holds_room(stream, text):
            self.drop((run, stage, attempt), stream, len(text.encode(errors="replace")), ts)
            return False
        try:
            self._buffer(run, stage, attempt, stream, text, split, ts, extra)
        except StoreUnavailable as exc:  # reading the last cursor failed
            self._hold(exc.detail)
            self.drop((run, stage, attempt), stream, len(text.encode(errors="replace")), ts)
            return False
        return True

    def _buffer(
        self,
        run: str,
        stage: str | None,
        attempt: int | None,
        stream: str,
        text: str,
        split: bool,
        ts: int,
        extra: dict[str, Any] | None,
    ) -> None:
        counters = self._executions.get((run, stage, attempt))
        if counters is None:
            counters = self._counters(run, stage, attempt)
        if not (split or extra):
            self._buffer_lines(run, stage, attempt, stream, [text], ts, counters)
            return
        position = counters.run[0] = counters.run[0] + 1
        record: dict[str, Any] = {"ts_ms": ts, "stage": stage, "attempt": attempt}
        rest = dict(extra or {})
        if "reviewer" in rest:  # where a seat's common lines carry it (_buffer_lines)
            record["reviewer"] = rest.pop("reviewer")
        record.update(stream=stream, text=text)
        if split:
            record["split"] = True
        record.update(rest)
        counters.stage[0] += 1
        counters.execution += 1
        body = record_body(position, record)
        self._pending.append(
            (run, position, stage, attempt, counters.stage[0], counters.execution, stream, ts, body)
        )
        self._pending_last[run] = position

    def _counters(self, run: str, stage: str | None, attempt: int | None) -> _Counters:
        """A new execution's counters; each ordinal read once from the store."""
        run_cell = self._runs.get(run)
        if run_cell is None:
            run_cell = self._runs[run] = [self._last("log_max_position", (run,))]
        stage_cell = self._stages.get((run, stage))
        if stage_cell is None:
            stage_cell = self._stages[(run, stage)] = [
                self._last("log_max_stage_position", (run, stage))
            ]
        execution = self._last("log_max_execution_position", (run, stage, attempt))
        tag = f'"stage":{orjson.dumps(stage).decode()},"attempt":{orjson.dumps(attempt).decode()},'
        counters = self._executions[(run, stage, attempt)] = _Counters(
            run_cell, stage_cell, execution, tag
        )
        return counters

    def _last(self, query: str, params: tuple[Any, ...]) -> int:
        return int(self._store.scalar(query, params) or 0)

    def _buffer_loss(self, execution: Execution, loss: Loss) -> None:
        run, stage, attempt = execution
        extra = {"dropped": loss.dropped()}
        self._buffer(run, stage, attempt, OWN_STREAM, loss.text(), False, now_ms(), extra)

    def _rewind(self, given: GivenUp) -> None:
        for run, end in given.run_ends.items():
            self._runs[run][0] = end
        for key, end in given.stage_ends.items():
            self._stages[key][0] = end
        for execution, end in given.execution_ends.items():
            self._executions[execution].execution = end

    def _all_written(self) -> None:
        for run in self._forget_later - self.runs_waiting():
            self._forget_later.discard(run)
            self._drop_counters(run)

    def forget(self, run: str) -> None:
        """Drop a settled run's counters (they are re-read if it ever writes again).

        Not while its records still wait for the store: their cursors are assigned.
        """
        self.flush()
        if run in self.runs_waiting():
            self._forget_later.add(run)
            return
        self._drop_counters(run)

    def _drop_counters(self, run: str) -> None:
        self._runs.pop(run, None)
        self._stored.pop(run, None)
        self._stages = {k: v for k, v in self._stages.items() if k[0] != run}
        self._executions = {k: v for k, v in self._executions.items() if k[0] != run}


def _stream_json(stream: str) -> str:
    encoded = _STREAM_JSON[stream] = orjson.dumps(stream).decode()
    return encoded
