"""The sloopctl client's clock, replaced: ``sleep`` moves it on and is recorded.

"Fails within a second" (DESIGN, rule 5) and "retried for ``BUSY_RETRY_S``" are
statements about how long the client waits, and a wall clock read by the test
measures the host's load as well (a busy host fails them).  With the client's
own ``time`` replaced, the test reads what the client decided to wait: nothing
for a missing or refusing socket, the retry window in short steps for a full
backlog.
"""

from __future__ import annotations

import pytest

from sloopctl import client as client_module


class ClientClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def install(monkeypatch: pytest.MonkeyPatch) -> ClientClock:
    """The clock ``sloopctl.client`` reads and sleeps on, for this test."""
    clock = ClientClock()
    monkeypatch.setattr(client_module, "time", clock)
    return clock
