"""Long-poll: requests held until their feed has news, and the writers' wake-ups.

A ``logs`` or ``events`` request with ``wait_ms`` whose page would be empty is
held on a ``Waiter``.  The writers say what they stored, after the commit:
the log sink which runs got records (``logs_stored``), the run driver which
run settled (``run_settled``), ``Daemon.append_event`` which ticket and run an
event names (``event_appended``).  Each wakes only the waiters of what changed;
the woken request reads its page again and either answers or waits on for the
rest of its time.  Nothing polls: an idle waiter is a future and a timer.

Bounds: at most ``MAX_HELD`` requests are held at once in the whole daemon
(the wire layer bounds each connection too).  Past it a request is answered
at once, as if it had no ``wait_ms``, so a flood of followers degrades to
polling instead of piling up.  ``stop`` (the daemon shutting down) ends every
wait at once and refuses new ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from typing import Final

MAX_HELD: Final = 1024
# A stopping daemon gives its held requests this long to answer before it closes them.
STOP_ANSWER_SECONDS: Final = 1.0

# What an events waiter follows: every event, or those naming a ticket or a run;
# projects and patterns are woken by every event that names a ticket.
EVERYTHING: Final = ("all", "")
ANY_TICKET: Final = ("any-ticket", "")
EventKey = tuple[str, str]


class Waiter:
    """One held request: woken by news, its deadline, the daemon's stop, or ``cut``."""

    def __init__(self, notices: FeedNotices, keys: tuple[tuple[str, str], ...], timeout_s: float):
        loop = asyncio.get_running_loop()
        self._notices = notices
        self._keys = keys
        self._future: asyncio.Future[bool] = loop.create_future()
        self._timer = loop.call_later(timeout_s, self._end)
        self.ended = False  # deadline passed, cut short or daemon stopping: answer now
        self._since = time.perf_counter()
        self.waited_s = 0.0  # how long it waited so far (request metrics leave it out)

    def wake(self) -> None:
        if not self._future.done():
            self._future.set_result(True)

    def _end(self) -> None:
        self.ended = True
        if not self._future.done():
            self._future.set_result(False)

    def cut(self) -> None:
        """End the wait now: the client half-closed, or its connection holds too many."""
        self._end()

    async def news(self) -> bool:
        """Wait for the next wake-up; False once the wait is over (answer as things are)."""
        if self.ended:
            return False
        woken = await self._future
        self.waited_s = time.perf_counter() - self._since
        if woken and not self.ended:
            self._future = asyncio.get_running_loop().create_future()
        return woken and not self.ended

    def release(self) -> None:
        """The request is answered (or gone): forget it."""
        self._timer.cancel()
        self._notices._forget(self, self._keys)


class FeedNotices:
    def __init__(self, limit: int = MAX_HELD) -> None:
        self.limit = limit
        self._waiters: dict[tuple[str, str], set[Waiter]] = {}
        # The runs some held logs request follows (the log sink asks for every line).
        self.followed_runs: set[str] = set()
        self._held = 0
        self._idle: asyncio.Event | None = None
        self.stopping = False
        # Told the id of every run that settles (the feeds' run cache keeps `terminal`).
        self.on_settled: list[Callable[[str], None]] = []

    @property
    def held(self) -> int:
        return self._held

    def hold_logs(self, run: str, timeout_s: float) -> Waiter | None:
        """A waiter for news of ``run``'s log, or None when no more may be held."""
        return self._hold((("run-log", run),), timeout_s)

    def hold_events(self, keys: Iterable[EventKey], timeout_s: float) -> Waiter | None:
        return self._hold(tuple(keys), timeout_s)

    def _hold(self, keys: tuple[tuple[str, str], ...], timeout_s: float) -> Waiter | None:
        if self.stopping or self._held >= self.limit:
            return None
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return None  # called outside the daemon's loop (a tool, a benchmark): no one to wake
        waiter = Waiter(self, keys, timeout_s)
        for key in keys:
            self._waiters.setdefault(key, set()).add(waiter)
            if key[0] == "run-log":
                self.followed_runs.add(key[1])
        self._held += 1
        return waiter

    def _forget(self, waiter: Waiter, keys: tuple[tuple[str, str], ...]) -> None:
        found = False
        for key in keys:
            waiting = self._waiters.get(key)
            if waiting is not None and waiter in waiting:
                found = True
                waiting.discard(waiter)
                if not waiting:
                    del self._waiters[key]
                    if key[0] == "run-log":
                        self.followed_runs.discard(key[1])
        if found:
            self._held -= 1
            if self._held == 0 and self._idle is not None:
                self._idle.set()

    def _wake(self, key: tuple[str, str]) -> None:
        for waiter in list(self._waiters.get(key, ())):
            waiter.wake()

    # --- what the writers say, after their commit --------------------------------

    def logs_stored(self, runs: Iterable[str]) -> None:
        for run in runs:
            self._wake(("run-log", run))

    def run_settled(self, run: str) -> None:
        for callback in self.on_settled:
            callback(run)
        self._wake(("run-log", run))

    def event_appended(self, ticket: str | None, run: str | None) -> None:
        self._wake(EVERYTHING)
        if ticket is not None:
            self._wake(("ticket", ticket))
            self._wake(ANY_TICKET)
        if run is not None:
            self._wake(("run", run))

    # --- the daemon stopping -------------------------------------------------------

    async def stop(self, timeout_s: float = STOP_ANSWER_SECONDS) -> None:
        """End every wait now and hold no more; return once each held request has
        answered its page as it is (or after ``timeout_s``)."""
        self.stopping = True
        for waiting in list(self._waiters.values()):
            for waiter in list(waiting):
                waiter.cut()
        if self._held == 0:
            return
        self._idle = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout_s)
