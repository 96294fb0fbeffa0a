"""The Ray driver: a process of the daemon's own, so Ray never runs in the daemon's loop.

``python -m sloopd.remote.driver --address ADDR --namespace NS`` is started by
``sloopd.remote.launcher.RayExecutor`` and speaks one JSON object per line: ops
on its standard input, events on its standard output (Ray's own chatter goes to
standard error).  Importing Ray and connecting costs about a second and several
threads; kept out of the daemon, neither delays a request and a crash of Ray's
client takes only this process (the executor starts another).

Lifetime (the guarantee that a dead daemon leaves nothing on any node): the
driver asks the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``)
and exits when its standard input closes; every actor it creates is owned by it
and not detached, so Ray kills them when the driver's job ends (the idle ones of
its warm pool too), and each actor's sandbox dies with the actor (bubblewrap's
``--die-with-parent``).

Actors: a stage takes a warm one of its resource shape from the driver's pool
(``sloopd.remote.pool``: made and answered ahead of demand, ``--warm`` per shape,
``--shape`` the default one) or makes its own; after the stage the actor is
released (nothing of the stage left on it) and goes back to the pool, or is killed
when it is not clean, its stage was lost, or the pool is full.  A warm actor found
dead at the stage's first call (it died idle, with its node) is replaced by a new
one: nothing of the stage ran there.

The protocol is ``sloopd.remote.messages`` (the schema; ``sloopd.remote.codec``
encodes and decodes it): ops ``Start``, ``Ship`` (the start commit's bundle, a file
path), ``Stop`` and ``Deliver`` on standard input; events ``Up``, ``Down``
(``sloopd.remote.connection``: at every sign that the cluster is gone, and always
before a stage lost with it), ``Placed``, ``Started``, ``Items`` (every poll of the
node) and ``Finished`` (how the child ``Ended``) on standard output.  The actor's
calls take and answer encoded messages too; a node that lost its child says
``Failed``, and the stage ends ``Lost`` with that reason (``node_lost``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from pathlib import Path
from typing import Any

import sloopd
from sloopd.git.bundles import oversized
from sloopd.remote import messages
from sloopd.remote.connection import ClusterLink, short
from sloopd.remote.pool import WarmPool

POLL_WAIT_SECONDS = 1.0
# A stage that arrives while the driver connects waits this long for the cluster.
CONNECT_WAIT_SECONDS = 20.0
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:  # the parent died before the line above
        os._exit(1)


class Driver:
    def __init__(
        self, address: str, namespace: str, out: Any, ship_dir: Path,
        warm: int = 0, default: messages.Resources | None = None,
    ) -> None:  # fmt: skip
        self.address = address
        self._out = out
        self.link = ClusterLink(address, namespace, self.emit)
        self.pool = WarmPool(self._new_actor, self._kill, warm, default)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._ships: dict[str, asyncio.Future[str]] = {}
        self._actors: dict[str, Any] = {}  # a started stage's actor
        self._held: dict[str, Any] = {}  # every stage's actor, from its take to its end
        self._stopping: set[str] = set()
        # The daemon's own folder (its state directory's ship/): what comes back lands
        # where the daemon reads it and removes it.
        self._ship_dir = ship_dir
        ship_dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    def emit(self, event: messages.Event) -> None:
        self._out.write(messages.encode(event) + b"\n")
        self._out.flush()
        match event:
            case messages.Up() if self.pool.default is not None:
                self.pool.fill(self.pool.default)
            case messages.Down():
                self.pool.clear()

    def _new_actor(self, resources: messages.Resources) -> Any:
        return self.link.actor_class.options(**_options(resources)).remote()

    def _kill(self, actor: Any) -> None:
        with contextlib.suppress(Exception):
            self.link.ray.kill(actor, no_restart=True)

    def handle(self, op: messages.Op) -> None:
        match op:
            case messages.Start(ident):
                task = asyncio.get_running_loop().create_task(self._execute(op))
                self._tasks[ident] = task
                task.add_done_callback(lambda _t: self._tasks.pop(ident, None))
            case messages.Ship(ident, bundle):
                future = self._ships.get(ident)
                if future is not None and not future.done():
                    future.set_result(bundle)
            case messages.Stop(ident):
                self._stopping.add(ident)
                actor = self._actors.get(ident)
                if actor is not None:
                    actor.stop.remote(ident)
                elif ident in self._tasks:
                    self._tasks[ident].cancel()  # not started yet: nothing runs to stop
            case messages.Deliver(ident, conn, data):
                actor = self._actors.get(ident)
                if actor is not None:
                    actor.deliver.remote(ident, messages.encode(messages.Conn(conn, data)))

    def _end(self, ident: str, ended: messages.Ended) -> None:
        self.emit(messages.Finished(ident, ended))

    async def _execute(self, op: messages.Start) -> None:
        ident, launch = op.id, op.launch
        link = self.link
        reusable = False  # whether the actor may serve another stage (once released)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(link.up.wait(), CONNECT_WAIT_SECONDS)
            if not link.connected:
                # Transient, as a lost node is, and the cluster's: said down first, so
                # the daemon closes its gate and spends no retry of the ticket's.
                link.report_down(f"not connected within {CONNECT_WAIT_SECONDS:.0f} s")
                self._end(ident, messages.Lost(
                    f"the Ray cluster at {self.address} cannot be reached", None))  # fmt: skip
                return
            actor, answer = await self._prepare(ident, op)
            try:
                info = messages.decode(answer, messages.Prepared)
            except messages.ProtocolError as exc:
                self._end(ident, messages.Refused(_unreadable(exc)))
                return
            refused = _version_refusal(info)
            if refused is None:
                reusable = True  # the node runs this Sloop: release decides
                refused = await self._start(ident, actor, info, launch)
            if refused is not None:
                self._end(ident, messages.Refused(refused))
                return
            reusable = await self._follow(ident, actor, info, launch)
        except asyncio.CancelledError:
            reusable = False  # a start in flight may still run there: never handed on
            self._end(ident, messages.Refused("stopped before the stage started on a node"))
        except Exception as exc:
            # Lost with its node, or with the whole cluster: a fresh question tells,
            # and a cluster that does not answer is said down before the loss.
            reusable = False
            await link.verdict()
            self._end(ident, messages.Lost(short(exc), None))
        finally:
            self._actors.pop(ident, None)
            self._ships.pop(ident, None)
            self._stopping.discard(ident)
            held = self._held.pop(ident, None)
            if held is not None and reusable:
                self.pool.give_back(op.resources, held, lambda: _released(held, ident))
            elif held is not None:
                self._kill(held)

    async def _prepare(self, ident: str, op: messages.Start) -> tuple[Any, bytes]:
        """The stage's actor, warm from the pool or made for it, and its ``prepare``."""
        repository, commit = op.launch.repository, op.launch.commit
        actor, warm = await self.pool.take(op.resources)
        self._held[ident] = actor
        if warm:
            try:
                return actor, await _ask_prepare(actor, repository, commit)
            except Exception as exc:
                if not _lost(exc):
                    raise
                # It died idle (its node with it): nothing of the stage ran there yet.
                self._kill(self._held.pop(ident))
                actor = self._held[ident] = self.pool.create(op.resources)
        return actor, await self.pool.answer(_ask_prepare(actor, repository, commit), op.resources)

    async def _start(
        self, ident: str, actor: Any, info: messages.Prepared, launch: messages.RemoteLaunch
    ) -> str | None:
        """Ship the commit (the daemon bundles what the node lacks) and start the child;
        why it was refused, None once it runs."""
        future = self._ships[ident] = asyncio.get_running_loop().create_future()
        self.emit(messages.Placed(ident, info.node, info.haves))
        bundle_path = await future
        bundle = b""
        if bundle_path:
            # Held whole from here to the node: never more than the bound.
            refused = oversized(
                "the bundle of the stage's start commit",
                Path(bundle_path).stat().st_size,
                launch.max_bundle,
            )
            if refused is not None:
                return refused
            bundle = Path(bundle_path).read_bytes()
        try:
            answer = await actor.start.remote(ident, messages.encode(launch), bundle)
            began = messages.decode(answer, messages.Began)
        except messages.ProtocolError as exc:
            return _unreadable(exc)
        except Exception as exc:
            if _lost(exc):
                raise
            return short(exc)
        self._actors[ident] = actor
        if ident in self._stopping:
            actor.stop.remote(ident)
        self.emit(messages.Started(ident, began.pid))
        return None

    async def _follow(
        self, ident: str, actor: Any, info: messages.Prepared, launch: messages.RemoteLaunch
    ) -> bool:
        """Stream the child's output until its end, then take its work back; whether the
        actor may serve another stage."""
        while True:
            polled = messages.decode(
                await actor.poll.remote(ident, POLL_WAIT_SECONDS), messages.Polled
            )
            # Every poll, items or none: the node's silence is the stall clock.
            self.emit(messages.Items(ident, polled.items, polled.silent))
            if polled.end is not None:
                break
        match polled.end:
            case messages.Failed(reason):
                # The node lost its child (waiting for it failed): a loss, as a lost
                # node is; nothing of it is collected.
                self._end(ident, messages.Lost(reason, info.node))
                return False
            case messages.Exited(exit_code):
                collection = messages.decode_collection(
                    await actor.collect.remote(ident, messages.encode(launch.collect))
                )
                self._end(ident, await self._collected(ident, actor, info, launch, exit_code,
                                                       collection))  # fmt: skip
        return True

    async def _collected(
        self, ident: str, actor: Any, info: messages.Prepared, launch: messages.RemoteLaunch,
        exit_code: int, collection: messages.Collection,
    ) -> messages.Ended:  # fmt: skip
        """How the child ended, its work's bundle (if any) in the daemon's ship/."""
        if isinstance(collection, messages.Uncollected):
            return messages.Unreturned(collection.error, info.node)
        refused = oversized("the bundle of the work", collection.size, launch.max_bundle)
        if refused is not None:
            return messages.Unreturned(refused, info.node)
        path = ""
        if collection.size:
            bundle = await actor.bundle.remote(ident)
            refused = oversized("the bundle of the work", len(bundle), launch.max_bundle)
            if refused is not None:
                return messages.Unreturned(refused, info.node)
            path = str(self._ship_dir / f"{ident.replace('/', '_')}.bundle")
            Path(path).write_bytes(bundle)
        return messages.Ran(exit_code, collection.tip, collection.uncommitted, path, info.node)


