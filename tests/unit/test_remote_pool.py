"""Issue 36: warm Ray actors, below a real cluster.  The driver's pool
(``sloopd.remote.pool``) against stand-in actors (``test_remote_protocol``'s
``FakeRoom``, one per actor): a pooled actor serves a second stage, released in
between; a dirty one, or one whose stage was lost, is retired; one found dead
when taken is replaced; idle actors shrink; the bounds hold; a stage Ray cannot
place frees what idle actors of other shapes hold.  And the node's side
(``StageRoom``): a second stage on the same actor finds nothing of the first.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from sloopd.proc import sandbox
from sloopd.proc.launchers import ChildLauncher
from sloopd.proc.stage_io import Exited
from sloopd.remote import driver as driver_module
from sloopd.remote import messages, node, pool
from sloopd.remote import room as room_module
from tests.unit.test_remote_messages import LAUNCH
from tests.unit.test_remote_protocol import FakeLink, FakeRoom

DEFAULT = messages.Resources(1.0, None, {})
OTHER = messages.Resources(2.0, 1 << 30, {"agents": 1.0})


def _polls(stages: int) -> list[messages.Polled]:
    return [messages.Polled((), 0.0, messages.Exited(0))] * stages


class Bench:
    """A driver with a pool of ``warm``, its stand-in link, and every event it wrote."""

    def __init__(self, tmp_path: Path, warm: int = 1, clean: bool = True) -> None:
        self.out = io.BytesIO()
        self.driver = driver_module.Driver(
            "127.0.0.1:6399", "sloop", self.out, tmp_path / "ship", warm, DEFAULT
        )
        self.rooms: list[FakeRoom] = []

        def room() -> FakeRoom:
            made = FakeRoom(_polls(8))
            made.clean = clean
            self.rooms.append(made)
            return made

        self.link = FakeLink(FakeRoom([]), room)
        self.driver.link = cast(Any, self.link)

    def events(self) -> list[messages.Event]:
        return [messages.decode_event(line) for line in self.out.getvalue().splitlines()]

    async def stage(
        self, ident: str, resources: messages.Resources = OTHER
    ) -> tuple[messages.Ended, Any]:
        """One stage through the driver: how it ended, and the actor it ran on."""
        self.driver.handle(messages.Start(ident, LAUNCH, resources))
        for _ in range(500):
            await asyncio.sleep(0.01)
            for event in self.events():
                if isinstance(event, messages.Placed) and event.id == ident:
                    self.driver.handle(messages.Ship(ident, ""))
                if isinstance(event, messages.Finished) and event.id == ident:
                    ran: list[Any] = [a for a in self.link.actor_class.made
                                      if ident in a.room.stages]  # fmt: skip
                    await asyncio.sleep(0.05)  # its release
                    return event.ended, (ran or [None])[0]
        raise AssertionError(f"{ident} never ended: {self.out.getvalue()!r}")


def test_a_pooled_actor_serves_a_second_stage_released_in_between(tmp_path: Path) -> None:
    async def scenario() -> None:
        bench = Bench(tmp_path)
        first, actor = await bench.stage("1-1")
        assert isinstance(first, messages.Ran), first
        assert bench.driver.pool.idle(OTHER) == 1  # back in the pool, released
        assert actor.room.released == ["1-1"]
        second, again = await bench.stage("1-2")
        assert isinstance(second, messages.Ran), second
        assert again is actor  # the same actor, warm
        # Every call named its own stage; the first's release came before the second.
        assert actor.room.stages == ["1-1"] * 3 + ["1-2"] * 3
        assert actor.room.released == ["1-1", "1-2"]
        assert bench.link.killed == []

    asyncio.run(scenario())


def test_the_default_shape_is_filled_when_the_cluster_is_up_and_taken_warm(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        bench = Bench(tmp_path, warm=2)
        bench.driver.emit(messages.Up(3))
        await asyncio.sleep(0.05)
        assert bench.driver.pool.idle(DEFAULT) == 2
        assert all(room.stages == [] for room in bench.rooms)  # made and answered only
        _ended, actor = await bench.stage("1-1", DEFAULT)
        assert actor in bench.link.actor_class.made[:2]  # a warm one
        # The take was refilled, the actor came back: within 2 x warm of the shape.
        assert bench.driver.pool.idle(DEFAULT) == 3
        bench.driver.emit(messages.Down("gone"))
        assert bench.driver.pool.idle() == 0  # the cluster said down: none kept
        assert len(bench.link.killed) == 3

    asyncio.run(scenario())


def test_a_dirty_actor_is_retired_and_the_next_stage_gets_another(tmp_path: Path) -> None:
    async def scenario() -> None:
        bench = Bench(tmp_path, clean=False)
        _ended, actor = await bench.stage("1-1")
        assert actor.room.released == ["1-1"]
        assert bench.link.killed == [actor]
        assert bench.driver.pool.idle() == 0
        _ended, other = await bench.stage("1-2")
        assert other is not actor

    asyncio.run(scenario())


def test_an_actor_whose_stage_was_lost_is_retired_unreleased(tmp_path: Path) -> None:
    async def scenario() -> None:
        bench = Bench(tmp_path)
        bench.link.actor_class.rooms = None  # every actor over this one room
        room = bench.link.actor_class.room
        room.polls = [messages.Polled((), 0.0, messages.Failed("the node lost the child"))]
        ended, actor = await bench.stage("1-1")
        assert isinstance(ended, messages.Lost), ended
        assert bench.link.killed == [actor]
        assert room.released == []
        assert bench.driver.pool.idle() == 0

    asyncio.run(scenario())


class ActorDiedError(Exception):
    """Named as Ray's: how the driver knows an actor is gone."""


