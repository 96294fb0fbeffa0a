"""What the log sink could not store: counted losses, and held output given up.

A buffered record already has its cursor (it is built once, at ingest), but no
reader has seen it: readers see the store, and the store has not got it.  So held
output that will not be written (``logroom.Move.GIVE_UP``) can leave without a
trace in the cursors: ``give_up_output`` takes every ``stdout``/``stderr`` record
out of the held ones, counts it in its execution's ``Loss``, puts that execution's
``dropped`` record where its first given-up line was, and numbers what stays again
from where the store ends, so cursors (and the per-stage and per-execution
ordinals) stay gapless.  The daemon's own records (``system``) and agents' notes
(``note``: their verb answered ok) are never given up.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

Execution = tuple[str, str | None, int | None]  # (run, stage, attempt)
# A buffered record: the columns of log_insert, the wire JSON (cursor first) last.
Record = tuple[Any, ...]  # (run, position, stage, attempt, stage_pos, exec_pos, stream, ts, body)
KEPT_STREAMS = frozenset({"system", "note"})


@dataclass(slots=True)
class Loss:
    """Lines of one stage execution that were dropped, not stored."""

    lines: int
    bytes: int
    from_ms: int
    to_ms: int
    reason: str
    streams: dict[str, int]

    def add(self, stream: str, size: int, ts: int, reason: str) -> None:
        self.lines += 1
        self.bytes += size
        # Given-up held lines are older than the lines dropped after them.
        self.from_ms = min(self.from_ms, ts)
        self.to_ms = max(self.to_ms, ts)
        self.reason = reason
        self.streams[stream] = self.streams.get(stream, 0) + 1

    def text(self) -> str:
        return (
            f"{self.lines} lines ({self.bytes} bytes) of output were not stored "
            f"between {_clock(self.from_ms)} and {_clock(self.to_ms)}: {self.reason}"
        )

    def dropped(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "bytes": self.bytes,
            "from_ms": self.from_ms,
            "to_ms": self.to_ms,
            "streams": self.streams,
            "cause": "store",
        }


def record_body(position: int, record: dict[str, Any]) -> str:
    """The stored wire JSON of a record: its cursor first, then ``record``'s fields."""
    return f'{{"cursor":"{position}",' + orjson.dumps(record).decode()[1:]


def loss_record(
    execution: Execution, loss: Loss, ordinals: tuple[int, int, int], ts: int
) -> Record:
    """The ``system`` record with ``dropped`` that stands where ``loss``'s lines are missing."""
    run, stage, attempt = execution
    position, stage_position, execution_position = ordinals
    body = record_body(
        position,
        {
            "ts_ms": ts,
            "stage": stage,
            "attempt": attempt,
            "stream": "system",
            "text": loss.text(),
            "dropped": loss.dropped(),
        },
    )
    return (run, position, stage, attempt, stage_position, execution_position, "system", ts, body)


@dataclass(slots=True)
class GivenUp:
    """Held records after their output was given up, and the last ordinal now taken."""

    records: list[Record]
    run_ends: dict[str, int] = field(default_factory=dict)
    stage_ends: dict[tuple[str, str | None], int] = field(default_factory=dict)
    execution_ends: dict[Execution, int] = field(default_factory=dict)
    lines: int = 0


def give_up_output(
    held: Iterable[Record], losses: dict[Execution, Loss], reason: str, now_ms: int
) -> GivenUp:
    """``held`` without its output; each execution's loss (merged into ``losses``'s and
    taken out of it) stands where its first given-up line was.

    ``held`` is in cursor order and continues the store without a gap (the sink's
    invariant), so the first record of a run (stage, execution) says where the
    store ends for it.
    """
    given = GivenUp([])
    items: list[Record | _LossSlot] = []
    placed: set[Execution] = set()
    for record in held:
        run, position, stage, attempt, stage_position, execution_position, stream, ts, body = record
        given.run_ends.setdefault(run, position - 1)
        given.stage_ends.setdefault((run, stage), stage_position - 1)
        execution = (run, stage, attempt)
        given.execution_ends.setdefault(execution, execution_position - 1)
        if stream in KEPT_STREAMS:
            items.append(record)
            continue
        if execution not in placed:
            placed.add(execution)
            items.append(_LossSlot(execution))  # its dropped record goes here
        size = len(orjson.loads(body)["text"].encode(errors="replace"))
        loss = losses.setdefault(execution, Loss(0, 0, ts, ts, reason, {}))
        loss.add(stream, size, ts, reason)
        given.lines += 1
    for item in items:
        if isinstance(item, _LossSlot):
            loss = losses.pop(item.execution)
            ordinals = _next(given, item.execution)
            given.records.append(loss_record(item.execution, loss, ordinals, now_ms))
        else:
            given.records.append(_renumbered(item, _next(given, (item[0], item[2], item[3]))))
    return given


@dataclass(frozen=True, slots=True)
class _LossSlot:
    """Where an execution's dropped record goes among the records that stay."""

    execution: Execution


def _next(given: GivenUp, execution: Execution) -> tuple[int, int, int]:
    """Take the next run, stage and execution ordinal of ``execution``."""
    run, stage, _attempt = execution
    given.run_ends[run] += 1
    given.stage_ends[(run, stage)] += 1
    given.execution_ends[execution] += 1
    return (
        given.run_ends[run],
        given.stage_ends[(run, stage)],
        given.execution_ends[execution],
    )


def _renumbered(record: Record, ordinals: tuple[int, int, int]) -> Record:
    run, position, stage, attempt, stage_position, execution_position, stream, ts, body = record
    if ordinals == (position, stage_position, execution_position):
        return record
    old_head = f'{{"cursor":"{position}"'
    assert body.startswith(old_head), body[:40]
    new_position = ordinals[0]
    body = f'{{"cursor":"{new_position}"' + body[len(old_head) :]
    return (run, new_position, stage, attempt, ordinals[1], ordinals[2], stream, ts, body)


def _clock(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))