async def _ask_prepare(actor: Any, repository: str, commit: str) -> bytes:
    """The actor's ``prepare`` of the stage's start ``commit``."""
    try:
        answer: bytes = await actor.prepare.remote(repository, commit)
    except Exception as exc:
        if _lost(exc):
            raise
        # A node of an older Sloop takes the repository alone: asked so, it says its
        # version, and the version check refuses the stage (not a loss to retry).
        answer = await actor.prepare.remote(repository)
    return answer


async def _released(actor: Any, ident: str) -> bool:
    """The stage gone from its actor; whether the actor is clean to serve another."""
    released = messages.decode(await actor.release.remote(ident), messages.Released)
    if not released.clean:
        print(f"sloopd-ray-driver: an actor retired: {released.reason}", file=sys.stderr,
              flush=True)  # fmt: skip
    return released.clean


def _version_refusal(info: messages.Prepared) -> str | None:
    """Nodes must run this daemon's Sloop: the node's code decides what a stage does."""
    if info.version == sloopd.__version__:
        return None
    return (
        f"the Ray node {info.node.label} runs Sloop {info.version}, but this "
        f"daemon is Sloop {sloopd.__version__}: install the same version on every node"
    )


def _unreadable(exc: messages.ProtocolError) -> str:
    """A node's answer this Sloop cannot read: the node runs another version of it."""
    return (
        f"the Ray node's answer was unreadable ({exc}): it runs another Sloop than this "
        f"daemon's {sloopd.__version__}? install the same version on every node"
    )


