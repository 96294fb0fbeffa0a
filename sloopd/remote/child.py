"""A child on a Ray node as the run sees it (``stage_io.RunningChild``): ``RemoteChild``.

It is placed by the driver, ships its start commit as a bundle of what the chosen
node lacks, hands each batch of the child's lines to the same ``on_lines`` a local
child's go to (so the same sink, cursors and limits apply), opens the run's real
worker socket for each connection the agent makes on the node (the daemon checks
the token as for a local child), and on the child's end takes its work back
through ``sloopd.git.bundles``.

Its stall clock is the node's: each report of the driver carries how long the child
has been silent by the node's clock, so a relay slowed on the way (a loaded host) is
not the child's silence; only a relay silent past ``RELAY_GRACE_S`` counts as such.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any, Protocol

from sloopd.git import bundles as shipping
from sloopd.proc.lines import OnLines
from sloopd.proc.stage_io import Collected, Exited, LaunchRefused, Lost, StageEnd, StageLaunch
from sloopd.remote import messages

# How long a stop waits for the node to confirm the child's end (the node's grace
# is 5 s, then SIGKILL; the rest is the poll and the collect).
STOP_CONFIRM_SECONDS = 15.0
# How long a child may wait for a node with its resources (and its checkout there).
PLACEMENT_TIMEOUT_S = 600.0
# The driver reports every second or so; a relay delayed up to this long is not the
# child's silence, a longer one is (a relay gone quiet must not keep a stall hidden).
RELAY_GRACE_S = 30.0


class RemoteMetrics(Protocol):
    """What the executor counts (``sloopd.ops.metrics.Metrics`` implements it)."""

    def shipped(self, direction: str, size: int) -> None: ...

    def relayed(self, seconds: float) -> None: ...


class Executor(Protocol):
    """What a child needs of ``sloopd.remote.launcher.RayExecutor``: its driver's pipe,
    where bundles go, what is counted, and whether the cluster is known down."""

    ship_dir: Path
    metrics: RemoteMetrics
    down_reason: str | None

    def register(self, child: RemoteChild) -> str: ...

    def send(self, op: messages.Op) -> None: ...


class NodeClock:
    """The stall clock of a child on a node: the silence its node last reported, plus
    only what of the time since that report exceeds ``RELAY_GRACE_S``."""

    def __init__(self, now: float) -> None:
        self._reported_at = now
        self._silent = 0.0
        self._credit = 0.0  # the daemon's own pauses, taken off (ActiveRun.credit_pause)

    def report(self, silent: float, now: float) -> None:
        self._reported_at, self._silent, self._credit = now, max(0.0, silent), 0.0

    def _raw(self, now: float) -> float:
        return self._silent + max(0.0, now - self._reported_at - RELAY_GRACE_S)

    def last_output(self, now: float) -> float:
        return now - max(0.0, self._raw(now) - self._credit)

    def set_last_output(self, value: float, now: float) -> None:
        self._credit = self._raw(now) - max(0.0, now - value)


class RemoteChild:
    """A child on a Ray node, as the run sees it (``stage_io.RunningChild``)."""

    def __init__(
        self, executor: Executor, launch: StageLaunch, remote: messages.RemoteLaunch,
        on_lines: OnLines, repo: Path,
    ) -> None:  # fmt: skip
        self.executor = executor
        self.launch = launch
        self.remote = remote
        self.on_lines = on_lines
        self.repo = repo
        self._clock = NodeClock(time.monotonic())
        self.started = asyncio.Event()
        self._placed: messages.Node | None = None  # where it was placed
        self._end: asyncio.Future[messages.Ended] = asyncio.get_running_loop().create_future()
        self._connections: dict[int, _Connection] = {}
        self._shipped: Path | None = None
        self.ident = executor.register(self)

    @property
    def node(self) -> dict[str, str] | None:
        """Where it was placed, as the runs layer reads it (``{"id", "host"}``: its live
        node in the run view, the children-running metric's label)."""
        return _mapping(self._placed)

    @property
    def last_output_monotonic(self) -> float:
        # No stall while the child is placed and started: its silence starts with it.
        now = time.monotonic()
        return self._clock.last_output(now) if self.started.is_set() else now

    @last_output_monotonic.setter
    def last_output_monotonic(self, value: float) -> None:
        self._clock.set_last_output(value, time.monotonic())

    def began(self) -> None:
        """The child runs on its node: its clocks start now."""
        self._clock = NodeClock(time.monotonic())
        self.started.set()
        self.forget_shipped()

    def placed(self, event: messages.Placed) -> None:
        self._placed = event.node
        asyncio.get_running_loop().create_task(self._ship(list(event.haves)))

    async def _ship(self, haves: list[str]) -> None:
        try:
            path = await shipping.bundle_for(
                self.repo, self.executor.ship_dir, self.remote.commit, haves,
                self.remote.max_bundle,
            )  # fmt: skip
        except shipping.ShippingError as exc:
            self.executor.send(messages.Stop(self.ident))
            self.ended(messages.Refused(str(exc)))
            return
        if path is not None:
            self.executor.metrics.shipped("to_node", path.stat().st_size)
            self._shipped = path  # removed once the driver has read it (started or ended)
        self.executor.send(messages.Ship(self.ident, str(path or "")))

    def items(self, report: messages.Items) -> None:
        """A report of the driver: what the child said, and how long it has been silent
        since by its node's clock."""
        for item in report.items:
            match item:
                case messages.Lines(stream, texts, split):
                    self.on_lines(stream, list(texts), split)
                case messages.Conn(number, data):
                    self._relay(number, data)
                case messages.Latency(seconds):
                    self.executor.metrics.relayed(seconds)
        self._clock.report(report.silent, time.monotonic())

    def _relay(self, number: int, data: bytes | None) -> None:
        connection = self._connections.get(number)
        if connection is None:
            if self.launch.worker_socket is None:
                return
            connection = self._connections[number] = _Connection(self, number)
        connection.feed(data)

    def answer(self, number: int, data: bytes | None) -> None:
        self.executor.send(messages.Deliver(self.ident, number, data))

    def forget_shipped(self) -> None:
        if self._shipped is not None:
            self._shipped.unlink(missing_ok=True)
            self._shipped = None

    def ended(self, how: messages.Ended) -> None:
        self.forget_shipped()
        for connection in self._connections.values():
            connection.close()
        if not self._end.done():
            self._end.set_result(how)

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
            self.executor.send(messages.Stop(self.ident))
            resources = self.launch.placement.resources if self.launch.placement else {}
            self.ended(messages.Refused(
                f"no Ray node took the stage within {PLACEMENT_TIMEOUT_S:.0f} s "
                f"(it asked for {dict(resources)}): check the cluster's resources"
            ))  # fmt: skip
        return self.started.is_set()

    async def stop(self) -> None:
        self.executor.send(messages.Stop(self.ident))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._end), STOP_CONFIRM_SECONDS)

    async def end(self) -> StageEnd:
        ended = await asyncio.shield(self._end)
        match ended:
            case messages.Refused(reason):
                raise LaunchRefused(reason)
            case messages.Lost(reason, node):
                # The executor learns that the cluster is down before it hears of the
                # stages lost with it (the driver says so first, or its exit does).
                down = self.executor.down_reason is not None
                return Lost(reason, node=_mapping(node or self._placed), cluster_down=down)
            case messages.Unreturned(error, _node):
                raise LaunchRefused(f"the node could not give the work back: {error}")
            case messages.Ran():
                return await self._take(ended)

    async def _take(self, ran: messages.Ran) -> StageEnd:
        """The work a child left on its node, checked and recorded here."""
        placement = self.launch.placement
        assert placement is not None
        try:
            if ran.bundle:
                bundle = Path(ran.bundle)
                self.executor.metrics.shipped("from_node", bundle.stat().st_size)
                tip = await shipping.adopt(
                    self.repo, self.executor.ship_dir, bundle,
                    branch=placement.branch, ref=placement.ref, base=placement.base,
                    limit=placement.max_bundle,
                )  # fmt: skip
            else:
                tip = await shipping.record(self.repo, placement.ref, ran.tip, placement.base)
        except shipping.ShippingError as exc:
            raise LaunchRefused(f"the work from the node was refused: {exc}") from exc
        return Exited(
            exit_code=ran.exit_code,
            work=Collected(tip, tuple(ran.uncommitted)),
            node=_mapping(ran.node or self._placed),
        )


def _mapping(node: messages.Node | None) -> dict[str, str] | None:
    """Where a child ran, as a stage's row says it (``{"id", "host"}``)."""
    return None if node is None else node.as_mapping()


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
