"""Recording fakes of the process groups and of the launcher: nothing is spawned.

``FakeProcessGroups`` stands where ``sloopd.proc.children.ProcessGroups`` does
(the ``Groups`` interface of ``sloopd.proc.launchers``): it records every spawn
(argv, working directory, environment, owner, the sandboxed command line) and
plays each child from a ``Script`` (its lines, its exit, what it does before
exiting) on the event loop, as a real child's output would arrive.
``FakeLauncher`` is a ``Launcher`` (``sloopd.proc.stage_io``) that records every
``StageLaunch`` (argv, the commit, the mounts, the allowlist) and starts its
child through the real ``ChildLauncher`` (no sandbox) over fake groups, so what the groups
record as the environment is what a real child would get.

A test scripts children in the order they start (``script(...)``); a child
with no script left prints nothing and exits 0.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from sloopd.proc.children import ChildSpawnError
from sloopd.proc.launchers import ChildLauncher, LocalChild, Wrap
from sloopd.proc.lines import OnLines
from sloopd.proc.stage_io import LaunchRefused, StageLaunch

# A stopped fake child dies as a real one does of the SIGTERM: -15.
STOPPED_EXIT = -signal.SIGTERM


@dataclass(frozen=True)
class Script:
    """What one fake child does, in order: print ``lines``, ``act``, then exit.

    ``lines`` are (stream, text) pairs, each delivered on its own turn of the loop.
    ``act`` is what the child does before it exits (commit in its checkout, report a
    verdict); it is given the spawn's record.  ``until_stopped``: it then runs
    until it is stopped.  ``refuse``: it cannot be spawned (``ChildSpawnError``).
    """

    lines: tuple[tuple[str, str], ...] = ()
    exit_code: int = 0
    act: Callable[[Spawn], Awaitable[None] | None] | None = None
    until_stopped: bool = False
    refuse: str | None = None


@dataclass
class Spawn:
    """One child the fake groups started, as ``ProcessGroups.spawn`` was asked."""

    argv: list[str]
    cwd: Path
    env: dict[str, str]
    owner: str
    # The command that would have run: bwrap's command line for a sandboxed child.
    command: list[str]
    sandboxed: bool
    child: FakeChild | None = field(default=None, repr=False)


class FakeChild:
    """A child played from its script; ``stop()`` ends it as a SIGTERM would."""

    def __init__(self, spawn: Spawn, script: Script, on_lines: OnLines) -> None:
        self.spawn = spawn
        self.owner = spawn.owner
        self.last_output_monotonic = time.monotonic()
        self.stops = 0
        self.reaped = False
        self._stopped = asyncio.Event()
        self._exit = asyncio.get_running_loop().create_task(self._play(script, on_lines))

    async def _play(self, script: Script, on_lines: OnLines) -> int:
        for stream, text in script.lines:
            await asyncio.sleep(0)  # output arrives on later turns of the loop
            if self._stopped.is_set():
                break
            self.last_output_monotonic = time.monotonic()
            on_lines(stream, [text], False)
        if script.act is not None and not self._stopped.is_set():
            done = script.act(self.spawn)
            if inspect.isawaitable(done):
                await done
        if script.until_stopped:
            await self._stopped.wait()
        return STOPPED_EXIT if self._stopped.is_set() else script.exit_code

    @property
    def stopped(self) -> bool:
        return self.stops > 0

    async def wait(self) -> int:
        return await asyncio.shield(self._exit)

    async def stop(self) -> None:
        self.stops += 1
        self._stopped.set()


class FakeProcessGroups:
    """``ProcessGroups`` that spawns nothing: it records, and plays scripts."""

    def __init__(self, *scripts: Script) -> None:
        self._scripts: deque[Script] = deque(scripts)
        self.spawns: list[Spawn] = []
        self._waiters: list[asyncio.Future[None]] = []

    def script(self, *scripts: Script) -> None:
        """The next children to start, in the order they start."""
        self._scripts.extend(scripts)

    async def spawn(
        self,
        argv: list[str],
        *,
        cwd: Path,
        env: dict[str, str],
        owner: str,
        on_lines: OnLines,
        sandbox: Wrap | None = None,
    ) -> FakeChild:
        script = self._scripts.popleft() if self._scripts else Script()
        if not argv:  # as the real groups refuse it
            raise ChildSpawnError("cannot start a child: empty command")
        if script.refuse is not None:
            raise ChildSpawnError(script.refuse)
        command = sandbox(list(argv), dict(env)) if sandbox is not None else list(argv)
        record = Spawn(list(argv), cwd, dict(env), owner, command, sandbox is not None)
        child = FakeChild(record, script, on_lines)
        record.child = child
        self.spawns.append(record)
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()
        return child

    async def started(self, count: int = 1) -> FakeChild:
        """The ``count``-th child, once it has started (waits for it, on the loop)."""
        while len(self.spawns) < count:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        child = self.spawns[count - 1].child
        assert child is not None
        return child

    async def reap_leftovers(self, child: FakeChild) -> None:
        await child.wait()
        child.reaped = True

    def children(self) -> list[FakeChild]:
        return [spawn.child for spawn in self.spawns if spawn.child is not None]

    def stopped(self) -> list[str]:
        """The owners of the children that were stopped, in the order they started."""
        return [child.owner for child in self.children() if child.stopped]


class FakeLauncher:
    """A ``Launcher`` that records each launch and starts it in fake groups."""

    def __init__(
        self, groups: FakeProcessGroups | None = None, *, problem: str | None = None
    ) -> None:
        self.groups = groups if groups is not None else FakeProcessGroups()
        self.launches: list[StageLaunch] = []
        self.problem = problem  # what unavailable() says
        self.refusals: list[str] = []
        self._host = ChildLauncher(self.groups, None)

    def script(self, *scripts: Script) -> None:
        self.groups.script(*scripts)

    def unavailable(self) -> str | None:
        return self.problem

    async def start(self, launch: StageLaunch, on_lines: OnLines) -> LocalChild[FakeChild]:
        self.launches.append(launch)
        try:
            return await self._host.start(launch, on_lines)
        except LaunchRefused as exc:
            self.refusals.append(str(exc))
            raise
