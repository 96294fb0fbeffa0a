"""The daemon's side of the Ray executor: ``RayExecutor`` (the driver process) and
``RayLauncher`` (the ``stage_io.Launcher`` a run's stages placed on Ray use).

The executor starts ``python -m sloopd.remote.driver`` as a child of its own and
reads its events on the loop.  The launcher turns a ``StageLaunch`` into a
``RemoteLaunch``, ships the start commit as a bundle of what the chosen node
lacks, hands each batch of the child's lines to the same ``on_lines`` a local
child's go to (so the same sink, cursors and limits apply), opens the run's real
worker socket for each connection the agent makes on the node (the daemon checks
the token as for a local child), and on the child's end takes its work back
through ``sloopd.git.bundles``.  A driver that exits ends every remote stage
in flight as lost; the next start starts a new driver.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import orjson

from sloopd.git import bundles as shipping
from sloopd.proc.lines import OnLines
from sloopd.proc.stage_io import LaunchRefused, StageEnd, StageLaunch
from sloopd.remote import messages

log = logging.getLogger(__name__)

# How long a stop waits for the node to confirm the child's end (the node's grace
# is 5 s, then SIGKILL; the rest is the poll and the collect).
STOP_CONFIRM_SECONDS = 15.0
STDERR_TAIL_LINES = 20
# How long a child may wait for a node with its resources (and its checkout there).
PLACEMENT_TIMEOUT_S = 600.0


class RemoteMetrics(Protocol):
    """What the executor counts (``sloopd.ops.metrics.Metrics`` implements it)."""

    def shipped(self, direction: str, size: int) -> None: ...

    def relayed(self, seconds: float) -> None: ...


class _Uncounted:
    def shipped(self, direction: str, size: int) -> None:
        pass

    def relayed(self, seconds: float) -> None:
        pass


class RayExecutor:
    """The driver process and the reachability of the cluster it talks to."""

    def __init__(
        self,
        address: str,
        namespace: str,
        state_dir: Path,
        on_reachable: Callable[[str | None], None] = lambda _reason: None,
        metrics: RemoteMetrics | None = None,
    ) -> None:
        self.address = address
        self.namespace = namespace
        self.ship_dir = state_dir / "ship"
        self.on_reachable = on_reachable
        self.down_reason: str | None = f"connecting to the Ray cluster at {address}"
        self.nodes = 0
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._children: dict[str, RemoteChild] = {}
        self._next = 0
        self._stderr: list[str] = []
        self._lock = asyncio.Lock()
        self.metrics: RemoteMetrics = metrics or _Uncounted()
        self._closing = False

    async def ensure(self) -> None:
        async with self._lock:
            if self._process is not None and self._process.returncode is None:
                return
            if self._process is None:
                # No driver of this daemon ran yet: what is in ship/ is a dead one's.
                await asyncio.to_thread(_clear, self.ship_dir)
            self._process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "sloopd.remote.driver",
                "--address", self.address, "--namespace", self.namespace,
                "--ship-dir", str(self.ship_dir),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=messages.MAX_PIPE_LINE_BYTES,
            )  # fmt: skip
            self._reader = asyncio.get_running_loop().create_task(self._read(self._process))

    def send(self, op: dict[str, Any]) -> None:
        process = self._process
        if process is None or process.stdin is None or process.returncode is not None:
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            process.stdin.write(orjson.dumps(op) + b"\n")

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None and process.stderr is not None
        errors = asyncio.get_running_loop().create_task(self._read_stderr(process.stderr))
        try:
            while True:
                try:
                    line = await process.stdout.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    continue
                if not line:
                    break
                try:
                    event = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                self._on_event(event)
        finally:
            await process.wait()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(errors, 1.0)
            tail = " | ".join(self._stderr[-3:])
            reason = f"the Ray driver exited with code {process.returncode}" + (
                f": {tail}" if tail else ""
            )
            if not self._closing:  # a stopping daemon closes no gate on its way out
                self._set_down(reason)
            for child in list(self._children.values()):
                child.ended({"lost": reason})
            self._children.clear()

    async def _read_stderr(self, stream: asyncio.StreamReader) -> None:
        while True:
            line = await stream.readline()
            if not line:
                return
            text = line.decode("utf-8", "replace").rstrip()
            if text:
                self._stderr = [*self._stderr[-STDERR_TAIL_LINES:], text]
                log.debug("ray driver: %s", text)

    def _set_down(self, reason: str) -> None:
        if self.down_reason is None:
            log.warning("the Ray cluster at %s cannot be reached: %s", self.address, reason)
        self.down_reason = reason
        self.on_reachable(reason)

    def _on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("ev")
        if kind == "up":
            self.nodes = int(event.get("nodes", 0))
            self.down_reason = None
            log.info("the Ray cluster at %s is reachable (%d nodes)", self.address, self.nodes)
            self.on_reachable(None)
            return
        if kind == "down":
            self._set_down(str(event.get("reason")))
            return
        child = self._children.get(str(event.get("id")))
        if child is None:
            return
        if kind == "placed":
            child.placed(event)
        elif kind == "started":
            child.started.set()
            child.forget_shipped()
        elif kind == "items":
            child.items(event.get("items") or [])
        elif kind == "ended":
            self._children.pop(child.ident, None)
            child.ended(event)

    def register(self, child: RemoteChild) -> str:
        self._next += 1
        ident = f"{os.getpid()}-{self._next}"
        self._children[ident] = child
        return ident

    async def close(self) -> None:
        self._closing = True
        process = self._process
        if process is None or process.returncode is not None:
            return
        if process.stdin is not None:
            process.stdin.close()  # the driver exits; Ray kills the actors it owned
        try:
            await asyncio.wait_for(process.wait(), 10.0)
        except TimeoutError:
            process.kill()
            await process.wait()


def _clear(folder: Path) -> None:
    if folder.is_dir():
        for entry in folder.iterdir():
            if entry.is_file() and not entry.is_symlink():
                entry.unlink(missing_ok=True)


class RemoteChild:
    """A child on a Ray node, as the run sees it (``stage_io.RunningChild``)."""

    def __init__(
        self, executor: RayExecutor, launch: StageLaunch, remote: messages.RemoteLaunch,
        on_lines: OnLines, repo: Path,
    ) -> None:  # fmt: skip
        self.executor = executor
        self.launch = launch
        self.remote = remote
        self.on_lines = on_lines
        self.repo = repo
        self._last_output = time.monotonic()
        self.started = asyncio.Event()
        self.node: dict[str, str] | None = None  # where it was placed: {"id", "host"}
        self._end: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._connections: dict[int, _Connection] = {}
        self._shipped: Path | None = None
        self.ident = executor.register(self)

    @property
    def last_output_monotonic(self) -> float:
        # No stall while the child is placed and started: its silence starts with it.
        return self._last_output if self.started.is_set() else time.monotonic()

    @last_output_monotonic.setter
    def last_output_monotonic(self, value: float) -> None:
        self._last_output = value

    def placed(self, event: dict[str, Any]) -> None:
        self.node = event.get("node")
        asyncio.get_running_loop().create_task(self._ship(list(event.get("haves") or [])))

    async def _ship(self, haves: list[str]) -> None:
        try:
            path = await shipping.bundle_for(
                self.repo, self.executor.ship_dir, self.remote.commit, haves,
                self.remote.max_bundle,
            )  # fmt: skip
        except shipping.ShippingError as exc:
            self.executor.send({"op": "stop", "id": self.ident})
            self.ended({"refused": str(exc)})
            return
        if path is not None:
            self.executor.metrics.shipped("to_node", path.stat().st_size)
            self._shipped = path  # removed once the driver has read it (started or ended)
        self.executor.send({"op": "ship", "id": self.ident, "bundle": str(path or "")})

    def items(self, items: list[list[Any]]) -> None:
        for item in items:
            if item[0] == "lines":
                self.last_output_monotonic = time.monotonic()
                self.on_lines(item[1], item[2], bool(item[3]))
            elif item[0] == "conn":
                self._relay(int(item[1]), item[2])
            elif item[0] == "latency":
                self.executor.metrics.relayed(float(item[1]))

    def _relay(self, number: int, data: str | None) -> None:
        connection = self._connections.get(number)
        if connection is None:
            if self.launch.worker_socket is None:
                return
            connection = self._connections[number] = _Connection(self, number)
        connection.feed(None if data is None else messages.decode(data))

    def answer(self, number: int, data: bytes | None) -> None:
        self.executor.send(
            {"op": "deliver", "id": self.ident, "conn": number,
             "data": None if data is None else messages.encode(data)}
        )  # fmt: skip

    def forget_shipped(self) -> None:
        if self._shipped is not None:
            self._shipped.unlink(missing_ok=True)
            self._shipped = None

    def ended(self, event: dict[str, Any]) -> None:
        self.forget_shipped()
        for connection in self._connections.values():
            connection.close()
        if not self._end.done():
            self._end.set_result(event)

    async def wait_started(self) -> bool:
        started = asyncio.ensure_future(self.started.wait())
        ended: asyncio.Future[Any] = asyncio.shield(self._end)
        try:
            await asyncio.wait(
                [started, ended], timeout=PLACEMENT_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            started.cancel()
        if not self.started.is_set() and not self._end.done():
            # No node with the resources asked for took it: said, never waited on forever.
            self.executor.send({"op": "stop", "id": self.ident})
            resources = self.launch.placement.resources if self.launch.placement else {}
            self.ended(
                {"refused": f"no Ray node took the stage within {PLACEMENT_TIMEOUT_S:.0f} s "
                 f"(it asked for {dict(resources)}): check the cluster's resources"}
            )  # fmt: skip
        return self.started.is_set()

    async def stop(self) -> None:
        self.executor.send({"op": "stop", "id": self.ident})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._end), STOP_CONFIRM_SECONDS)

    async def end(self) -> StageEnd:
        event = await asyncio.shield(self._end)
        node = event.get("node") or self.node
        if event.get("refused"):
            raise LaunchRefused(str(event["refused"]))
        if event.get("lost"):
            return StageEnd(exit_code=-9, node=node, lost=str(event["lost"]))
        if event.get("error"):
            raise LaunchRefused(f"the node could not give the work back: {event['error']}")
        placement = self.launch.placement
        assert placement is not None
        tip = str(event["tip"])
        try:
            if event.get("bundle"):
                bundle = Path(str(event["bundle"]))
                self.executor.metrics.shipped("from_node", bundle.stat().st_size)
                tip = await shipping.adopt(
                    self.repo, self.executor.ship_dir, bundle,
                    branch=placement.branch, ref=placement.ref, base=placement.base,
                    limit=placement.max_bundle,
                )  # fmt: skip
            else:
                tip = await shipping.record(self.repo, placement.ref, tip, placement.base)
        except shipping.ShippingError as exc:
            raise LaunchRefused(f"the work from the node was refused: {exc}") from exc
        return StageEnd(
            exit_code=int(event["exit_code"]),
            commit=tip,
            uncommitted=tuple(event.get("uncommitted") or ()),
            node=node,
        )


class _Connection:
    """One agent connection on the node, opened to the run's real worker socket here."""

    def __init__(self, child: RemoteChild, number: int) -> None:
        self.child = child
        self.number = number
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._pump())

    def feed(self, data: bytes | None) -> None:
        self._queue.put_nowait(data)

    def close(self) -> None:
        self._task.cancel()

    async def _pump(self) -> None:
        socket_path = self.child.launch.worker_socket
        assert socket_path is not None
        writer: asyncio.StreamWriter | None = None
        answers: asyncio.Task[None] | None = None
        try:
            reader, writer = await asyncio.open_unix_connection(str(socket_path), limit=1 << 20)
            answers = asyncio.get_running_loop().create_task(self._answers(reader))
            while True:
                data = await self._queue.get()
                if data is None:
                    with contextlib.suppress(OSError):
                        writer.write_eof()
                    break
                writer.write(data)
                await writer.drain()
            await answers
        except (ConnectionError, OSError):
            self.child.answer(self.number, None)
        finally:
            if answers is not None and not answers.done():
                answers.cancel()
            if writer is not None:
                writer.close()

    async def _answers(self, reader: asyncio.StreamReader) -> None:
        while True:
            data = await reader.read(64 * 1024)
            if not data:
                self.child.answer(self.number, None)
                return
            self.child.answer(self.number, data)


class RayLauncher:
    """``stage_io.Launcher`` over a ``RayExecutor``: stages whose placement is ``ray``."""

    def __init__(self, executor: RayExecutor, repo: Path, repository: str) -> None:
        self.executor = executor
        self.repo = repo
        self.repository = repository

    def unavailable(self) -> str | None:
        reason = self.executor.down_reason
        return None if reason is None else f"the Ray cluster cannot be reached: {reason}"

    async def start(self, launch: StageLaunch, on_lines: OnLines) -> RemoteChild:
        placement = launch.placement
        if placement is None:
            raise LaunchRefused("a stage on Ray needs its placement (a bug: it was not given)")
        await self.executor.ensure()
        remote = messages.remote_launch(
            launch,
            base=placement.base,
            branch=placement.branch,
            auto_commit=placement.auto_commit,
            identity=placement.identity,
            repository=self.repository,
            environ=os.environ,
            max_bundle=placement.max_bundle,
        )
        child = RemoteChild(self.executor, launch, remote, on_lines, self.repo)
        self.executor.send(
            {"op": "start", "id": child.ident, "launch": messages.to_json(remote),
             "resources": dict(placement.resources)}
        )  # fmt: skip
        return child
