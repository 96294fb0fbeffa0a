"""Issue 35: the remote protocol below a real Ray cluster.  The driver (``Driver``) talks
to a stand-in actor that answers as ``node.StageRoom`` does (encoded messages), and the
daemon's side (``RayExecutor._on_event``, ``RemoteChild``) reads what the driver says:
a child that ran, one its node lost (``Failed``: the stage ends ``node_lost`` with the
node's reason), a node of another Sloop, an unreadable answer, an oversized bundle.
The node's own Ray folder is found, or the stage is refused (fail closed).
"""

from __future__ import annotations

import asyncio
import io
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import orjson
import pytest

import sloopd
from sloopd.git import bundles
from sloopd.proc.launchers import ChildLauncher
from sloopd.proc.stage_io import LaunchRefused, Lost, StageEnd, StageLaunch
from sloopd.remote import driver as driver_module
from sloopd.remote import messages, node
from sloopd.remote import room as room_module
from sloopd.remote.child import Executor, RemoteChild
from sloopd.remote.launcher import RayExecutor
from sloopd.runs import outcomes
from tests.unit.test_remote_messages import LAUNCH, NODE

IDENT = "123-1"


class FakeRoom:
    """The node's side, as ``StageRoom`` answers: encoded messages, bundles as bytes."""

    def __init__(self, polls: list[messages.Polled], bundle: bytes = b"") -> None:
        self.version = sloopd.__version__
        self.polls = polls
        self.bundle_bytes = bundle
        self.delivered: list[messages.Conn] = []
        self.collected: list[messages.Collect] = []
        self.started: list[messages.RemoteLaunch] = []
        self.prepared_answer: bytes | None = None
        self.prepared_for: list[str] = []  # the start commit each prepare was asked about
        self.awaits_delivery = False
        self.stages: list[str] = []  # the stage each call named, in order
        self.released: list[str] = []
        self.clean = True

    async def ready(self) -> bytes:
        return messages.encode(messages.Ready(self.version, NODE))

    async def prepare(self, repository: str, commit: str = "") -> bytes:
        assert repository == LAUNCH.repository
        self.prepared_for.append(commit)
        if self.prepared_answer is not None:
            return self.prepared_answer
        return messages.encode(messages.Prepared(self.version, NODE, ("d" * 40,)))

    async def start(self, stage: str, data: bytes, bundle: bytes) -> bytes:
        self.stages.append(stage)
        self.started.append(messages.decode(data, messages.RemoteLaunch))
        return messages.encode(messages.Began(4242))

    async def poll(self, stage: str, wait_s: float) -> bytes:
        self.stages.append(stage)
        while self.awaits_delivery and not self.delivered:  # the child waits on the socket
            await asyncio.sleep(0.01)
        return messages.encode(self.polls.pop(0))

    async def deliver(self, stage: str, data: bytes) -> None:
        self.stages.append(stage)
        self.delivered.append(messages.decode(data, messages.Conn))

    async def stop(self, stage: str) -> None:
        self.stages.append(stage)

    async def collect(self, stage: str, data: bytes) -> bytes:
        self.stages.append(stage)
        self.collected.append(messages.decode(data, messages.Collect))
        return messages.encode(messages.Collected("c" * 40, ("left.txt",), len(self.bundle_bytes)))

    async def bundle(self, stage: str) -> bytes:
        self.stages.append(stage)
        return self.bundle_bytes

    async def release(self, stage: str) -> bytes:
        self.released.append(stage)
        return messages.encode(messages.Released(self.clean, "" if self.clean else "dirty"))


class _Method:
    def __init__(self, call: Callable[..., Coroutine[Any, Any, Any]]) -> None:
        self.call = call

    def remote(self, *args: Any) -> asyncio.Task[Any]:  # an ObjectRef is awaited too
        return asyncio.get_running_loop().create_task(self.call(*args))


NAMES = ("ready", "prepare", "start", "poll", "deliver", "stop", "collect", "bundle", "release")


class FakeActorClass:
    """Ray's actor class: each ``remote()`` a new actor (``number``) over a room that
    ``rooms`` makes (by default the one room every actor shares)."""

    def __init__(self, room: FakeRoom, rooms: Callable[[], FakeRoom] | None = None) -> None:
        self.room = room
        self.rooms = rooms
        self.options_seen: dict[str, Any] = {}
        self.made: list[SimpleNamespace] = []

    def options(self, **options: Any) -> FakeActorClass:
        self.options_seen = options
        return self

    def remote(self) -> SimpleNamespace:
        room = self.room if self.rooms is None else self.rooms()
        methods = {name: _Method(getattr(room, name)) for name in NAMES}
        actor = SimpleNamespace(number=len(self.made), room=room, **methods)
        self.made.append(actor)
        return actor


