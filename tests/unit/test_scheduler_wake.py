"""The scheduler never sleeps past a trigger that fell due while it looked.

Observed (issue 14's retry test, under load): the claim read the clock just
before a retry trigger was due, the wake-up read it just after, so the trigger
was neither claimed nor a next wake, and the scheduler slept a whole
``IDLE_SECONDS``.  Both now use the one instant the scheduler looked.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sloopd.queue import scheduler as scheduler_module
from sloopd.queue.scheduler import Scheduler, next_wake
from sloopd.store import Store


def queued_trigger(store: Store, due: int) -> None:
    with store.writer.transaction() as tx:
        row = tx.one(
            "ticket_insert",
            {
                "name": "t",
                "path": "tickets/t.md",
                "title": "T",
                "body": "",
                "project": "",
                "flow": "default",
                "priority": 0,
                "state": "ready",
                "manual": 0,
                "now": due - 10_000,
            },
        )
        assert row is not None
        tx.run("trigger_insert", {"ticket": str(row[0]), "due": due, "now": due - 10_000})


@pytest.fixture
def daemon(tmp_path: Path) -> Any:
    store = Store.open(tmp_path / "state")
    yield SimpleNamespace(require_store=lambda: store, gate=SimpleNamespace(until_ms=None))
    store.close()


def test_a_trigger_due_after_the_look_is_the_next_wake_even_once_it_is_due(daemon: Any) -> None:
    due = int(time.time() * 1000) - 5  # due by now ...
    queued_trigger(daemon.require_store(), due)
    # ... but not when the scheduler looked, so it was not claimed: it must wake for it.
    assert next_wake(daemon, due - 1) == due
    assert next_wake(daemon, due) is None  # claimable at the look: claimed then


def test_the_sleep_after_a_look_just_before_a_trigger_is_due_is_short(
    daemon: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    due = int(time.time() * 1000) - 5
    queued_trigger(daemon.require_store(), due)
    sched = Scheduler(daemon, start_run=lambda run_id: None)

    async def woke_within_a_few_turns() -> bool:
        # No clock is read: a sleep of no time ends within a few turns of the loop;
        # one of IDLE_SECONDS would still be pending however busy the host is.
        sleeping = asyncio.ensure_future(sched._sleep_until_next(due - 1))
        for _ in range(10):
            await asyncio.sleep(0)
        woke = sleeping.done()
        sleeping.cancel()
        return woke

    monkeypatch.setattr(scheduler_module, "now_ms", lambda: due + 1)
    assert asyncio.run(woke_within_a_few_turns())
