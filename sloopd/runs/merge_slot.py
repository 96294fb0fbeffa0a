"""Who may move main: one ``ff_only`` at a time.

Since 0.9 the merge queue (sloopd.landing) orders a landing's ``sync`` and ``ff_only``:
each run builds on the candidate ahead and lands only after it, so no slot is held
from a sync to the merge any more.  The slot still serialises the moves themselves:
a landing's fast-forward and the ``ff_only`` of a flow with no landing (no ``sync``
before it), which the queue sees as main moving outside it.
"""

from __future__ import annotations

import asyncio


class MergeSlot:
    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self.holder: str | None = None

    async def take(self, run_id: str) -> None:
        """Hold the slot (at once when this run holds it already)."""
        if self.holder == run_id:
            return
        await self._lock.acquire()
        self.holder = run_id

    def give_back(self, run_id: str) -> None:
        """Release the slot if this run holds it; harmless otherwise."""
        if self.holder != run_id:
            return
        self.holder = None
        self._lock.release()