class FakeLink:
    def __init__(self, room: FakeRoom, rooms: Callable[[], FakeRoom] | None = None) -> None:
        self.connected = True
        self.up = asyncio.Event()
        self.up.set()
        self.actor_class = FakeActorClass(room, rooms)
        self.killed: list[Any] = []
        self.ray = SimpleNamespace(kill=lambda actor, no_restart: self.killed.append(actor))

    async def verdict(self) -> str | None:
        return None


RESOURCES = messages.Resources(2.0, 1 << 30, {"agents": 1.0})


async def _drive(
    room: FakeRoom, tmp_path: Path, launch: messages.RemoteLaunch = LAUNCH
) -> list[messages.Event]:
    """One stage through the driver; every event it wrote, read back from its pipe."""
    out = io.BytesIO()
    driver = driver_module.Driver("127.0.0.1:6399", "sloop", out, tmp_path / "ship")
    link = FakeLink(room)
    driver.link = cast(Any, link)
    driver.handle(messages.decode_op(messages.encode(messages.Start(IDENT, launch, RESOURCES))))
    shipped = False
    for _ in range(500):
        await asyncio.sleep(0.01)
        events = [messages.decode_event(line) for line in out.getvalue().splitlines()]
        if not shipped and any(isinstance(e, messages.Placed) for e in events):
            driver.handle(messages.Ship(IDENT, ""))
            shipped = True
        if any(isinstance(e, messages.Started) for e in events):
            driver.handle(messages.Deliver(IDENT, 2, b"answer"))
        if events and isinstance(events[-1], messages.Finished):
            options = link.actor_class.options_seen
            assert options["num_cpus"] == 2.0
            assert options["memory"] == 1 << 30
            assert options["resources"] == {"agents": 1.0}
            return events
    raise AssertionError(f"the driver never ended the stage: {out.getvalue()!r}")


def test_a_child_that_ran_streams_its_items_and_ends_with_its_work(tmp_path: Path) -> None:
    lines = messages.Lines("stdout", ("hello",), False)
    room = FakeRoom(
        [messages.Polled((lines,), 0.5, None), messages.Polled((), 0.0, messages.Exited(3))],
        bundle=b"# v2 git bundle\n",
    )
    room.awaits_delivery = True
    events = asyncio.run(_drive(room, tmp_path))
    assert events[0] == messages.Placed(IDENT, NODE, ("d" * 40,))
    assert messages.Started(IDENT, 4242) in events
    assert messages.Items(IDENT, (lines,), 0.5) in events
    bundle = str(tmp_path / "ship" / f"{IDENT}.bundle")
    assert events[-1] == messages.Finished(
        IDENT, messages.Ran(3, "c" * 40, ("left.txt",), bundle, NODE)
    )
    assert Path(bundle).read_bytes() == b"# v2 git bundle\n"
    assert room.started == [LAUNCH]
    assert room.collected == [LAUNCH.collect]
    assert messages.Conn(2, b"answer") in room.delivered
    assert room.prepared_for == [LAUNCH.commit]  # a node holding it says so: nothing shipped


def test_a_child_its_node_lost_is_lost_with_the_nodes_reason(tmp_path: Path) -> None:
    failed = messages.Failed("the node lost the child: waitpid failed")
    room = FakeRoom([messages.Polled((), 0.0, failed)])
    events = asyncio.run(_drive(room, tmp_path))
    assert events[-1] == messages.Finished(IDENT, messages.Lost(failed.reason, NODE))
    assert room.collected == []  # nothing of a lost child is collected


def test_a_node_of_another_sloop_is_refused(tmp_path: Path) -> None:
    room = FakeRoom([])
    room.version = "0.0.1"
    events = asyncio.run(_drive(room, tmp_path))
    match events[-1]:
        case messages.Finished(_, messages.Refused(reason)):
            assert f"runs Sloop 0.0.1, but this daemon is Sloop {sloopd.__version__}" in reason
            assert NODE.host in reason
        case other:
            raise AssertionError(other)
    assert room.started == []


