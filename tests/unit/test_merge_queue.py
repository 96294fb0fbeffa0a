"""``sloopd.landing.queue.MergeQueue`` on its own: who builds on whom, holds, rebuilds,
landing order and the window, with a recording fake of the daemon and of main's ref."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, cast

from sloopd.core.state import Daemon
from sloopd.landing.entry import Go, Rebuild, Stands, Stopped
from sloopd.landing.queue import MergeQueue


@dataclass
class _Repo:
    window: int


@dataclass
class _Config:
    repo: _Repo


@dataclass
class _Changes:
    epoch: int = 0

    def bump(self) -> None:
        self.epoch += 1


@dataclass
class FakeDaemon:
    config: _Config
    metrics: None = None
    changes: _Changes = field(default_factory=_Changes)
    events: list[tuple[str, str | None, dict[str, Any]]] = field(default_factory=list)

    def append_event(
        self, kind: str, *, ticket: str | None, run: str | None, data: dict[str, Any]
    ) -> None:
        self.events.append((kind, run, data))


@dataclass
class World:
    main: str = "m0"
    stale: list[tuple[str, str]] = field(default_factory=list)


def make(window: int = 8) -> tuple[MergeQueue, FakeDaemon, World]:
    world = World()
    daemon = FakeDaemon(_Config(_Repo(window)))

    async def read_main() -> str | None:
        return world.main

    queue = MergeQueue(
        cast(Daemon, daemon),
        read_main=read_main,
        on_stale=lambda run, cause: world.stale.append((run, cause)),
        poll_seconds=3600,
    )
    return queue, daemon, world


def join(queue: MergeQueue, *runs: str) -> None:
    for run in runs:
        queue.join(run, f"{run.lower()}#1", f"T{run}", f"sloop/{run.lower()}/1")


async def pending(coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    task = asyncio.get_running_loop().create_task(coro)
    await asyncio.sleep(0.01)
    return task


def test_candidates_build_on_the_candidate_ahead_in_arrival_order() -> None:
    async def scenario() -> None:
        queue, daemon, _ = make()
        stop = asyncio.Event()
        join(queue, "R1", "R2", "R3")
        assert await queue.build_turn("R1", stop) == Go("m0", ())
        second = await pending(queue.build_turn("R2", stop))
        assert not second.done()  # R1's candidate is not built yet
        queue.built("R1", "c1")
        assert await second == Go("c1", ("sloop/r1/1",))
        queue.built("R2", "c2")
        assert await queue.build_turn("R3", stop) == Go("c2", ("sloop/r1/1", "sloop/r2/1"))
        rows = queue.rows()
        assert [(r["run"], r["position"], r["state"]) for r in rows] == [
            ("R1", 1, "gating"),
            ("R2", 2, "gating"),
            ("R3", 3, "building"),
        ]
        assert rows[2]["onto"] == ["R1", "R2"]
        assert rows[2]["onto_commit"] == "c2"
        assert [e[0] for e in daemon.events] == ["queue_joined"] * 3

    asyncio.run(scenario())


def test_a_failure_behind_a_gating_run_is_held_until_that_run_passes() -> None:
    async def scenario() -> None:
        queue, _, _ = make()
        stop = asyncio.Event()
        join(queue, "R1", "R2")
        await queue.build_turn("R1", stop)
        queue.built("R1", "c1")
        await queue.build_turn("R2", stop)
        queue.built("R2", "c2")
        held = await pending(queue.judge_failure("R2", stop))
        assert not held.done()
        assert queue.row_of("R2")["waiting_for"]["runs"] == ["R1"]  # type: ignore[index]
        landing = await queue.landing_turn("R1", stop)  # R1's gates passed: it lands next
        assert landing == Go("m0", ())
        assert await held == Stands()

    asyncio.run(scenario())


def test_a_run_that_leaves_gets_every_run_holding_its_work_rebuilt() -> None:
    async def scenario() -> None:
        queue, daemon, world = make()
        stop = asyncio.Event()
        join(queue, "R1", "R2", "R3")
        await queue.build_turn("R1", stop)
        queue.built("R1", "c1")
        await queue.build_turn("R2", stop)
        queue.built("R2", "c2")
        await queue.build_turn("R3", stop)
        queue.built("R3", "c3")
        held = await pending(queue.judge_failure("R2", stop))
        queue.leave("R1", "stage 'test' failed", "left_failed")
        judged = await held
        assert isinstance(judged, Rebuild)
        assert judged.cause == "R1 left the merge queue (stage 'test' failed)"
        assert [run for run, _ in world.stale] == ["R2", "R3"]
        assert queue.stale_cause("R3") == judged.cause
        # Rebuilt in order: R2 now heads the queue and builds on main.
        assert await queue.build_turn("R2", stop) == Go("m0", ())
        third = await pending(queue.build_turn("R3", stop))
        assert not third.done()
        queue.built("R2", "c2b")
        assert await third == Go("c2b", ("sloop/r2/1",))
        kinds = [e[0] for e in daemon.events]
        assert kinds.count("queue_rebuilt") == 2
        assert kinds.count("queue_left") == 1
        # cause: the metric's label (docs/protocol.md); reason: the sentence.
        rebuilt = [data for kind, _, data in daemon.events if kind == "queue_rebuilt"]
        assert rebuilt == [{"cause": "left_failed", "by": "R1", "reason": judged.cause}] * 2

    asyncio.run(scenario())


def test_runs_land_in_order_and_a_main_moved_outside_rebuilds_them_all() -> None:
    async def scenario() -> None:
        queue, daemon, world = make()
        stop = asyncio.Event()
        join(queue, "R1", "R2")
        await queue.build_turn("R1", stop)
        queue.built("R1", "c1")
        await queue.build_turn("R2", stop)
        queue.built("R2", "c2")
        second = await pending(queue.landing_turn("R2", stop))
        assert not second.done()  # R1 is ahead
        assert await queue.landing_turn("R1", stop) == Go("m0", ())
        world.main = "c1"
        queue.landed("R1", "c1")
        assert await second == Go("c1", ("sloop/r1/1",))
        world.main = "c2"
        queue.landed("R2", "c2")
        assert queue.rows() == []
        # A person pushes while R3 waits to land: R3 is rebuilt on the new main.
        join(queue, "R3")
        await queue.build_turn("R3", stop)
        queue.built("R3", "c3")
        world.main = "pushed"
        turn = await queue.landing_turn("R3", stop)
        assert isinstance(turn, Rebuild)
        assert "main moved outside" in turn.cause
        moved = [data for kind, _, data in daemon.events if kind == "queue_rebuilt"]
        assert moved == [{"cause": "main_moved", "by": None, "reason": turn.cause}]
        assert await queue.build_turn("R3", stop) == Go("pushed", ())

    asyncio.run(scenario())


def test_the_window_holds_builds_past_it_and_a_stop_ends_any_wait() -> None:
    async def scenario() -> None:
        queue, _, _ = make(window=1)
        stop = asyncio.Event()
        join(queue, "R1", "R2")
        await queue.build_turn("R1", stop)
        queue.built("R1", "c1")
        second = await pending(queue.build_turn("R2", stop))
        assert not second.done()
        assert queue.row_of("R2")["waiting_for"]["reason"] == "window"  # type: ignore[index]
        stop.set()
        assert await second == Stopped()

    asyncio.run(scenario())


def test_those_behind_a_conflicted_run_build_past_it() -> None:
    async def scenario() -> None:
        queue, _, _ = make()
        stop = asyncio.Event()
        join(queue, "R1", "R2", "R3")
        await queue.build_turn("R1", stop)
        queue.built("R1", "c1")
        await queue.build_turn("R2", stop)
        queue.build_failed("R2")
        assert await queue.build_turn("R3", stop) == Go("c1", ("sloop/r1/1",))
        held = await pending(queue.judge_failure("R2", stop))
        await queue.landing_turn("R1", stop)
        assert await held == Stands()
        queue.leave("R2", "stage 'sync' failed", "left_conflict")
        assert queue.stale_cause("R3") is None  # its candidate never held R2's work

    asyncio.run(scenario())