def test_a_warm_actor_found_dead_is_replaced_and_the_stage_runs(tmp_path: Path) -> None:
    async def scenario() -> None:
        bench = Bench(tmp_path)
        _ended, actor = await bench.stage("1-1")

        async def dead(repository: str) -> bytes:
            raise ActorDiedError("The actor died unexpectedly before finishing this task.")

        actor.prepare.call = dead
        ended, other = await bench.stage("1-2")
        assert isinstance(ended, messages.Ran), ended  # nothing of it had run there
        assert other is not actor
        assert actor in bench.link.killed

    asyncio.run(scenario())


def test_no_pool_kills_every_actor_after_its_stage(tmp_path: Path) -> None:
    async def scenario() -> None:
        bench = Bench(tmp_path, warm=0)
        bench.driver.emit(messages.Up(3))
        _ended, actor = await bench.stage("1-1")
        assert bench.link.killed == [actor]
        assert actor.room.released == []
        assert len(bench.link.actor_class.made) == 1

    asyncio.run(scenario())


# --- the pool alone: bounds, shrinking, starving -------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _pool(warm: int, clock: Clock) -> tuple[pool.WarmPool, list[Any]]:
    retired: list[Any] = []

    def create(resources: messages.Resources) -> Any:
        async def ready() -> bytes:
            return messages.encode(messages.Ready("0", messages.Node("n", "h")))

        return SimpleNamespace(ready=SimpleNamespace(remote=ready), shape=resources)

    return pool.WarmPool(create, retired.append, warm, DEFAULT, clock), retired


async def _clean() -> bool:
    return True


def test_the_bounds_hold_per_shape_and_over_every_shape() -> None:
    async def scenario() -> None:
        clock = Clock()
        warm, retired = _pool(1, clock)
        actors = [object() for _ in range(5)]
        for actor in actors:
            warm.give_back(OTHER, actor, _clean)
        await asyncio.sleep(0.01)
        assert warm.idle(OTHER) == 2  # 2 x warm of one shape
        assert retired == actors[2:]
        for n in range(3):
            warm.give_back(messages.Resources(float(n + 3), None, {}), object(), _clean)
        await asyncio.sleep(0.01)
        assert warm.idle() == 4  # 4 x warm of every shape
        assert len(retired) == 4

    asyncio.run(scenario())