class OlderRoom(FakeRoom):
    """A node of a Sloop whose ``prepare`` takes the repository alone."""

    async def prepare(self, repository: str) -> bytes:  # type: ignore[override]
        return await super().prepare(repository)


def test_a_node_whose_prepare_takes_the_repository_alone_is_refused_by_its_version(
    tmp_path: Path,
) -> None:
    """Asked with the start commit, an older node's ``prepare`` fails: it is asked
    again without it, says its version, and the stage is refused, not lost (a loss
    would be retried on the same node)."""
    room = OlderRoom([])
    room.version = "0.0.2"
    events = asyncio.run(_drive(room, tmp_path))
    match events[-1]:
        case messages.Finished(_, messages.Refused(reason)):
            assert f"runs Sloop 0.0.2, but this daemon is Sloop {sloopd.__version__}" in reason
        case other:
            raise AssertionError(other)
    assert room.prepared_for == [""]
    assert room.started == []


def test_an_answer_of_a_node_this_sloop_cannot_read_is_refused_never_half_read(
    tmp_path: Path,
) -> None:
    room = FakeRoom([])
    prepared = orjson.loads(messages.encode(messages.Prepared("9.9.9", NODE, ())))
    room.prepared_answer = orjson.dumps({**prepared, "gpu": True})
    events = asyncio.run(_drive(room, tmp_path))
    match events[-1]:
        case messages.Finished(_, messages.Refused(reason)):
            assert "unreadable" in reason, reason
            assert "['gpu']" in reason, reason
        case other:
            raise AssertionError(other)
    assert room.started == []


def test_work_over_the_bundle_bound_is_not_taken(tmp_path: Path) -> None:
    room = FakeRoom([messages.Polled((), 0.0, messages.Exited(0))], bundle=b"x" * 10)
    fields = {name: getattr(LAUNCH, name) for name in LAUNCH.__dataclass_fields__}
    events = asyncio.run(
        _drive(room, tmp_path, messages.RemoteLaunch(**{**fields, "max_bundle": 4}))
    )
    match events[-1]:
        case messages.Finished(_, messages.Unreturned(error, where)):
            assert "the bundle of the work" in error, error
            assert where == NODE
        case other:
            raise AssertionError(other)
    assert list((tmp_path / "ship").iterdir()) == []


# --- the daemon's side: what the driver says reaches the run ------------------------


class _Executor:
    def __init__(self, tmp_path: Path) -> None:
        self.ship_dir = tmp_path
        self.metrics = SimpleNamespace(shipped=lambda d, s: None, relayed=lambda s: None)
        self.down_reason: str | None = None
        self.sent: list[messages.Op] = []

    def register(self, child: RemoteChild) -> str:
        return IDENT

    def send(self, op: messages.Op) -> None:
        self.sent.append(op)


def _child(tmp_path: Path, lines: list[tuple[str, list[str], bool]]) -> RemoteChild:
    launch = StageLaunch(
        owner="R7/implement/1", commit="a" * 40, argv=("true",), checkout=tmp_path,
        home=tmp_path, limits=LAUNCH.limits,
    )  # fmt: skip
    executor = cast(Executor, _Executor(tmp_path))
    return RemoteChild(executor, launch, LAUNCH, lambda s, t, p: lines.append((s, t, p)), tmp_path)


