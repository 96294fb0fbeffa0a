"""The repository's merge queue: who builds on whom, who may land, who is rebuilt.

One object per daemon, driven only from the event loop, so every decision below sees
one consistent queue.  Runs ask it at four points of their landing
(sloopd.landing.steps): before the ``sync`` (``build_turn``), after a failed landing stage
(``judge_failure``), before the ``ff_only`` (``landing_turn``) and after it
(``landed``, ``leave``).  Whatever changes, ``_changed`` wakes every waiting run,
which looks again; no run is told anything it cannot check against the queue itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from sloopd.core.state import Daemon
from sloopd.landing.entry import (
    GATES_PASSED,
    Entry,
    Go,
    Judgement,
    Rebuild,
    Stands,
    Stopped,
    Turn,
)
from sloopd.store import StoreUnavailable
from sloopd.util.clock import now_ms

log = logging.getLogger(__name__)

# How often main's ref is read while runs are queued: a push outside the queue makes
# every candidate stale, and gates running on stale candidates are time thrown away.
MAIN_POLL_SECONDS = 1.0


class MergeQueue:
    def __init__(
        self,
        daemon: Daemon,
        *,
        read_main: Callable[[], Awaitable[str | None]],
        on_stale: Callable[[str, str], None],
        poll_seconds: float = MAIN_POLL_SECONDS,
    ) -> None:
        """``read_main``: main's tip now; ``on_stale(run, cause)``: stop that run's gate
        child, its candidate is stale (the driver then rebuilds)."""
        self.daemon = daemon
        self._read_main = read_main
        self._on_stale = on_stale
        self._poll_seconds = poll_seconds
        self._entries: dict[str, Entry] = {}  # insertion order is queue order
        self._changed = asyncio.Event()
        # Where the queue believes main is: read by the head's build, moved by landings.
        self.main_tip: str | None = None
        # Bumped around every landing, so a read of main that a landing overtook is not
        # taken for a push outside the queue.
        self._landings = 0
        self._watcher: asyncio.Task[None] | None = None

    # -- reading ---------------------------------------------------------------------

    @property
    def window(self) -> int:
        return self.daemon.config.repo.window

    def entry(self, run_id: str) -> Entry | None:
        return self._entries.get(run_id)

    def rows(self) -> list[dict[str, Any]]:
        order = list(self._entries.values())
        return [e.row(i + 1, self.window, order[:i]) for i, e in enumerate(order)]

    def row_of(self, run_id: str) -> dict[str, Any] | None:
        order = list(self._entries.values())
        for i, e in enumerate(order):
            if e.run_id == run_id:
                return e.row(i + 1, self.window, order[:i])
        return None

    def build_of(self, run_id: str) -> Go | None:
        """What the run's sync builds on, once ``build_turn`` said so."""
        entry = self._entries.get(run_id)
        if entry is None or entry.state != "building" or entry.onto_commit is None:
            return None
        return Go(entry.onto_commit, entry.onto_branches)

    def stale_cause(self, run_id: str) -> str | None:
        entry = self._entries.get(run_id)
        if entry is None:
            return "it is not in the merge queue"
        return entry.stale

    def _ahead(self, run_id: str) -> list[Entry]:
        ahead: list[Entry] = []
        for entry in self._entries.values():
            if entry.run_id == run_id:
                return ahead
            ahead.append(entry)
        raise KeyError(run_id)

    # -- a run's way through -----------------------------------------------------------

    def join(self, run_id: str, alias: str, ticket: str, branch: str) -> Entry:
        entry = self._entries.get(run_id)
        if entry is not None:
            return entry
        entry = self._entries[run_id] = Entry(run_id, alias, ticket, branch)
        self._event("queue_joined", entry, {"position": len(self._entries)})
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._watch_main())
        self._notify()
        return entry

    async def build_turn(self, run_id: str, interrupt: asyncio.Event) -> Turn:
        """Wait until the run may build its candidate; say on what."""
        entry = self._entries[run_id]
        if entry.state != "waiting":
            entry.state = "waiting"
            self._notify()
        while True:
            ahead = self._ahead(run_id)
            if len(ahead) < self.window:
                built_ahead = [e for e in ahead if not e.conflicted]
                nearest = built_ahead[-1] if built_ahead else None
                if nearest is None:
                    main = await self._read_main()
                    if main is None:
                        return Rebuild("main names no commit")
                    if self._entries.get(run_id) is not entry or self._ahead(run_id):
                        continue  # the queue changed while main was read
                    if self.main_tip is not None and main != self.main_tip:
                        self._main_moved(main)
                    self.main_tip = main
                    return self._begin_build(entry, main, (), ())
                if nearest.candidate is not None and nearest.stale is None:
                    return self._begin_build(
                        entry,
                        nearest.candidate,
                        (*nearest.onto_runs, nearest.run_id),
                        (*nearest.onto_branches, nearest.branch),
                    )
            if not await self._wait(interrupt):
                return Stopped()

    def _begin_build(
        self, entry: Entry, onto: str, runs: tuple[str, ...], branches: tuple[str, ...]
    ) -> Go:
        entry.state, entry.candidate, entry.stale = "building", None, None
        entry.conflicted = False
        entry.onto_commit, entry.onto_runs, entry.onto_branches = onto, runs, branches
        entry.builds += 1
        self._notify()
        return Go(onto, branches)

    def built(self, run_id: str, candidate: str) -> None:
        """Its sync passed: the candidate exists, those behind may build on it."""
        entry = self._entries.get(run_id)
        if entry is None:
            return
        entry.candidate, entry.state = candidate, "gating"
        self._notify()

    def build_failed(self, run_id: str) -> None:
        """Its sync failed: no candidate; those behind may build past it meanwhile."""
        entry = self._entries.get(run_id)
        if entry is not None:
            entry.conflicted = True
            self._notify()

    def gate_started(self, run_id: str) -> None:
        entry = self._entries.get(run_id)
        if entry is not None:
            entry.gate_executions += 1
            entry.state = "gating"
            self._notify()

    async def judge_failure(self, run_id: str, interrupt: asyncio.Event) -> Judgement:
        """A landing stage failed: hold it while a run ahead in its candidate may still
        leave (then it is rebuilt instead); once all of them passed, it stands."""
        entry = self._entries.get(run_id)
        if entry is None:
            return Stands()
        while True:
            if entry.stale is not None:
                return Rebuild(entry.stale)
            pending = [
                e
                for e in self._ahead(run_id)
                if e.run_id in entry.onto_runs and e.state not in GATES_PASSED
            ]
            if not pending:
                return Stands()
            if entry.state != "held":
                entry.state = "held"
                self._notify()
            if not await self._wait(interrupt):
                return Stopped()

    async def landing_turn(self, run_id: str, interrupt: asyncio.Event) -> Turn:
        """Every gate passed: wait until every run ahead has landed or left, then land
        from where the candidate was built (which main must be)."""
        entry = self._entries[run_id]
        if entry.state != "passed":
            entry.state = "passed"
            self._notify()
        while True:
            if entry.stale is not None:
                return Rebuild(entry.stale)
            if not self._ahead(run_id):
                main = await self._read_main()
                if entry.stale is not None:
                    return Rebuild(entry.stale)
                if main is None or main != entry.onto_commit:
                    return Rebuild(self._main_moved(main))
                entry.state = "landing"
                self._landings += 1
                self._notify()
                return Go(main, entry.onto_branches)
            if not await self._wait(interrupt):
                return Stopped()

    async def landing_failed(self, run_id: str) -> Judgement:
        """Its ff_only failed: main moved outside the queue (rebuilt), or its own cause."""
        entry = self._entries.get(run_id)
        self._landings += 1
        if entry is None:
            return Stands()
        entry.state = "passed"
        main = await self._read_main()
        if main != entry.onto_commit:
            return Rebuild(self._main_moved(main))
        return Stands()

    def landed(self, run_id: str, commit: str) -> None:
        entry = self._entries.pop(run_id, None)
        self._landings += 1
        self.main_tip = commit
        if entry is None:
            return
        waited_ms = max(0, now_ms() - entry.joined_at_ms)
        self._event("queue_landed", entry, {"commit": commit, "waited_ms": waited_ms})
        metrics = self.daemon.metrics
        if metrics is not None:
            metrics.merge_queue_wait.observe(waited_ms / 1000)
            metrics.merge_queue_gate_executions.observe(entry.gate_executions)
        self._emptied()
        self._notify()

    def leave(self, run_id: str, cause: str, kind: str, *, behind: bool = True) -> None:
        """The run leaves without landing (its own failure stood, an abort, its end):
        every run behind whose candidate holds its work is rebuilt (not when ``behind``
        is False: the daemon stops, and the whole queue with it).  Idempotent."""
        entry = self._entries.pop(run_id, None)
        if entry is None:
            return
        self._event("queue_left", entry, {"cause": cause})
        if behind:
            holding = [e for e in self._entries.values() if run_id in e.onto_runs]
            self._make_stale(holding, f"{run_id} left the merge queue ({cause})", kind, run_id)
        self._emptied()
        self._notify()

    # -- staleness ---------------------------------------------------------------------

    def _main_moved(self, main: str | None) -> str:
        cause = f"main moved outside the merge queue (to {(main or 'nothing')[:12]})"
        self.main_tip = main
        built = [e for e in self._entries.values() if e.builds > 0]
        self._make_stale(built, cause, "main_moved", None)
        self._notify()
        return cause

    def _make_stale(self, entries: list[Entry], cause: str, kind: str, by: str | None) -> None:
        for entry in entries:
            if entry.stale is not None or entry.builds == 0:
                continue
            entry.stale = cause
            # ``cause`` is the metric's label (docs/protocol.md), ``reason`` the sentence.
            self._event("queue_rebuilt", entry, {"cause": kind, "by": by, "reason": cause})
            if self.daemon.metrics is not None:
                self.daemon.metrics.merge_queue_rebuilds.labels(kind).inc()
            self._on_stale(entry.run_id, cause)

    async def _watch_main(self) -> None:
        """While runs are queued: a main moved by anyone but the queue rebuilds them all."""
        while self._entries:
            await asyncio.sleep(self._poll_seconds)
            landings, believed = self._landings, self.main_tip
            if believed is None or any(e.state == "landing" for e in self._entries.values()):
                continue
            try:
                main = await self._read_main()
            except Exception as exc:  # a failed read is no move; the next poll looks again
                log.warning("the merge queue could not read main: %s", exc)
                continue
            if landings != self._landings or believed != self.main_tip or not self._entries:
                continue  # a landing or a build overtook the read
            if main != believed:
                self._main_moved(main)

    # -- plumbing ----------------------------------------------------------------------

    def _emptied(self) -> None:
        if not self._entries:
            self.main_tip = None

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
        if self.daemon.metrics is not None:
            self.daemon.metrics.merge_queue_depth.set(len(self._entries))
        # The dashboard's queue and every run's ``queue`` are live: a held show answers.
        self.daemon.changes.bump()

    async def _wait(self, interrupt: asyncio.Event) -> bool:
        """Until the queue changes; False when the run was stopped meanwhile."""
        if interrupt.is_set():
            return False
        changed = asyncio.ensure_future(self._changed.wait())
        stopped = asyncio.ensure_future(interrupt.wait())
        try:
            await asyncio.wait({changed, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (changed, stopped):
                task.cancel()
        return not interrupt.is_set()

    def _event(self, kind: str, entry: Entry, data: dict[str, Any]) -> None:
        # The queue's events tell; they decide nothing: a store that refuses one (a full
        # disk) costs the feed a line, never a run its landing.
        with contextlib.suppress(StoreUnavailable):
            self.daemon.append_event(kind, ticket=entry.ticket, run=entry.run_id, data=data)