def test_idle_actors_shrink_but_the_default_shapes_standing_ones() -> None:
    async def scenario() -> None:
        clock = Clock()
        warm, retired = _pool(1, clock)
        warm.fill(DEFAULT)
        warm.give_back(OTHER, "other", _clean)
        await asyncio.sleep(0.01)
        warm.give_back(DEFAULT, "back", _clean)  # the default shape: 2 idle
        await asyncio.sleep(0.01)
        assert (warm.idle(DEFAULT), warm.idle(OTHER), warm.made) == (2, 1, 1)
        clock.now += pool.IDLE_S - 1
        warm.shrink()
        assert retired == []
        clock.now += 2
        warm.shrink()
        assert warm.idle(OTHER) == 0
        assert warm.idle(DEFAULT) == 1  # the newest stays, ready for the next stage
        assert len(retired) == 2
        assert "back" not in retired
        clock.now += 10 * pool.IDLE_S
        warm.shrink()
        assert warm.idle(DEFAULT) == 1

    asyncio.run(scenario())


def test_a_take_waits_for_an_actor_coming_back_rather_than_making_one() -> None:
    async def scenario() -> None:
        warm, _retired = _pool(1, Clock())
        done = asyncio.Event()

        async def release() -> bool:
            await done.wait()
            return True

        warm.give_back(OTHER, "hot", release)
        take = asyncio.ensure_future(warm.take(OTHER))
        await asyncio.sleep(0.05)
        assert not take.done()
        done.set()
        assert await take == ("hot", True)

    asyncio.run(scenario())


def test_a_stage_ray_cannot_place_frees_idle_actors_of_other_shapes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pool, "STARVED_S", 0.05)

    async def scenario() -> None:
        warm, retired = _pool(1, Clock())
        warm.fill(DEFAULT)
        warm.give_back(OTHER, "same shape", _clean)
        await asyncio.sleep(0.01)
        placed = asyncio.get_running_loop().create_future()
        answer = asyncio.ensure_future(warm.answer(placed, OTHER))
        await asyncio.sleep(0.1)
        assert warm.idle(DEFAULT) == 0
        assert len(retired) == 1
        assert warm.idle(OTHER) == 1  # its own shape's stay
        placed.set_result(b"prepared")
        assert await answer == b"prepared"

    asyncio.run(scenario())


# --- the node's side: a second stage on the same actor finds nothing of the first ----


class FakeProcess:
    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.marker = f"{pid:032x}"
        self.stopped = False

    def pause_reading(self, paused: bool) -> None:
        pass


class FakeLocalChild:
    def __init__(self, pid: int, ends: asyncio.Event) -> None:
        self.child = FakeProcess(pid)
        self.last_output_monotonic = 0.0
        self.ends = ends

    async def stop(self) -> None:
        self.child.stopped = True
        self.ends.set()

    async def end(self) -> Exited:
        await self.ends.wait()
        return Exited(exit_code=0)


