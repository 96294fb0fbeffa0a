"""What a ``logs`` request needs to know of its run, resolved once per reference.

A run's id and alias never change and runs are never deleted, so a reference
that named a run names it for good: the lookup is cached (bounded; a reference
that names nothing is never cached).  The one fact that changes is
``terminal``, once, when the run settles: ``FeedNotices.run_settled`` tells the
cache, synchronously after the settling transaction, so no request sees the
store settled and the cache not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import orjson

from sloopd.core.state import Daemon
from sloopd.flows.flow import Flow
from sloopd.queue import refs
from sloopd.store import Store
from sloopd.wire.api import TERMINAL_RUN_STATES

CACHED_REFS: Final = 4096


@dataclass(slots=True)
class RunFacts:
    run_id: str
    snapshot: str  # the flow snapshot's JSON: parsed only for a stage selector
    terminal: bool
    _flow: Flow | None = None
    # Whether the run holds records without stage fields (stores from before
    # stages were recorded); read once, since no record is stored that way now.
    _unstaged: bool | None = None
    # The last stored position as of the log sink's write generation ``end_at``.
    end: int = 0
    end_at: int = -1

    def flow(self) -> Flow:
        if self._flow is None:
            self._flow = Flow.from_json(orjson.loads(self.snapshot))
        return self._flow

    def unstaged(self, store: Store) -> bool:
        if self._unstaged is None:
            self._unstaged = store.one("logs_has_unstaged", (self.run_id,)) is not None
        return self._unstaged


class RunLookup:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self._by_ref: dict[str, RunFacts] = {}
        self._by_id: dict[str, RunFacts] = {}
        # The run a reference named when it was last looked up, if it was: the dict's
        # own method, no Python call on the hot page (the dict is cleared, never replaced).
        self.cached: Callable[[str], RunFacts | None] = self._by_ref.get
        daemon.feed_notices.on_settled.append(self._settled)

    def facts(self, store: Store, ref: str) -> RunFacts:
        """The run ``ref`` names (by the ladder), or ``not_found``."""
        found = self._by_ref.get(ref)
        if found is not None:
            return found
        run_id = refs.run_id(store, self.daemon.layout.repo, ref)
        facts = self._by_id.get(run_id)
        if facts is None:
            record = store.run_by_id(run_id)
            assert record is not None and record.flow_snapshot is not None
            facts = RunFacts(run_id, record.flow_snapshot, record.state in TERMINAL_RUN_STATES)
        if len(self._by_ref) >= CACHED_REFS:
            # Runs in flight stay: a held request's facts must still hear the settle.
            self._by_ref.clear()
            self._by_id = {k: v for k, v in self._by_id.items() if not v.terminal}
        self._by_ref[ref] = facts
        self._by_id[run_id] = facts
        return facts

    def _settled(self, run_id: str) -> None:
        facts = self._by_id.get(run_id)
        if facts is not None:
            facts.terminal = True