def test_the_nodes_failure_reaches_the_stages_reason_as_node_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node's ``Failed`` is read where it arrives: the run's reason names it."""

    async def nothing_to_ship(*args: Any) -> None:
        return None  # the node has the start commit

    monkeypatch.setattr(bundles, "bundle_for", nothing_to_ship)

    async def scenario() -> tuple[StageEnd, list[tuple[str, list[str], bool]]]:
        lines: list[tuple[str, list[str], bool]] = []
        child = _child(tmp_path, lines)
        executor = RayExecutor("127.0.0.1:6399", "sloop", tmp_path)
        executor._children[IDENT] = child
        said = [
            messages.Placed(IDENT, NODE, ()),
            messages.Started(IDENT, 4242),
            messages.Items(IDENT, (messages.Lines("stderr", ("oops",), True),), 2.0),
            messages.Finished(IDENT, messages.Lost("the node lost the child: boom", NODE)),
        ]
        for event in said:
            executor._on_event(messages.decode_event(messages.encode(event)))
            await asyncio.sleep(0)
        assert cast(_Executor, child.executor).sent == [messages.Ship(IDENT, "")]
        # The runs layer reads where a child runs as a mapping (runstate.live_node).
        assert child.node == {"id": NODE.id, "host": "w1"}
        return await child.end(), lines

    end, lines = asyncio.run(scenario())
    assert lines == [("stderr", ["oops"], True)]
    assert isinstance(end, Lost)
    assert end.reason == "the node lost the child: boom"
    assert end.node == {"id": NODE.id, "host": "w1"}
    result = outcomes.lost(end.reason, end.node, end.cluster_down)
    assert result.reason == "the Ray node running the stage was lost: the node lost the child: boom"
    assert (result.diagnosis or {})["classification"] == "node_lost"


def test_an_end_the_daemon_cannot_read_ends_its_child_lost(tmp_path: Path) -> None:
    async def scenario() -> StageEnd:
        child = _child(tmp_path, [])
        executor = RayExecutor("127.0.0.1:6399", "sloop", tmp_path)
        executor._children[IDENT] = child
        raw = orjson.loads(messages.encode(messages.Finished(IDENT, messages.Refused("r"))))
        raw["ended"]["colour"] = "red"
        try:
            messages.decode_event(orjson.dumps(raw))
        except messages.ProtocolError as exc:
            executor._unreadable(exc)
        return await child.end()

    end = asyncio.run(scenario())
    assert isinstance(end, Lost)
    assert end.reason.startswith("the Ray driver's report of the end was unreadable")


@pytest.mark.parametrize(
    ("ended", "refusal"),
    [
        (messages.Refused("no Ray node took the stage"), "no Ray node took the stage"),
        (messages.Unreturned("fsck failed", NODE), "the node could not give the work back: fsck"),
    ],
)
def test_refusals_end_the_stage_refused(
    tmp_path: Path, ended: messages.Ended, refusal: str
) -> None:
    async def scenario() -> None:
        child = _child(tmp_path, [])
        child.ended(ended)
        await child.end()

    with pytest.raises(LaunchRefused, match=refusal):
        asyncio.run(scenario())


# --- the node's Ray folder: found, or the stage refused (fail closed) ---------------


def test_the_nodes_ray_folder_is_hidden_when_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node, "ray_folder", lambda: tmp_path / "ray")
    (tmp_path / "ray").mkdir()
    assert node._hidden_places(tmp_path / "node") == (tmp_path / "node", tmp_path / "ray")


def test_a_node_whose_ray_folder_cannot_be_found_runs_no_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ray upgrade that moves the folder refuses the stage: no child runs seeing it."""

    def moved() -> Path:
        raise AttributeError("'RuntimeContext' object has no attribute 'get_temp_dir'")

    async def unreachable(*args: Any) -> Any:
        raise AssertionError("a child was started with Ray's folder not hidden")

    room_dir = tmp_path / "room"
    room_dir.mkdir()
    fake_room = SimpleNamespace(
        checkout=room_dir / "work", home=room_dir / "home", socket=room_dir / "w.sock",
        files=room_dir,
    )  # fmt: skip
    fake_cache = SimpleNamespace(path=tmp_path / "cache", take=_noop)

    async def cache_of(repository: str) -> Any:
        return fake_cache

    async def make(*args: Any) -> Any:
        return fake_room

    monkeypatch.setenv("SLOOP_NODE_DIR", str(tmp_path / "node"))
    monkeypatch.setattr(node, "ray_folder", moved)
    monkeypatch.setattr(node, "cache_of", cache_of)
    monkeypatch.setattr(room_module.Room, "make", make)
    monkeypatch.setattr(ChildLauncher, "start", unreachable)

    with pytest.raises(LaunchRefused, match=r"cannot find Ray's own folder.*AttributeError"):
        asyncio.run(node.StageRoom().start(IDENT, messages.encode(LAUNCH), b""))


def test_ray_folder_refuses_a_folder_that_is_not_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_ray = SimpleNamespace(
        get_runtime_context=lambda: SimpleNamespace(get_temp_dir=lambda: str(tmp_path / "gone"))
    )
    monkeypatch.setitem(sys.modules, "ray", fake_ray)
    with pytest.raises(LaunchRefused, match="not a folder"):
        node._hidden_places(tmp_path)


async def _noop(*args: Any) -> None:
    return None