@pytest.fixture
def node_room(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """``StageRoom`` with its cache, room, sandbox and launcher stood in for: rooms are
    real folders, children are ``FakeLocalChild`` ended by ``ends``."""
    seen: dict[str, Any] = {"rooms": [], "children": [], "alive": set()}
    cache = SimpleNamespace(path=tmp_path / "cache", take=_nothing, keep=_nothing)

    async def cache_of(repository: str) -> Any:
        return cache

    async def make(
        cls: Any, cache: Any, branch: str, commit: str, shared: Any = None
    ) -> room_module.Room:
        root = tmp_path / "rooms" / str(len(seen["rooms"]))
        made = room_module.Room(cache, root, branch)
        made.files.mkdir(parents=True)
        made.checkout.mkdir()
        seen["rooms"].append(made)
        return made

    async def collect(self: Any, hide: Any, **asked: Any) -> tuple[str, list[str], bytes]:
        return "c" * 40, [], b""

    async def start(self: Any, launch: Any, on_lines: Any) -> FakeLocalChild:
        child = FakeLocalChild(1000 + len(seen["children"]), asyncio.Event())
        seen["children"].append(child)
        return child

    monkeypatch.setenv("SLOOP_NODE_DIR", str(tmp_path / "node"))
    monkeypatch.setattr(node, "cache_of", cache_of)
    monkeypatch.setattr(node, "_hidden_places", lambda root: (root,))
    monkeypatch.setattr(node, "node_name", lambda: messages.Node("n", "h"))  # no Ray import
    monkeypatch.setattr(sandbox, "probe", lambda: None)
    monkeypatch.setattr(node, "find_marked", lambda marker: sorted(seen["alive"] & {marker}))
    monkeypatch.setattr(room_module.Room, "make", classmethod(make))
    monkeypatch.setattr(room_module.Room, "collect", collect)
    monkeypatch.setattr(ChildLauncher, "start", start)
    return seen


async def _nothing(*args: Any) -> None:
    return None


def _launch(prompt: bytes) -> bytes:
    fields = {name: getattr(LAUNCH, name) for name in LAUNCH.__dataclass_fields__}
    return messages.encode(messages.RemoteLaunch(**{**fields, "prompt": prompt, "token": None}))


def test_a_second_stage_on_an_actor_finds_nothing_of_the_first(
    node_room: dict[str, Any],
) -> None:
    async def scenario() -> None:
        actor = node.StageRoom()
        messages.decode(await actor.ready(), messages.Ready)
        await actor.start("s-1", _launch(b"first prompt"), b"")
        first_room, first = node_room["rooms"][0], node_room["children"][0]
        assert (first_room.files / "prompt.md").read_bytes() == b"first prompt"
        (first_room.home / "left-by-the-first").write_text("x")
        first.ends.set()
        polled = messages.decode(await actor.poll("s-1", 1.0), messages.Polled)
        assert polled.end == messages.Exited(0)
        collect = messages.encode(LAUNCH.collect)
        assert isinstance(messages.decode_collection(await actor.collect("s-1", collect)),
                          messages.Collected)  # fmt: skip
        released = messages.decode(await actor.release("s-1"), messages.Released)
        assert released == messages.Released(True, "")
        assert not first_room.root.exists()  # the room: checkout, HOME, files, socket
        assert actor._stage is None  # nothing of the stage held

        await actor.start("s-2", _launch(b"second prompt"), b"")
        second_room, second = node_room["rooms"][1], node_room["children"][1]
        assert second_room.root != first_room.root
        assert not (second_room.home / "left-by-the-first").exists()
        assert (second_room.files / "prompt.md").read_bytes() == b"second prompt"
        # Late calls about the first stage never reach the second.
        await actor.stop("s-1")
        await actor.deliver("s-1", messages.encode(messages.Conn(0, b"late")))
        assert not second.child.stopped
        assert await actor.bundle("s-1") == b""
        late = messages.decode(await actor.release("s-1"), messages.Released)
        assert not late.clean
        assert actor._stage is not None
        assert actor._stage.id == "s-2"
        # A stage stopped before its end was seen is stopped at its release.
        released = messages.decode(await actor.release("s-2"), messages.Released)
        assert released.clean, released
        assert second.child.stopped
        assert not second_room.root.exists()

    asyncio.run(scenario())


def test_an_actor_whose_child_may_live_on_is_not_clean(node_room: dict[str, Any]) -> None:
    async def scenario() -> None:
        actor = node.StageRoom()
        await actor.start("s-1", _launch(b"p"), b"")
        child = node_room["children"][0]
        node_room["alive"].add(child.child.marker)  # a process of it still carries its marker
        child.ends.set()
        await actor.poll("s-1", 1.0)
        released = messages.decode(await actor.release("s-1"), messages.Released)
        assert not released.clean
        assert "still alive" in released.reason
        assert not node_room["rooms"][0].root.exists()  # removed all the same
        assert actor._stage is None

    asyncio.run(scenario())


def test_a_failed_collect_retires_the_actor(
    node_room: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def failing(self: Any, hide: Any, **asked: Any) -> Any:
        raise room_module.RoomError("fsck failed half-way")

    monkeypatch.setattr(room_module.Room, "collect", failing)

    async def scenario() -> None:
        actor = node.StageRoom()
        await actor.start("s-1", _launch(b"p"), b"")
        node_room["children"][0].ends.set()
        await actor.poll("s-1", 1.0)
        collection = await actor.collect("s-1", messages.encode(LAUNCH.collect))
        assert isinstance(messages.decode_collection(collection), messages.Uncollected)
        released = messages.decode(await actor.release("s-1"), messages.Released)
        assert not released.clean
        assert "fsck failed half-way" in released.reason

    asyncio.run(scenario())
