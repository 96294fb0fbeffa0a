"""Who may move main: one run at a time, from a ``sync`` through the ``ff_only`` right after it.

A ``sync`` whose next stage is an ``ff_only`` (the default flow) takes the slot and keeps
it across that one stage boundary: nothing can move main between the merge and the
fast-forward, and the ``ff_only`` finds main where ``sync`` left it.  With eight runs at
a time a race there was lost most of the time (5.5 ``sync`` executions per run in the
drain benchmark before the slot).  Any other stage, the end of the ``ff_only``, a
failed ``sync`` and the end of the run's driver give the slot back.

A landing with gate stages between its ``sync`` and ``ff_only`` is the merge queue's
(sloopd.landing): it orders those runs itself, and its ``ff_only`` takes the slot only
around the move of main, so the two kinds of merge never interleave.
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
