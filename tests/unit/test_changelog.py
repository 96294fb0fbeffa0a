"""The epoch and the requests held on it: woken by a bump, never by polling.

A held ``show`` awaits ``ChangeLog.wait_past``; these tests drive it directly
on an event loop, with no daemon, to pin what holding costs and when it ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

from sloopd.core import changelog
from sloopd.core.changelog import ChangeLog

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def answers_at_once(coroutine: Coroutine[Any, Any, object]) -> bool:
    """Whether ``coroutine`` returns without ever giving the loop a turn: "at once" as a
    property, where "within 50 ms" is a wall-clock bound a busy host fails."""
    try:
        coroutine.send(None)
    except StopIteration:
        return True
    coroutine.close()
    return False


async def turns(count: int = 10) -> None:
    """A few turns of the event loop, and no timer: what a wake-up needs to land."""
    for _ in range(count):
        await asyncio.sleep(0)


def test_the_epoch_starts_from_the_daemon_start_and_only_grows() -> None:
    log = ChangeLog(started_at_ms=1_700_000_000_000)
    first = log.epoch
    assert first == 1_700_000_000_000 * 1000
    log.bump()
    log.bump()
    assert log.epoch == first + 2
    # A daemon started a millisecond later starts above everything this one reached
    # in fewer than a thousand revisions.
    assert ChangeLog(started_at_ms=1_700_000_000_001).epoch > log.epoch


def test_a_held_request_wakes_on_the_bump_that_passes_its_since() -> None:
    """Held until the bump, answered by it: a few turns of the loop after it, not at
    the request's 30 s wait (no clock is read, so load cannot fail it)."""

    async def scenario() -> tuple[bool, bool, int]:
        log = ChangeLog(0)
        since = log.epoch
        held = asyncio.ensure_future(log.wait_past(since, 30.0))
        await turns()
        waiting_before = not held.done()
        log.bump()
        await turns()
        return waiting_before, held.done(), log.held

    assert run(scenario()) == (True, True, 0)


def test_a_bump_wakes_only_the_requests_it_passed() -> None:
    async def scenario() -> tuple[bool, bool]:
        log = ChangeLog(0)
        now = log.epoch
        near = asyncio.ensure_future(log.wait_past(now, 5.0))
        far = asyncio.ensure_future(log.wait_past(now + 5, 0.3))
        await asyncio.sleep(0.01)
        log.bump()
        await asyncio.sleep(0.01)
        woken = (near.done(), far.done())
        await far
        return woken

    assert run(scenario()) == (True, False)


def test_a_held_request_answers_when_its_wait_ends_and_leaves_nothing_behind() -> None:
    async def scenario() -> tuple[float, int, int]:
        log = ChangeLog(0)
        started = time.monotonic()
        # A far-off epoch no bump will reach: the wait ends by itself.
        await log.wait_past(log.epoch + 1000, 0.1)
        return time.monotonic() - started, log.held, len(log._waiting)

    waited, held, waiting = run(scenario())
    assert waited >= 0.09
    assert (held, waiting) == (0, 0)


def test_one_holder_cancelled_does_not_end_its_neighbours_wait() -> None:
    async def scenario() -> tuple[bool, bool, int]:
        log = ChangeLog(0)
        since = log.epoch
        leaving = asyncio.ensure_future(log.wait_past(since, 5.0))
        staying = asyncio.ensure_future(log.wait_past(since, 5.0))
        await asyncio.sleep(0.01)
        leaving.cancel()  # its client hung up
        await asyncio.sleep(0.01)
        still_held = not staying.done()
        log.bump()
        await staying
        return leaving.cancelled(), still_held, log.held

    assert run(scenario()) == (True, True, 0)


def test_nothing_is_held_when_the_epoch_is_already_past_or_no_wait_is_asked() -> None:
    async def scenario() -> list[bool]:
        log = ChangeLog(0)
        log.bump()
        # The last one is held (the check itself: it would wait for a bump).
        cases = ((log.epoch - 1, 5.0), (log.epoch, 0.0), (log.epoch, 5.0))
        return [answers_at_once(log.wait_past(since, wait)) for since, wait in cases]

    assert run(scenario()) == [True, True, False]


def test_stopping_answers_every_held_request_and_holds_no_new_one() -> None:
    async def scenario() -> tuple[bool, float]:
        log = ChangeLog(0)
        held = [asyncio.ensure_future(log.wait_past(log.epoch, 30.0)) for _ in range(3)]
        await asyncio.sleep(0.01)
        await log.close(within_s=1.0)
        answered = all(task.done() for task in held)
        return answered, answers_at_once(log.wait_past(log.epoch, 30.0))

    assert run(scenario()) == (True, True)


def test_past_the_bound_a_request_is_answered_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> tuple[int, bool]:
        log = ChangeLog(0)
        held = [asyncio.ensure_future(log.wait_past(log.epoch, 30.0)) for _ in range(3)]
        await asyncio.sleep(0.01)
        at_once = answers_at_once(log.wait_past(log.epoch, 30.0))
        count = log.held
        log.bump()
        await asyncio.gather(*held)
        return count, at_once

    monkeypatch.setattr(changelog, "MAX_HELD", 3)
    assert run(scenario()) == (3, True)
