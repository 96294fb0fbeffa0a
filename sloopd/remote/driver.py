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
and not detached, so Ray kills them when the driver's job ends, and each actor's
sandbox dies with the actor (bubblewrap's ``--die-with-parent``).

Ops: ``start {id, launch, resources}``, ``ship {id, bundle}`` (a file path),
``stop {id}``, ``deliver {id, conn, data}``.  Events: ``up {nodes}``,
``down {reason}`` (``sloopd.remote.connection``: at every sign that the cluster
is gone, and always before a stage lost with it), ``placed {id, node, haves}``,
``started {id}``, ``items {id, items, silent}``, ``ended {id, ...}`` (read by
``sloopd.remote.messages.ended_of``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import sloopd
from sloopd.git.bundles import oversized
from sloopd.remote import messages
from sloopd.remote.connection import ClusterLink, short

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
    def __init__(self, address: str, namespace: str, out: Any, ship_dir: Path) -> None:
        self.address = address
        self._out = out
        self.link = ClusterLink(address, namespace, self.emit)
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._ships: dict[str, asyncio.Future[str]] = {}
        self._actors: dict[str, Any] = {}
        self._stopping: set[str] = set()
        # The daemon's own folder (its state directory's ship/): what comes back lands
        # where the daemon reads it and removes it.
        self._ship_dir = ship_dir
        ship_dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    def emit(self, event: str, **fields: Any) -> None:
        line = json.dumps({"ev": event, **fields}, separators=(",", ":")) + "\n"
        self._out.write(line.encode())
        self._out.flush()

    def handle(self, op: dict[str, Any]) -> None:
        kind, ident = op.get("op"), str(op.get("id"))
        if kind == "start":
            task = asyncio.get_running_loop().create_task(self._execute(ident, op))
            self._tasks[ident] = task
            task.add_done_callback(lambda _t: self._tasks.pop(ident, None))
        elif kind == "ship":
            future = self._ships.get(ident)
            if future is not None and not future.done():
                future.set_result(str(op["bundle"]))
        elif kind == "stop":
            self._stopping.add(ident)
            actor = self._actors.get(ident)
            if actor is not None:
                actor.stop.remote()
            elif ident in self._tasks:
                self._tasks[ident].cancel()  # not started yet: nothing runs to stop
        elif kind == "deliver":
            actor = self._actors.get(ident)
            if actor is not None:
                data = op.get("data")
                actor.deliver.remote(op["conn"], None if data is None else messages.decode(data))

    async def _execute(self, ident: str, op: dict[str, Any]) -> None:
        actor = None
        link = self.link
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(link.up.wait(), CONNECT_WAIT_SECONDS)
            if not link.connected:
                # Transient, as a lost node is, and the cluster's: said down first, so
                # the daemon closes its gate and spends no retry of the ticket's.
                link.report_down(f"not connected within {CONNECT_WAIT_SECONDS:.0f} s")
                self.emit("ended", id=ident, lost=f"the Ray cluster at {self.address} "
                          "cannot be reached")  # fmt: skip
                return
            launch = op["launch"]
            actor = link.actor_class.options(**_options(op.get("resources") or {})).remote()
            info = await actor.prepare.remote(launch["repository"])
            refused = _version_refusal(info)
            if refused is None:
                refused = await self._start(ident, actor, info, launch)
            if refused is not None:
                self.emit("ended", id=ident, refused=refused)
                return
            await self._follow(ident, actor, info, launch)
        except asyncio.CancelledError:
            self.emit("ended", id=ident, refused="stopped before the stage started on a node")
        except Exception as exc:
            # Lost with its node, or with the whole cluster: a fresh question tells,
            # and a cluster that does not answer is said down before the loss.
            await link.verdict()
            self.emit("ended", id=ident, lost=short(exc), node=None)
        finally:
            self._actors.pop(ident, None)
            self._ships.pop(ident, None)
            self._stopping.discard(ident)
            if actor is not None:
                with contextlib.suppress(Exception):
                    link.ray.kill(actor, no_restart=True)

    async def _start(
        self, ident: str, actor: Any, info: dict[str, Any], launch: dict[str, Any]
    ) -> str | None:
        """Ship the commit (the daemon bundles what the node lacks) and start the child;
        why it was refused, None once it runs."""
        future = self._ships[ident] = asyncio.get_running_loop().create_future()
        self.emit("placed", id=ident, node=info["node"], haves=info["haves"])
        bundle_path = await future
        bundle = b""
        if bundle_path:
            # Held whole from here to the node: never more than the bound.
            refused = oversized(
                "the bundle of the stage's start commit",
                Path(bundle_path).stat().st_size,
                launch["max_bundle"],
            )
            if refused is not None:
                return refused
            bundle = Path(bundle_path).read_bytes()
        try:
            started = await actor.start.remote(launch, bundle)
        except Exception as exc:
            if _lost(exc):
                raise
            return short(exc)
        self._actors[ident] = actor
        if ident in self._stopping:
            actor.stop.remote()
        self.emit("started", id=ident, pid=started["pid"])
        return None

    async def _follow(
        self, ident: str, actor: Any, info: dict[str, Any], launch: dict[str, Any]
    ) -> None:
        """Stream the child's output until its end, then take its work back."""
        while True:
            polled = await actor.poll.remote(POLL_WAIT_SECONDS)
            # Every poll, lines or none: the node's silence is the stall clock.
            items = _wire_items(polled["items"])
            self.emit("items", id=ident, items=items, silent=polled["silent"])
            if polled["ended"] is not None:
                break
        if polled["failure"] is not None:
            # The node lost its child (waiting for it failed): a loss, as a lost node
            # is; nothing of it is collected.
            self.emit("ended", id=ident, failure=polled["failure"], node=info["node"])
            return
        collected = await actor.collect.remote(
            launch["commit"], launch["base"], launch.get("auto_commit"),
            tuple(launch["identity"]), launch["max_bundle"],
        )  # fmt: skip
        size = len(collected["bundle"])
        refused = oversized("the bundle of the work", size, launch["max_bundle"])
        if refused is not None:
            collected = {**collected, "bundle": b"", "error": refused}
        path = ""
        if collected["bundle"]:
            path = str(self._ship_dir / f"{ident.replace('/', '_')}.bundle")
            Path(path).write_bytes(collected["bundle"])
        self.emit(
            "ended",
            id=ident,
            exit_code=polled["ended"],
            tip=collected["tip"],
            uncommitted=collected["uncommitted"],
            bundle=path,
            error=collected["error"],
            node=info["node"],
        )


def _version_refusal(info: dict[str, Any]) -> str | None:
    """Nodes must run this daemon's Sloop: the node's code decides what a stage does."""
    if info["version"] == sloopd.__version__:
        return None
    return (
        f"the Ray node {_node_label(info['node'])} runs Sloop {info['version']}, but this "
        f"daemon is Sloop {sloopd.__version__}: install the same version on every node"
    )


def _options(resources: dict[str, Any]) -> dict[str, Any]:
    """Ray's actor options from the stage's resolved ``resources``."""
    options: dict[str, Any] = {
        "num_cpus": float(resources.get("cpus", 1)),
        "max_restarts": 0,  # a lost stage is the daemon's to retry, never Ray's
        "max_concurrency": 64,  # polls, deliveries and a stop at once
        # Stages spread over the nodes that have their resources (Ray packs them onto one
        # node by default): agent CLIs hold hundreds of MB each.
        "scheduling_strategy": "SPREAD",
    }
    if resources.get("memory"):
        options["memory"] = int(resources["memory"])
    custom = resources.get("custom") or {}
    if custom:
        options["resources"] = {str(k): float(v) for k, v in custom.items()}
    return options


def _wire_items(items: list[list[Any]]) -> list[list[Any]]:
    wired: list[list[Any]] = []
    for item in items:
        if item[0] == "conn":
            data = item[2]
            wired.append(["conn", item[1], None if data is None else messages.encode(data)])
        else:
            wired.append(item)
    return wired


def _lost(exc: BaseException) -> bool:
    return type(exc).__name__ in {"ActorDiedError", "RayActorError", "ActorUnavailableError"}


def _node_label(node: dict[str, str]) -> str:
    return f"{node.get('host', '?')} ({node.get('id', '')[:12]})"


async def _serve(driver: Driver) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=messages.MAX_PIPE_LINE_BYTES)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    keeper = loop.create_task(driver.link.keep())
    try:
        while True:
            line = await reader.readline()
            if not line:
                return  # the daemon is gone: so is everything this driver owns
            with contextlib.suppress(ValueError):
                driver.handle(json.loads(line))
    finally:
        keeper.cancel()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="sloopd-ray-driver")
    parser.add_argument("--address", required=True)
    parser.add_argument("--namespace", default="sloop")
    parser.add_argument("--ship-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    _die_with_parent()
    # The protocol has standard output to itself; anything Ray prints goes to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    driver = Driver(args.address, args.namespace, out, args.ship_dir)
    try:
        asyncio.run(_serve(driver))
    finally:
        with contextlib.suppress(Exception):
            # Not with a cluster that does not answer: the process's end is enough.
            if driver.link.ray is not None and driver.link.connected:
                driver.link.ray.shutdown()


if __name__ == "__main__":
    main()
