"""The log records readers asked for, held in memory: a page is a join, not a query.

A committed record never changes: no statement updates or deletes a ``log_records``
row (retention keeps logs with their runs, migrations run before anything is
served).  So a body held for (run, position) is the store's body for ever;
nothing has to invalidate it, and only the memory bound lets it go.

A run's held records are one *window* of consecutive positions, filled two ways:

- read-through: a page read from the store (``LogPages``) is put in the run's
  window, or replaces it when the two neither touch nor overlap, when it is worth
  holding (``admits``): it reaches the end of the run's log (a follower: what the
  sink commits next extends it), or it overlaps the range read from the store just
  before for the same run (a page read again).  A log read once from end to end
  (``sloopctl logs``, a scroll through history) holds nothing: reading rows to hold
  them costs about twice the one query that joins them;
- the sink, after each commit (``committed``), appends a run's new records to a
  window that ends where they begin.  A follower of a live run reads up to the
  end, so its window grows with the run and every later page of it is a join
  of held bytes.  Runs that nobody reads cost the sink one dict lookup a
  batch: nothing of theirs is held.

Only what a transaction committed is held: the sink calls ``committed`` after the
commit, and a read sees only committed rows, so a refused write (a full disk)
leaves nothing here that the store lacks.

Bounded by ``budget`` bytes (bodies and their bookkeeping): past it, the windows
read longest ago go whole, down to three quarters of the budget; a window that
alone holds more loses its oldest records.  A budget of 0 holds nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

DEFAULT_LOG_CACHE_BYTES: Final = 16 << 20
# What a held body costs beyond its bytes: the bytes object's header and its list slot.
BODY_OVERHEAD: Final = 48
WINDOW_OVERHEAD: Final = 256  # a window object, its list, its dict entry
MAX_MISSED_RUNS: Final = 4096  # runs whose last range read is remembered (``admits``)


class _Window:
    __slots__ = ("bodies", "first", "size", "used")

    def __init__(self, first: int, bodies: list[bytes], used: int) -> None:
        self.first = first  # the position of bodies[0]
        self.bodies = bodies
        self.size = WINDOW_OVERHEAD + _cost(bodies)
        self.used = used  # the cache's read count when it was last read: recency

    @property
    def end(self) -> int:
        """The position of the last body held."""
        return self.first + len(self.bodies) - 1


def _cost(bodies: list[bytes]) -> int:
    return sum(map(len, bodies)) + BODY_OVERHEAD * len(bodies)


class LogCache:
    def __init__(self, budget: int | Callable[[], int] = DEFAULT_LOG_CACHE_BYTES) -> None:
        # Read at every fill, so a reload's new bound applies at the next one.
        self._budget = budget if callable(budget) else (lambda: budget)
        self.size = 0  # bytes held, as counted against the budget
        self._windows: dict[str, _Window] = {}
        self._reads = 0
        # Per run, the last range read from the store and not held (``admits``).
        self._missed: dict[str, tuple[int, int]] = {}

    @property
    def budget(self) -> int:
        return self._budget()

    @property
    def records(self) -> int:
        return sum(len(window.bodies) for window in self._windows.values())

    def join(self, run: str, after: int, upto: int) -> bytes | None:
        """The bodies of positions (after, upto] joined by commas, when all are held."""
        window = self._windows.get(run)
        if window is None:
            return None
        low = after + 1 - window.first
        high = upto + 1 - window.first
        if low < 0 or high > len(window.bodies):
            return None
        self._reads += 1
        window.used = self._reads
        return b",".join(window.bodies[low:high])

    def admits(self, run: str, after: int, upto: int, at_end: bool) -> bool:
        """Whether the range (after, upto] about to be read from the store is worth
        holding: it ends where the run's log ends, or overlaps the last range of the
        run read from the store (read again)."""
        if self._budget() <= 0:
            return False
        if at_end:
            return True
        missed = self._missed
        last = missed.get(run)
        if last is not None and last[0] < upto and after < last[1]:
            del missed[run]
            return True
        if len(missed) >= MAX_MISSED_RUNS:
            missed.clear()  # a bound on the bookkeeping: at worst a page more is read twice
        missed[run] = (after, upto)
        return False

    def hold(self, run: str, after: int, bodies: list[bytes]) -> None:
        """``bodies`` (positions after+1, after+2, ...) were read from the store."""
        if not bodies:
            return
        first = after + 1
        window = self._windows.get(run)
        self._reads += 1
        if window is None or first > window.end + 1 or first + len(bodies) < window.first:
            # No window, or one this range neither touches nor overlaps: the reader
            # moved, and the window follows it.
            if window is not None:
                self.size -= window.size
            window = self._windows[run] = _Window(first, bodies, self._reads)
            self.size += window.size
        else:
            window.used = self._reads
            beyond = window.end + 1 - first  # the first of ``bodies`` past the window
            after_end = bodies[beyond:] if beyond < len(bodies) else []
            before = bodies[: window.first - first] if first < window.first else []
            if before:
                window.bodies = before + window.bodies
                window.first = first
            if after_end:
                window.bodies.extend(after_end)
            added = _cost(before) + _cost(after_end)
            window.size += added
            self.size += added
        self._bound(run)

    def committed(self, records: list[tuple[Any, ...]]) -> None:
        """A batch the sink committed (``logheld.Record``s, in position order per run):
        appended to the window of each run that ends just before it."""
        windows = self._windows
        if not windows:
            return
        grown = None
        for record in records:
            window = windows.get(record[0])
            if window is not None and record[1] == window.end + 1:
                body = record[8]
                held = body.encode() if type(body) is str else bytes(body)
                window.bodies.append(held)
                cost = len(held) + BODY_OVERHEAD
                window.size += cost
                self.size += cost
                grown = record[0]
        self._bound(grown)  # and a lowered budget (a reload) applies here too

    def _bound(self, growing: str | None) -> None:
        """Past the budget, down to three quarters of it (so the sort below is paid once
        per quarter of the budget, not at every fill): the windows read longest ago
        first, ``growing`` last."""
        budget = self._budget()
        if self.size <= budget:
            return
        target = budget * 3 // 4
        windows = self._windows
        for run, window in sorted(windows.items(), key=lambda item: item[1].used):
            if run == growing:
                continue
            del windows[run]
            self.size -= window.size
            if self.size <= target:
                return
        if growing is None:
            return
        window = windows[growing]
        drop = 0
        freed = 0
        bodies = window.bodies
        while drop < len(bodies) and self.size - freed > target:
            freed += len(bodies[drop]) + BODY_OVERHEAD
            drop += 1
        if drop >= len(bodies):
            del windows[growing]
            self.size -= window.size
            return
        window.bodies = bodies[drop:]
        window.first += drop
        window.size -= freed
        self.size -= freed
