"""A stage execution on a Ray node: the actor's logic, with no Ray in it.

``StageRoom`` is what the driver (``sloopd.remote.driver``) wraps with
``ray.remote`` and places on a node with the stage's resources: one stage
execution or panel seat at a time, several in turn when the driver keeps it warm
(``sloopd.remote.pool``), each in a room of its own that ``release`` removes.  For
each it makes the stage's checkout from the shipped commit, runs the child with
the very launcher the daemon's host uses (``sloopd.proc.launchers.ChildLauncher``:
the same bubblewrap sandbox, mounts rules, environment allowlist and ``network =
false``), holds its lines and its worker-socket bytes in a bounded outbox the
driver drains (``poll``), and gives back the commit it left as a bundle
(``collect``).  The actor is owned by the
driver, which the daemon owns: when the daemon dies its driver dies, Ray kills
the driver's actors, and bubblewrap's ``--die-with-parent`` takes the sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import sloopd
from sloopd.git import checkout
from sloopd.git.node_cache import CacheError
from sloopd.proc import sandbox
from sloopd.proc.children import Child, ProcessGroups, find_marked
from sloopd.proc.launchers import ChildLauncher, LocalChild, SandboxPlaces
from sloopd.proc.stage_io import LaunchRefused, StageLaunch
from sloopd.remote import messages
from sloopd.remote.relay import Outbox, SocketRelay
from sloopd.remote.room import NodeTrees, Room, RoomError, cache_of, node_dir
from sloopd.util import trees

# How long a release waits for a stopped child's end (its grace and SIGKILL: 5 + 5 s).
RELEASE_WAIT_S = 15.0


def node_environ(values: Mapping[str, str]) -> Mapping[str, str]:
    """The node's PATH and locale; the passed names' values are the daemon's, as a
    child on the daemon's host would see them (the node's own never leak in)."""
    host = {k: v for k, v in os.environ.items() if k.startswith("LC_")}
    host.update({"LANG": os.environ.get("LANG", "C.UTF-8"), **values})
    host["PATH"] = node_path(values.get("PATH"), os.environ.get("PATH"))
    return host


def node_path(daemon: str | None, node: str | None) -> str:
    """The child's PATH on a node: the daemon's folders that exist here, in its order
    (a CLI installed in the same place on every host is found as on the daemon's), then
    the node's own."""
    folders = [p for p in (daemon or "").split(":") if p and os.path.isdir(p)]
    folders += [p for p in (node or os.defpath).split(":") if p and p not in folders]
    return ":".join(folders)


def _hidden_places(root: Path) -> tuple[Path, ...]:
    """What no child on this node sees: Sloop's node folder (every cache and room) and
    Ray's own folder (its sockets, logs and session files).

    Ray's folder is found through Ray's public runtime context; a node where it cannot
    be found runs no child (``LaunchRefused``), never one that would see it."""
    try:
        temp = ray_folder()
    except Exception as exc:
        raise LaunchRefused(
            "the node cannot find Ray's own folder to hide it from the stage: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return tuple(Path(os.path.realpath(p)) for p in (root, temp))


def ray_folder() -> Path:
    """This node's Ray folder (``ray start --temp-dir``; its sessions, sockets, logs)."""
    import ray

    temp = ray.get_runtime_context().get_temp_dir()
    if not temp or not os.path.isdir(temp):
        raise FileNotFoundError(f"Ray's runtime context names {temp!r}, not a folder")
    return Path(temp)


def node_name() -> messages.Node:
    """Where this actor runs: the Ray node id and the host, as the run view shows them."""
    node_id = ""
    with contextlib.suppress(Exception):  # a label only: the host says enough
        import ray

        node_id = ray.get_runtime_context().get_node_id()
    return messages.Node(id=node_id, host=socket.gethostname())


def node_launch(
    remote: messages.RemoteLaunch, *, checkout: Path, home: Path, socket: Path | None, files: Path
) -> StageLaunch:
    """The ``StageLaunch`` a node runs: the same child, in the node's own places."""
    token_file = None
    if remote.token is not None and remote.token_file:
        token_file = files / "token"
        token_file.unlink(missing_ok=True)
        token_file.write_text(remote.token, encoding="ascii")
        token_file.chmod(0o400)
    prompt_file = None
    if remote.prompt is not None:
        prompt_file = files / "prompt.md"
        prompt_file.write_bytes(remote.prompt)
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name, text in remote.home_files.items():
        if "/" in name or name in (".", ".."):
            continue  # a file name, never a path: the daemon made HOME flat
        (home / name).write_text(text, encoding="utf-8")
    return StageLaunch(
        owner=remote.owner,
        commit=remote.commit,
        argv=remote.argv,
        checkout=checkout,
        home=home,
        limits=remote.limits,
        variables=remote.variables,
        passed=remote.passed,
        ro_mounts=remote.ro_mounts,
        rw_mounts=remote.rw_mounts,
        worker_socket=socket if remote.token is not None else None,
        token=remote.token,
        token_file=token_file,
        token_env=remote.token_env,
        prompt_file=prompt_file,
        network=remote.network,
    )


@dataclass
class _Stage:
    """Everything one stage execution holds on its actor: dropped whole at its release."""

    id: str
    room: Room | None = None
    child: LocalChild[Child] | None = None
    relay: SocketRelay | None = None
    outbox: Outbox | None = None
    end: messages.Exited | messages.Failed | None = None
    waiter: asyncio.Task[None] | None = None
    bundle: bytes = b""
    uncollected: str | None = None  # why its collect failed, if it did


class StageRoom:
    """Stage executions (or panel seats) on this node, one at a time.

    An actor may serve several stages in turn (the driver's warm pool,
    ``sloopd.remote.pool``): each gets a fresh room (checkout, HOME, files, socket),
    fresh process groups and a fresh outbox, and ``release`` drops all of it before the
    next.  Every call about a stage names it (``stage``, the driver's id of it): a late
    call about a stage that is gone is never applied to the next one.

    Every argument and answer of its methods (but the bundles, bytes beside them, the
    stage's id and the poll's wait) is an encoded message of ``sloopd.remote.messages``:
    the driver and the node decode what the other sent, and one from another Sloop is
    refused, never half-read."""

    def __init__(self) -> None:
        self.root = node_dir()
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._stage: _Stage | None = None
        # The node's kernel lets a sandbox start: asked at this actor's first stage (a
        # bwrap spawn), not again at each later one.  A refusal is asked again.
        self._sandbox_ok = False
        # Copy-on-write checkouts of this actor (probed at its first stage).
        self._trees = NodeTrees(self.root, lambda: _hidden_places(self.root))

    async def ready(self) -> bytes:
        """The actor's worker process is up: ``Ready``."""
        return messages.encode(messages.Ready(sloopd.__version__, node_name()))

    async def prepare(self, repository: str, commit: str = "") -> bytes:
        """Who runs here (Sloop's version, the node) and what the node's cache holds:
        ``Prepared``.  When the cache holds ``commit`` (the stage's start) already, that
        commit alone is what it holds: the daemon ships nothing then, and listing the
        cache's refs (a git call) would only delay the stage."""
        cache = await cache_of(repository)
        if commit and await cache.has(commit):
            haves: tuple[str, ...] = (commit,)
        else:
            haves = tuple(await cache.haves())
        return messages.encode(messages.Prepared(sloopd.__version__, node_name(), haves))

    def _of(self, stage: str) -> _Stage | None:
        current = self._stage
        return current if current is not None and current.id == stage else None

    async def start(self, stage: str, data: bytes, bundle: bytes) -> bytes:
        """Make the checkout from the shipped commit and start the child (``data``: a
        ``RemoteLaunch``); ``Began``."""
        if self._stage is not None:
            raise LaunchRefused(f"the node's actor still holds stage {self._stage.id}")
        try:
            remote = messages.decode(data, messages.RemoteLaunch)
        except messages.ProtocolError as exc:
            raise LaunchRefused(f"the node could not read the stage's launch: {exc}") from exc
        held = self._stage = _Stage(stage)
        try:
            cache = await cache_of(remote.repository)
            await cache.take(bundle, remote.commit)
            shared = await asyncio.to_thread(self._trees.of, cache)
            room = held.room = await Room.make(cache, remote.branch, remote.commit, shared)
        except (RoomError, CacheError, checkout.CheckoutError, OSError) as exc:
            raise LaunchRefused(f"the node could not make the stage's checkout: {exc}") from exc
        hide = _hidden_places(self.root)
        # Fresh groups for each stage; the registry folder is the node's (a crashed
        # actor's records are found there).
        groups = ProcessGroups(self.root / "groups")
        values = remote.values
        # The daemon host's launcher, with the node's hidden places and the daemon's
        # values of the allowlisted variables.
        launcher = ChildLauncher[Child](
            groups, SandboxPlaces(hide, cache.path / "objects"), lambda: node_environ(values)
        )
        launch = node_launch(
            remote, checkout=room.checkout, home=room.home, socket=room.socket, files=room.files
        )
        if room.made is not None:
            launch = replace(launch, overlay=room.made.overlay)
        outbox = held.outbox = Outbox(lambda full: _pause(held, full))
        if launch.worker_socket is not None:
            held.relay = SocketRelay(room.socket, outbox)
            await held.relay.open()
        if not self._sandbox_ok:
            problem = sandbox.probe()
            if problem is not None:
                raise LaunchRefused(f"the sandbox cannot start on this node: {problem}")
            self._sandbox_ok = True
        child = held.child = await launcher.start(launch, outbox.lines)
        held.waiter = asyncio.get_running_loop().create_task(_wait(held, child))
        return messages.encode(messages.Began(child.child.pid))

    async def poll(self, stage: str, wait_s: float) -> bytes:
        """What the child said since the last poll; its end once everything was taken;
        and how long it has been silent, by this node's clock (the daemon's stall clock:
        relay delay on the way is not the child's silence): ``Polled``."""
        held = self._of(stage)
        assert held is not None and held.outbox is not None, "poll before start"
        outbox = held.outbox
        if outbox.empty and held.end is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(outbox.changed.wait(), wait_s)
        # A full outbox stopped reading the child's pipes: it had more to say.
        silent = 0.0 if outbox.full or held.child is None else _silence(held.child)
        items = outbox.take()
        end = held.end if outbox.empty else None
        return messages.encode(messages.Polled(items, silent, end))

    async def deliver(self, stage: str, data: bytes) -> None:
        """The daemon's answer on a worker-socket connection: a ``Conn``."""
        conn = messages.decode(data, messages.Conn)
        held = self._of(stage)
        if held is not None and held.relay is not None:
            await held.relay.deliver(conn.number, conn.data)

    async def stop(self, stage: str) -> None:
        """SIGTERM inside the sandbox, SIGKILL after the grace: as on the daemon's host."""
        held = self._of(stage)
        if held is not None and held.child is not None:
            await held.child.stop()

    async def collect(self, stage: str, data: bytes) -> bytes:
        """The commit the child left (fetched into the cache, checked), its bundle of at
        most ``max_bundle`` bytes kept for ``bundle`` (``data``: a ``Collect``):
        ``Collected`` or ``Uncollected``."""
        asked = messages.decode(data, messages.Collect)
        held = self._of(stage)
        assert held is not None and held.room is not None, "collect before start"
        room = held.room
        if held.relay is not None:
            await held.relay.close()
        try:
            tip, dirty, bundle = await room.collect(
                _hidden_places(self.root),
                start=asked.start,
                base=asked.base,
                auto_commit=asked.auto_commit,
                identity=asked.identity,
                max_bundle=asked.max_bundle,
            )
            if tip != asked.start:  # the start is a have already (shipped or kept)
                await room.cache.keep(tip)
        except (RoomError, CacheError, LaunchRefused) as exc:
            held.uncollected = str(exc)
            return messages.encode(messages.Uncollected(str(exc)))
        finally:
            # Its trees let go now; the room itself is removed by ``release``, after the
            # daemon has the stage's end (a removal here delayed every stage's end).
            room.let_go()
        held.bundle = bundle
        return messages.encode(messages.Collected(tip, tuple(dirty), len(bundle)))

    async def bundle(self, stage: str) -> bytes:
        """The bundle ``collect`` made (given once: the actor holds it no longer)."""
        held = self._of(stage)
        if held is None:
            return b""
        bundle, held.bundle = held.bundle, b""
        return bundle

    async def release(self, stage: str) -> bytes:
        """The stage is over: drop everything of it (its child stopped and confirmed
        dead, its socket closed, its room removed), so this actor may serve another;
        ``Released``, clean or with why the actor must be retired instead."""
        held = self._of(stage)
        if held is None:
            clean = self._stage is None
            return messages.encode(messages.Released(clean, "" if clean else "another stage"))
        self._stage = None  # whatever follows, nothing of it is reachable any more
        problems = await _clear(held)
        return messages.encode(messages.Released(not problems, "; ".join(problems)))


def _pause(held: _Stage, full: bool) -> None:
    if held.child is not None:
        held.child.child.pause_reading(full)
    if held.relay is not None:
        held.relay.pause(full)


def _silence(child: LocalChild[Child]) -> float:
    return max(0.0, time.monotonic() - child.last_output_monotonic)


async def _wait(held: _Stage, child: LocalChild[Child]) -> None:
    end: messages.Exited | messages.Failed
    try:
        end = messages.Exited((await child.end()).exit_code)
    except Exception as exc:
        end = messages.Failed(f"the node lost the child: {exc}")
    held.end = end
    assert held.outbox is not None
    held.outbox.changed.set()


async def _clear(held: _Stage) -> list[str]:
    """Everything of a stage gone from this actor; what could not be made sure of."""
    problems: list[str] = []
    if held.relay is not None:
        with contextlib.suppress(Exception):
            await held.relay.close()
    child = held.child
    if child is not None:
        if held.end is None:
            # Stopped before its end was seen: SIGTERM, then SIGKILL (checked below).
            with contextlib.suppress(Exception):
                await child.stop()
        if held.waiter is not None:
            with contextlib.suppress(TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(held.waiter), RELEASE_WAIT_S)
        if held.end is None or not isinstance(held.end, messages.Exited):
            problems.append("the stage's child was not seen to end")
        if find_marked(child.child.marker):
            problems.append("a process of the stage's child is still alive")
    if held.waiter is not None and not held.waiter.done():
        held.waiter.cancel()
    if held.uncollected is not None:
        problems.append(f"its collect failed: {held.uncollected}")
    if held.room is not None:
        held.room.let_go()
        try:
            await asyncio.to_thread(held.room.remove)
        except (OSError, trees.NotAFolder) as exc:
            problems.append(f"its room could not be removed: {exc}")
    held.room = held.child = held.relay = held.outbox = held.waiter = None
    held.bundle = b""
    return problems
