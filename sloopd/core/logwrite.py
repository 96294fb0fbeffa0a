"""The log sink's writing side: buffered records into the store, in order, weighed first.

Buffered records are written FLUSH_RECORDS to a transaction.  A batch holding output
is first weighed against the free space kept for runs (``logroom``): it is written
when it leaves the reserve free, held otherwise, and given up (counted in a
``dropped`` record, ``logheld``) when the daemon's own records wait behind it; the
daemon's records ahead of it need no room for output and are written at once.  A
batch the store refuses (a full disk, a lock held elsewhere) is held too.  Held
records are retried every RETRY_SECONDS; while they wait, up to MAX_HELD_RECORDS
(MAX_HELD_TEXT_BYTES of text) are held, and lines past that are dropped before they
get a cursor and counted (``drop``).  Counted losses are written, once the store
takes writes, after everything held before them, however often it refused between.

One transaction of everything held (0.7.0) grew the WAL by more than the disk had
freed: every retry failed, the counts waited behind it, and the next run's checkout
found the disk full again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from operator import itemgetter

import orjson

from sloopd.core.logcache import LogCache
from sloopd.core.logheld import Execution, GivenUp, Loss, Record, give_up_output
from sloopd.core.logroom import Move, Room, batch_cost, fits, move
from sloopd.core.longpoll import FeedNotices
from sloopd.store import Store, StoreUnavailable
from sloopd.util.clock import now_ms

log = logging.getLogger(__name__)

# Small batches bound how long one flush holds the loop (a few ms).
FLUSH_RECORDS = 1000
# While records are held: how often to try again, and how much to hold meanwhile.
RETRY_SECONDS = 1.0
MAX_HELD_RECORDS = 20_000
MAX_HELD_TEXT_BYTES = 32 << 20
# The daemon's own records: few, small, never dropped at the bound nor given up.
OWN_STREAM = "system"

_STREAM = 6  # a Record's stream column
_BODY = 8  # a Record's wire JSON
_body = itemgetter(_BODY)


class LogWriter:
    """Buffered records and what became of them; ``LogSink`` buffers, this writes."""

    def __init__(
        self,
        store: Store,
        on_flush: Callable[[int], None] | None,
        notices: FeedNotices | None,
        room: Room | None,
        cache: LogCache | None = None,
    ) -> None:
        self._store = store
        # What readers asked for, in memory; told of every commit (logcache).
        self.cache = cache if cache is not None else LogCache()
        # None: no reserve is kept (the store alone decides what is written).
        self._room = room
        self._pending: list[Record] = []
        # The last position buffered per run (pending), and stored per run (committed).
        self._pending_last: dict[str, int] = {}
        self._stored: dict[str, int] = {}
        # The last position of a run committed by this sink; None if it wrote none.  The
        # dict's own method: the hot ``logs`` page asks it with no Python call (the dict
        # is updated in place, never replaced).
        self.stored_through: Callable[[str], int | None] = self._stored.get
        self._timer: asyncio.TimerHandle | None = None
        self._soon = False  # the timer is the next turn of the loop, not FLUSH_INTERVAL
        self._on_flush = on_flush
        self._notices = notices
        # Counts the batches committed: what a reader knew of the log holds until it moves.
        self.generation = 0
        # Set while records are held (the store refuses them, or output would eat into
        # the reserve): why, for the loss records.  Held records take the slow path.
        self.held: str | None = None
        self._held_text_bytes = 0
        self.losses: dict[Execution, Loss] = {}

    # -- what LogSink provides ----------------------------------------------------------

    def _buffer_loss(self, execution: Execution, loss: Loss) -> None:
        """Buffer ``loss``'s ``dropped`` record at the end of its run; may raise
        StoreUnavailable (its counters are read from the store)."""
        raise NotImplementedError

    def _rewind(self, given: GivenUp) -> None:
        """The ordinals given-up lines had are free again: counters continue from ``given``."""
        raise NotImplementedError

    def _all_written(self) -> None:
        """Nothing is held any more."""

    # -- writing -------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """Nothing is buffered, held or counted as lost: a flush would write nothing."""
        return not self._pending and not self.losses and self.held is None

    def flush(self) -> bool:
        """Write what is buffered as far as the store and the reserve let it, in order.

        False while records stay held (the store refused them, or their output would
        eat into the reserve); they are tried again every RETRY_SECONDS.
        """
        self._cancel_timer()
        while True:
            if not self._pending:
                # Dropped lines are counted after everything held before them.
                if self.losses and self._buffer_losses():
                    continue
                break
            # A transaction's worth at a time, each weighed against the disk.
            chunk = self._pending[:FLUSH_RECORDS] if len(self._pending) > FLUSH_RECORDS else None
            decision, reason = self._decide(chunk or self._pending)
            lead = 0 if decision is Move.WRITE else self._own_lead()
            if lead:  # the daemon's records ahead of the output need no room for it
                if not self._write(self._pending[:lead]):
                    return False
                continue
            if decision is Move.HOLD:
                self._hold(reason)
                return False
            if decision is Move.GIVE_UP:
                self._give_up(reason)
                continue
            if not self._write(chunk):
                return False
        if self.losses:
            self._hold(self.held or "the store cannot be read")  # their counters: retried
            return False
        if self.held is not None:
            log.info("held log records are stored (or counted as dropped) again")
        self.held = None
        self._held_text_bytes = 0
        self._all_written()
        return True

    def _decide(self, batch: list[Record]) -> tuple[Move, str]:
        """Whether ``batch`` leaves the reserve free; the reason to give when it does not."""
        room = self._room
        if room is None or all(record[_STREAM] == OWN_STREAM for record in batch):
            return Move.WRITE, ""
        reading = room.read()
        cost = batch_cost(len(batch), sum(map(len, map(_body, batch))))
        if fits(reading.free, reading.reserve, cost):
            return Move.WRITE, ""
        decision = move(reading.free, reading.reserve, cost, self._own_records_wait())
        # The numbers this decision compared, read once: the reason must agree with them.
        why = reading.why_held(cost)
        if decision is Move.HOLD and reading.full:
            # Nothing was tried, yet the store has no room: the dashboard and doctor say so.
            self._store.writer.refused("full", why)
        return decision, why

    def _own_lead(self) -> int:
        """How many of the daemon's own records come before the first held output."""
        for index, record in enumerate(self._pending):
            if record[_STREAM] != OWN_STREAM:
                return index
        return len(self._pending)

    def _own_records_wait(self) -> bool:
        """Whether a count of dropped lines, or a record of the daemon's, waits behind
        held output."""
        if self.losses:
            return True
        lead = self._own_lead()
        return any(record[_STREAM] == OWN_STREAM for record in self._pending[lead:])

    def _write(self, chunk: list[Record] | None) -> bool:
        """One transaction: ``chunk``, the first of the held records, or (None) all of them."""
        batch = self._pending if chunk is None else chunk
        writer = self._store.writer
        # Inside another transaction the rows are not committed here: the enclosing one
        # may yet roll back, and the cache must never hold a row the store lacks.
        enclosed = writer.in_transaction
        try:
            with writer.transaction() as tx:
                tx.insert_many("log_insert", batch)
        except StoreUnavailable as exc:
            self._hold(exc.detail)
            return False
        if not enclosed:
            self.cache.committed(batch)
        if chunk is None:
            self._pending = []
            stored, self._pending_last = self._pending_last, {}
        else:
            del self._pending[: len(chunk)]
            stored = {record[0]: record[1] for record in chunk}
        self._stored.update(stored)
        self.generation += 1
        if self._on_flush is not None:
            self._on_flush(len(batch))
        if self._notices is not None:
            self._notices.logs_stored(stored)
        return True

    def _hold(self, reason: str) -> None:
        if self.held is None:
            log.warning("log records held in memory: %s", reason)
        self.held = reason
        if self._timer is None:
            self._schedule(RETRY_SECONDS)

    def _give_up(self, reason: str) -> None:
        """Count the held output in dropped records, so the daemon's own records get out."""
        given = give_up_output(self._pending, self.losses, reason, now_ms())
        self._pending = given.records
        self._rewind(given)
        self._pending_last = {record[0]: record[1] for record in self._pending}
        self._held_text_bytes = 0
        log.warning("%d held lines of output counted as dropped: %s", given.lines, reason)

    def _buffer_losses(self) -> bool:
        """Buffer one ``dropped`` record per execution that lost lines; False if none was."""
        losses, self.losses = self.losses, {}
        for execution, loss in losses.items():
            try:
                self._buffer_loss(execution, loss)
            except StoreUnavailable:
                self.losses[execution] = loss  # next time
        return bool(self._pending)

    def drop(self, execution: Execution, stream: str, size: int, ts: int) -> None:
        """Count a line that gets no cursor; its count is stored once the store takes it."""
        reason = self.held or "the store cannot be written"
        loss = self.losses.setdefault(execution, Loss(0, 0, ts, ts, reason, {}))
        loss.add(stream, size, ts, reason)
        if self._timer is None:
            self._schedule(RETRY_SECONDS)

    def holds_room(self, stream: str, text: str) -> bool:
        """Whether a held record of ``stream`` may still be buffered (the memory bound)."""
        if self.held is None or stream == OWN_STREAM:
            return True
        if len(self._pending) >= MAX_HELD_RECORDS or self._held_text_bytes >= MAX_HELD_TEXT_BYTES:
            return False
        self._held_text_bytes += len(text)
        return True

    def close(self) -> None:
        """At stop: store what the store takes, output given up before the daemon's own
        records; what still cannot be stored is named in the daemon's log."""
        if self.flush():
            return
        if any(record[_STREAM] != OWN_STREAM for record in self._pending):
            self._give_up(self.held or "the daemon stopped")
            if self.flush():
                return
        self._cancel_timer()
        log.error(
            "%d log records and a count of %d dropped lines could not be stored before "
            "the daemon stopped: %s",
            len(self._pending),
            self._unstored_lines(),
            self.held,
        )

    def _unstored_lines(self) -> int:
        """Lines of output the store does not have and no stored record counts."""
        lines = sum(loss.lines for loss in self.losses.values())
        for record in self._pending:
            if record[_STREAM] != OWN_STREAM:
                lines += 1
            elif '"dropped":' in record[_BODY]:
                lines += int(orjson.loads(record[_BODY])["dropped"]["lines"])
        return lines

    def runs_waiting(self) -> set[str]:
        """Runs with records or counts not stored yet (their counters must stay)."""
        return {record[0] for record in self._pending} | {key[0] for key in self.losses}

    def _schedule(self, delay: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            # No loop (a tool, a unit test): what waits for a turn is written now; a retry
            # waits for the caller's next flush (retrying here would recurse).
            if delay < RETRY_SECONDS:
                self.flush()
            return
        if self._timer is not None:
            self._timer.cancel()
        self._soon = delay == 0
        self._timer = loop.call_later(delay, self.flush)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._soon = False
