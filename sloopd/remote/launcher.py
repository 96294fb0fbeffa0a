"""The daemon's side of the Ray executor: ``RayExecutor`` (the driver process) and
``RayLauncher`` (the ``stage_io.Launcher`` a run's stages placed on Ray use).

The executor starts ``python -m sloopd.remote.driver`` as a child of its own and
reads its events on the loop; the launcher turns a ``StageLaunch`` into a
``RemoteLaunch`` and a ``RemoteChild`` (``sloopd.remote.child``).  A driver that
exits ends every remote stage in flight as lost.

While the daemon runs, a driver runs (``start``): one that exits is replaced
within ``KEEP_SECONDS``, so the cluster is probed also with no stage waiting, and
while the cluster is down the executor tells its gate so every ``KEEP_SECONDS``
(``sloopd.remote.cluster_gate``), whether or not the driver has just said it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sloopd.proc.lines import OnLines
from sloopd.proc.stage_io import LaunchRefused, StageLaunch
from sloopd.remote import messages
from sloopd.remote.child import RemoteChild, RemoteMetrics
from sloopd.remote.codec import kind_of
from sloopd.remote.outage import bounded, driver_exited

log = logging.getLogger(__name__)

STDERR_TAIL_LINES = 20
# How often the executor looks after its driver (replaced when it exited) and, while
# the cluster is down, keeps the gate closed.
KEEP_SECONDS = 5.0
# A reason's cause (outage.MAX_CAUSE) and what follows it, such as the driver's exit.
MAX_DOWN_REASON = 320


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
        warm: int = 0,
        shape: Mapping[str, Any] | None = None,
    ) -> None:
        self.address = address
        self.namespace = namespace
        # The driver's warm pool: idle actors per resource shape, and the default shape
        # it fills when the cluster is up (sloopd.remote.pool).
        self.warm = warm
        self.shape = None if shape is None else messages.Resources.of(shape)
        self.ship_dir = state_dir / "ship"
        self.on_reachable = on_reachable
        # Why the cluster cannot be reached; None while it answers, or before the
        # driver said either way.
        self.down_reason: str | None = None
        self.nodes = 0
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._children: dict[str, RemoteChild] = {}
        self._next = 0
        self._lock = asyncio.Lock()
        self.metrics: RemoteMetrics = metrics or _Uncounted()
        self._closing = False

    async def start(self) -> None:
        """Start the driver (connecting takes seconds: before any claim) and its keeper."""
        await self.ensure()
        self._keeper = asyncio.get_running_loop().create_task(self._keep())

    async def _keep(self) -> None:
        while not self._closing:
            await asyncio.sleep(KEEP_SECONDS)
            if self._closing:
                return
            try:
                await self.ensure()  # a driver that exited is replaced: probing goes on
            except OSError as exc:
                log.warning("cannot start the Ray driver: %s", exc)
                self._set_down(f"the Ray driver cannot start: {exc}")
            if self.down_reason is not None:
                try:
                    self.on_reachable(self.down_reason)  # closed while the cluster is down
                except Exception:  # the store refusing writes: the next round tries again
                    log.exception("cannot keep the gate closed for the Ray cluster")

    async def ensure(self) -> None:
        async with self._lock:
            if self._process is not None and self._process.returncode is None:
                return
            if self._reader is not None:
                # The last driver's end is told first (its stages lost, the cluster
                # said down): none of it may fall on the next driver's stages.
                await asyncio.wait({self._reader})
            if self._process is None:
                # No driver of this daemon ran yet: what is in ship/ is a dead one's.
                await asyncio.to_thread(_clear, self.ship_dir)
            shape = [] if self.shape is None else ["--shape", messages.encode(self.shape).decode()]
            self._process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "sloopd.remote.driver",
                "--address", self.address, "--namespace", self.namespace,
                "--ship-dir", str(self.ship_dir), "--warm", str(self.warm), *shape,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=messages.MAX_PIPE_LINE_BYTES,
            )  # fmt: skip
            self._reader = asyncio.get_running_loop().create_task(self._read(self._process))

    def send(self, op: messages.Op) -> None:
        process = self._process
        if process is None or process.stdin is None or process.returncode is not None:
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            process.stdin.write(messages.encode(op) + b"\n")

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None and process.stderr is not None
        said: list[str] = []  # this driver's last words on its standard error
        errors = asyncio.get_running_loop().create_task(_read_stderr(process.stderr, said))
        try:
            while True:
                try:
                    line = await process.stdout.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    continue
                if not line:
                    break
                try:
                    event = messages.decode_event(line)
                except messages.ProtocolError as exc:
                    self._unreadable(exc)
                    continue
                self._on_event(event)
        finally:
            await process.wait()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(errors, 1.0)
            reason = driver_exited(process.returncode, said)
            if not self._closing:  # a stopping daemon closes no gate on its way out
                self._set_down(reason)
            for child in list(self._children.values()):
                child.ended(messages.Lost(reason, None))
            self._children.clear()

    def _set_down(self, reason: str) -> None:
        reason = bounded(reason, MAX_DOWN_REASON)
        if self.down_reason is None:
            log.warning("the Ray cluster at %s cannot be reached: %s", self.address, reason)
        self.down_reason = reason
        self.on_reachable(reason)

    def _on_event(self, event: messages.Event) -> None:
        match event:
            case messages.Up(nodes):
                self.nodes = nodes
                self.down_reason = None
                log.info("the Ray cluster at %s is reachable (%d nodes)", self.address, nodes)
                self.on_reachable(None)
            case messages.Down(reason):
                self._set_down(reason)
            case messages.Placed(ident) if (child := self._children.get(ident)) is not None:
                child.placed(event)
            case messages.Started(ident) if (child := self._children.get(ident)) is not None:
                child.began()
            case messages.Items(ident) if (child := self._children.get(ident)) is not None:
                child.items(event)
            case messages.Finished(ident, ended) if ident in self._children:
                self._children.pop(ident).ended(ended)

    def _unreadable(self, exc: messages.ProtocolError) -> None:
        """An event this daemon cannot read (its driver is its own install: a bug).  The
        end of a child that cannot be read ends it lost, never waited on for good."""
        log.warning("an event of the Ray driver refused: %s", exc)
        if exc.kind == kind_of(messages.Finished) and exc.ident is not None:
            child = self._children.pop(exc.ident, None)
            if child is not None:
                reason = f"the Ray driver's report of the end was unreadable: {exc}"
                child.ended(messages.Lost(reason, None))

    def register(self, child: RemoteChild) -> str:
        self._next += 1
        ident = f"{os.getpid()}-{self._next}"
        self._children[ident] = child
        return ident

    async def close(self) -> None:
        self._closing = True
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
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


async def _read_stderr(stream: asyncio.StreamReader, said: list[str]) -> None:
    """Keep the last lines a driver writes on its standard error in ``said``."""
    while True:
        line = await stream.readline()
        if not line:
            return
        text = line.decode("utf-8", "replace").rstrip()
        if text:
            said.append(text)
            del said[:-STDERR_TAIL_LINES]
            log.debug("ray driver: %s", text)


def _clear(folder: Path) -> None:
    if folder.is_dir():
        for entry in folder.iterdir():
            if entry.is_file() and not entry.is_symlink():
                entry.unlink(missing_ok=True)


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
        remote = remote_launch(
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
        resources = messages.Resources.of(placement.resources)
        self.executor.send(messages.Start(child.ident, remote, resources))
        return child


def remote_launch(
    launch: StageLaunch,
    *,
    base: str,
    branch: str,
    auto_commit: str | None,
    identity: tuple[str, str],
    repository: str,
    environ: Mapping[str, str],
    max_bundle: int,
) -> messages.RemoteLaunch:
    """The node's value of ``launch``: its host files read now, its variables' values taken."""
    prompt = launch.prompt_file.read_bytes() if launch.prompt_file is not None else None
    home_files = {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in sorted(launch.home.iterdir())
        if entry.is_file() and not entry.is_symlink()
    }
    return messages.RemoteLaunch(
        owner=launch.owner,
        commit=launch.commit,
        base=base,
        branch=branch,
        argv=launch.argv,
        limits=launch.limits,
        variables=dict(launch.variables),
        passed=launch.passed,
        # The passed names' values, and the daemon's PATH (the node keeps the folders of
        # it that exist there: sloopd.remote.node.node_path).
        values={name: environ[name] for name in (*launch.passed, "PATH") if name in environ},
        ro_mounts=launch.ro_mounts,
        rw_mounts=launch.rw_mounts,
        token=launch.token,
        token_file=launch.token_file is not None,
        token_env=launch.token_env,
        prompt=prompt,
        home_files=home_files,
        network=launch.network,
        auto_commit=auto_commit,
        identity=identity,
        repository=repository,
        max_bundle=max_bundle,
    )
