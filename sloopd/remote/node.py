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

import sloopd
from sloopd.git import checkout
from sloopd.git.node_cache import CacheError
from sloopd.proc import sandbox
from sloopd.proc.children import Child, ProcessGroups
from sloopd.proc.launchers import ChildLauncher, LocalChild, SandboxPlaces
from sloopd.proc.stage_io import LaunchRefused, StageLaunch
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


class StageRoom:
    """One stage execution (or panel seat) on this node.

    Every argument and answer of its methods (but the bundles, bytes beside them) is
    an encoded message of ``sloopd.remote.messages``: the driver and the node decode
    what the other sent, and one from another Sloop is refused, never half-read."""

    def __init__(self) -> None:
        self.root = node_dir()
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._room: Room | None = None
        self._child: LocalChild[Child] | None = None
        self._relay: SocketRelay | None = None
        self._outbox: Outbox | None = None
        self._end: messages.Exited | messages.Failed | None = None
        self._waiter: asyncio.Task[None] | None = None
        self._bundle = b""

    async def prepare(self, repository: str) -> bytes:
        """Who runs here (Sloop's version, the node) and what the node's cache holds:
        ``Prepared``."""
        cache = await cache_of(repository)
        haves = tuple(await cache.haves())
        return messages.encode(messages.Prepared(sloopd.__version__, node_name(), haves))

    async def start(self, data: bytes, bundle: bytes) -> bytes:
        """Make the checkout from the shipped commit and start the child (``data``: a
        ``RemoteLaunch``); ``Began``."""
        try:
            remote = messages.decode(data, messages.RemoteLaunch)
        except messages.ProtocolError as exc:
            raise LaunchRefused(f"the node could not read the stage's launch: {exc}") from exc
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
        launch = node_launch(
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
        return messages.encode(messages.Began(child.child.pid))

    def _pause(self, full: bool) -> None:
        if self._child is not None:
            self._child.child.pause_reading(full)
        if self._relay is not None:
            self._relay.pause(full)

    async def _wait(self, child: LocalChild[Child]) -> None:
        end: messages.Exited | messages.Failed
        try:
            end = messages.Exited((await child.end()).exit_code)
        except Exception as exc:
            end = messages.Failed(f"the node lost the child: {exc}")
        self._end = end
        assert self._outbox is not None
        self._outbox.changed.set()

    async def poll(self, wait_s: float) -> bytes:
        """What the child said since the last poll; its end once everything was taken;
        and how long it has been silent, by this node's clock (the daemon's stall clock:
        relay delay on the way is not the child's silence): ``Polled``."""
        outbox = self._outbox
        assert outbox is not None, "poll before start"
        if outbox.empty and self._end is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(outbox.changed.wait(), wait_s)
        # A full outbox stopped reading the child's pipes: it had more to say.
        silent = 0.0 if outbox.full or self._child is None else self._silence(self._child)
        items = outbox.take()
        end = self._end if outbox.empty else None
        return messages.encode(messages.Polled(items, silent, end))

    @staticmethod
    def _silence(child: LocalChild[Child]) -> float:
        return max(0.0, time.monotonic() - child.last_output_monotonic)

    async def deliver(self, data: bytes) -> None:
        """The daemon's answer on a worker-socket connection: a ``Conn``."""
        conn = messages.decode(data, messages.Conn)
        if self._relay is not None:
            await self._relay.deliver(conn.number, conn.data)

    async def stop(self) -> None:
        """SIGTERM inside the sandbox, SIGKILL after the grace: as on the daemon's host."""
        if self._child is not None:
            await self._child.stop()

    async def collect(self, data: bytes) -> bytes:
        """The commit the child left (fetched into the cache, checked), its bundle of at
        most ``max_bundle`` bytes kept for ``bundle`` (``data``: a ``Collect``):
        ``Collected`` or ``Uncollected``."""
        asked = messages.decode(data, messages.Collect)
        room = self._room
        assert room is not None, "collect before start"
        if self._relay is not None:
            await self._relay.close()
        try:
            tip, dirty, bundle = await room.collect(
                _hidden_places(self.root),
                start=asked.start,
                base=asked.base,
                auto_commit=asked.auto_commit,
                identity=asked.identity,
                max_bundle=asked.max_bundle,
            )
            await room.cache.keep(tip)
        except (RoomError, CacheError, LaunchRefused) as exc:
            return messages.encode(messages.Uncollected(str(exc)))
        finally:
            await asyncio.to_thread(room.remove)
        self._bundle = bundle
        return messages.encode(messages.Collected(tip, tuple(dirty), len(bundle)))

    async def bundle(self) -> bytes:
        """The bundle ``collect`` made (given once: the actor holds it no longer)."""
        bundle, self._bundle = self._bundle, b""
        return bundle