def _options(resources: messages.Resources) -> dict[str, Any]:
    """Ray's actor options from the stage's resolved ``resources``."""
    options: dict[str, Any] = {
        "num_cpus": resources.cpus,
        "max_restarts": 0,  # a lost stage is the daemon's to retry, never Ray's
        "max_concurrency": 64,  # polls, deliveries and a stop at once
        # Stages spread over the nodes that have their resources (Ray packs them onto one
        # node by default): agent CLIs hold hundreds of MB each.
        "scheduling_strategy": "SPREAD",
    }
    if resources.memory:
        options["memory"] = resources.memory
    if resources.custom:
        options["resources"] = dict(resources.custom)
    return options


def _lost(exc: BaseException) -> bool:
    return type(exc).__name__ in {"ActorDiedError", "RayActorError", "ActorUnavailableError"}


async def _serve(driver: Driver) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=messages.MAX_PIPE_LINE_BYTES)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    keeper = loop.create_task(driver.link.keep())
    sweeper = loop.create_task(driver.pool.keep())
    try:
        while True:
            line = await reader.readline()
            if not line:
                return  # the daemon is gone: so is everything this driver owns
            try:
                op = messages.decode_op(line)
            except messages.ProtocolError as exc:
                # The daemon and its driver are one install: a bug, said on stderr
                # (the daemon keeps its driver's last words there).
                print(f"sloopd-ray-driver: an op refused: {exc}", file=sys.stderr, flush=True)
                continue
            driver.handle(op)
    finally:
        keeper.cancel()
        sweeper.cancel()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="sloopd-ray-driver")
    parser.add_argument("--address", required=True)
    parser.add_argument("--namespace", default="sloop")
    parser.add_argument("--ship-dir", type=Path, required=True)
    parser.add_argument("--warm", type=int, default=0)
    parser.add_argument("--shape", default="", help="the default shape: a Resources message")
    args = parser.parse_args(argv)
    _die_with_parent()
    # The protocol has standard output to itself; anything Ray prints goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    default = messages.decode(args.shape, messages.Resources) if args.shape else None
    driver = Driver(args.address, args.namespace, out, args.ship_dir, args.warm, default)
    try:
        asyncio.run(_serve(driver))
    finally:
        with contextlib.suppress(Exception):
            # Not with a cluster that does not answer: the process's end is enough.
            if driver.link.ray is not None and driver.link.connected:
                driver.link.ray.shutdown()


if __name__ == "__main__":
    main()
