"""The read model's epoch, and the ``show`` requests held until it passes a value.

The epoch counts the read model's revisions: every committed write that noted a
change, a refused write (the store fault shows on the dashboard), a reloaded
configuration.  It starts at the daemon's ``started_at_ms`` times 1000, so a
later daemon's epochs start above an earlier one's (unless the clock went back,
or a daemon made a thousand revisions per millisecond of its life); clients are
promised only that it grows while one daemon runs.

A held request awaits one future per ``since`` value, shared by every request
holding the same value (a crowd of followers of one dashboard is one future):
nothing runs while nothing changes, and a bump resolves every future it passed.
"""

from __future__ import annotations

import asyncio
from typing import Final

# Held at once, across every connection; past this a request is answered at once
# (its client sees an unchanged epoch and asks again), so a flood of held
# requests cannot grow the daemon without bound.
MAX_HELD: Final = 10_000


class ChangeLog:
    def __init__(self, started_at_ms: int) -> None:
        self.epoch = started_at_ms * 1000
        self.held = 0
        self.closed = False
        self._waiting: dict[int, asyncio.Future[None]] = {}
        self._holders: dict[int, int] = {}

    def bump(self) -> None:
        self.epoch += 1
        if not self._waiting:
            return
        epoch = self.epoch
        for since in [s for s in self._waiting if s < epoch]:
            self._resolve(since)

    async def wait_past(self, since: int, timeout_s: float) -> None:
        """Return once the epoch is above ``since``, ``timeout_s`` passed, or the daemon stops."""
        if self.epoch > since or self.closed or timeout_s <= 0 or self.held >= MAX_HELD:
            return
        future = self._waiting.get(since)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._waiting[since] = future
        self._holders[since] = self._holders.get(since, 0) + 1
        self.held += 1
        try:
            # asyncio.wait, not await: a holder that times out or is cancelled (its
            # client hung up) must not cancel the future its neighbours await.
            await asyncio.wait((future,), timeout=timeout_s)
        finally:
            self.held -= 1
            left = self._holders.get(since, 1) - 1
            if left > 0:
                self._holders[since] = left
            else:
                # The last holder of a value no bump passed: forget it, or a client
                # asking for far-off epochs would leave a future behind per value.
                self._holders.pop(since, None)
                if self._waiting.get(since) is future:
                    del self._waiting[since]

    async def close(self, within_s: float) -> None:
        """The daemon stops: every held request answers now, and none is held again.

        Waits (at most ``within_s``) until their replies are handed to their
        connections, so a stop closes them after the answer, not before it.
        """
        self.closed = True
        for since in list(self._waiting):
            self._resolve(since)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while self.held and loop.time() < deadline:
            await asyncio.sleep(0.01)
        for _ in range(3):  # each reply's write is queued behind its handler's return
            await asyncio.sleep(0)

    def _resolve(self, since: int) -> None:
        future = self._waiting.pop(since)
        if not future.done():
            future.set_result(None)
