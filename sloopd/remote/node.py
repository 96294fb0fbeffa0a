"""A stage execution on a Ray node: the actor's logic, with no Ray in it.

``StageRoom`` is what the driver (``sloopd.remote.driver``) wraps with
``ray.remote`` and places on a node with the stage's resources: one actor per
stage execution or panel seat.  It makes the stage's checkout from the shipped
commit, runs the child with the very launcher the daemon's host uses
(``sloopd.proc.launchers.ChildLauncher``: the same bubblewrap sandbox, mounts
rules, environment allowlist and ``network = false``), holds its lines and its
worker-socket bytes in a bounded outbox the driver drains (``poll``), and gives
back the commit it left as a bundle (``collect``).  The actor is owned by the
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
from pathlib import Path
from typing import Any

import sloopd
from sloopd.git import checkout
from sloopd.git.node_cache import CacheError
from sloopd.proc import sandbox
from sloopd.proc.children import Child, ProcessGroups
from sloopd.proc.launchers import ChildLauncher, LocalChild, SandboxPlaces
from sloopd.proc.stage_io import LaunchRefused
from sloopd.remote import messages
from sloopd.remote.relay import Outbox, SocketRelay
from sloopd.remote.room import Room, RoomError, cache_of, node_dir


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
    Ray's own folder (its sockets, logs and session files)."""
    places = [root]
    with contextlib.suppress(Exception):
        import ray

        node: Any = ray._private.worker._global_node
        temp = node.get_temp_dir_path()
        places.append(Path(temp))
    return tuple(Path(os.path.realpath(p)) for p in places)


def node_name() -> dict[str, str]:
    """Where this actor runs: the Ray node id and the host, as the run view shows them."""
    found = {"host": socket.gethostname(), "id": ""}
    with contextlib.suppress(Exception):
        import ray

        context = ray.get_runtime_context()
        found["id"] = context.get_node_id()
    return found


class StageRoom:
    """One stage execution (or panel seat) on this node."""

    def __init__(self) -> None:
        self.root = node_dir()
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._room: Room | None = None
        self._child: LocalChild[Child] | None = None
        self._relay: SocketRelay | None = None
        self._outbox: Outbox | None = None
        self._ended: int | None = None
        self._waiter: asyncio.Task[None] | None = None
        self._failure: str | None = None

    async def prepare(self, repository: str) -> dict[str, Any]:
        """Who runs here (Sloop's version, the node) and what the node's cache holds."""
        cache = await cache_of(repository)
        return {"version": sloopd.__version__, "node": node_name(), "haves": await cache.haves()}

    async def start(self, data: dict[str, Any], bundle: bytes) -> dict[str, Any]:
        """Make the checkout from the shipped commit and start the child; its pid."""
        remote = messages.from_json(data)
        try:
            cache = await cache_of(remote.repository)
            await cache.take(bundle, remote.commit)
            room = self._room = await Room.make(cache, remote.branch, remote.commit)
        except (RoomError, CacheError, checkout.CheckoutError, OSError) as exc:
            raise LaunchRefused(f"the node could not make the stage's checkout: {exc}") from exc
        hide = _hidden_places(self.root)
        groups = ProcessGroups(self.root / "groups")
        values = remote.values
        # The daemon host's launcher, with the node's hidden places and the daemon's
        # values of the allowlisted variables.
        launcher = ChildLauncher[Child](
            groups, SandboxPlaces(hide, cache.path / "objects"), lambda: node_environ(values)
        )
        launch = messages.node_launch(
            remote, checkout=room.checkout, home=room.home, socket=room.socket, files=room.files
        )
        outbox = self._outbox = Outbox(self._pause)
        if launch.worker_socket is not None:
            self._relay = SocketRelay(room.socket, outbox)
            await self._relay.open()
        problem = sandbox.probe()
        if problem is not None:
            raise LaunchRefused(f"the sandbox cannot start on this node: {problem}")
        child = self._child = await launcher.start(launch, outbox.lines)
        self._waiter = asyncio.get_running_loop().create_task(self._wait(child))
        return {"pid": child.child.pid}

    def _pause(self, full: bool) -> None:
        if self._child is not None:
            self._child.child.pause_reading(full)
        if self._relay is not None:
            self._relay.pause(full)

    async def _wait(self, child: LocalChild[Child]) -> None:
        try:
            self._ended = (await child.end()).exit_code
        except Exception as exc:
            self._failure = f"the node lost the child: {exc}"
            self._ended = -9
        assert self._outbox is not None
        self._outbox.changed.set()

    async def poll(self, wait_s: float) -> dict[str, Any]:
        """What the child said since the last poll; its end once everything was taken;
        and how long it has been silent, by this node's clock (the daemon's stall clock:
        relay delay on the way is not the child's silence)."""
        outbox = self._outbox
        assert outbox is not None, "poll before start"
        if outbox.empty and self._ended is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(outbox.changed.wait(), wait_s)
        # A full outbox stopped reading the child's pipes: it had more to say.
        silent = 0.0 if outbox.full or self._child is None else self._silence(self._child)
        items = outbox.take()
        ended = self._ended if outbox.empty and self._ended is not None else None
        return {"items": items, "ended": ended, "failure": self._failure, "silent": silent}

    @staticmethod
    def _silence(child: LocalChild[Child]) -> float:
        return max(0.0, time.monotonic() - child.last_output_monotonic)

    async def deliver(self, number: int, data: bytes | None) -> None:
        if self._relay is not None:
            await self._relay.deliver(number, data)

    async def stop(self) -> None:
        """SIGTERM inside the sandbox, SIGKILL after the grace: as on the daemon's host."""
        if self._child is not None:
            await self._child.stop()

    async def collect(
        self,
        start: str,
        base: str,
        auto_commit: str | None,
        identity: tuple[str, str],
        max_bundle: int,
    ) -> dict[str, Any]:
        """The commit the child left (fetched into the cache, checked), as a bundle of at
        most ``max_bundle`` bytes."""
        room = self._room
        assert room is not None, "collect before start"
        if self._relay is not None:
            await self._relay.close()
        try:
            tip, dirty, bundle = await room.collect(
                _hidden_places(self.root),
                start=start,
                base=base,
                auto_commit=auto_commit,
                identity=identity,
                max_bundle=max_bundle,
            )
            await room.cache.keep(tip)
            return {"tip": tip, "uncommitted": dirty, "bundle": bundle, "error": None}
        except (RoomError, CacheError) as exc:
            return {"tip": None, "uncommitted": [], "bundle": b"", "error": str(exc)}
        finally:
            await asyncio.to_thread(room.remove)
