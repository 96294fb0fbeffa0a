"""The driver's warm actors: ``StageRoom`` actors made ahead of demand, per resource shape.

A new actor waits for Ray to start a worker process for it (imports, registration:
a second and more on a loaded node) before anything of Sloop's runs.  The driver
(``sloopd.remote.driver``) keeps, per resource shape (a stage's resolved resources:
``cpus``, ``memory``, ``custom``), up to ``warm`` idle actors already created and
answered (``ready``: the worker process is up), so a stage's start on them is the
node's room and sandbox only:

- **made ahead of demand**: ``warm`` of the default shape (``[executor] resources``)
  each time the cluster is said up, and after each take of an idle actor another of
  its shape;
- **taken**: the most recently idle actor of the stage's shape; with none idle but
  one coming (a finished stage's actor being released, one being made), the stage
  waits for it up to ``COMING_WAIT_S``; else it makes its own (cold, as before);
- **given back**: after its stage the actor is released (``StageRoom.release``: the
  stage's child confirmed dead, its room removed, nothing of it kept) and goes back
  idle; one that is not clean, or that the bounds leave no room for, is retired
  (killed), and so is one whose stage was lost or refused by another Sloop;
- **bounded**: idle and coming actors of one shape at most ``2 * warm``, of every
  shape together ``4 * warm``; an actor idle past ``IDLE_S`` is retired (but the
  newest ``warm`` of the default shape, which stay);
- **placement**: Ray places an actor when it is created, and an idle actor holds its
  resources on its node.  A stage whose new actor Ray has not placed within
  ``STARVED_S`` retires every idle actor of other shapes, which may hold what it needs.

``warm = 0`` disables the pool: every stage makes its actor and it is killed after.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from sloopd.remote import messages

# A stage with none idle waits this long for an actor of its shape coming back.
COMING_WAIT_S = 3.0
# An actor made ahead of demand that is not up by then is given up (Ray may find no
# node with its resources: a pending actor would take the next free one from a stage).
FILL_WAIT_S = 30.0
# Idle longer than this: retired (but the default shape's standing ``warm``).
IDLE_S = 60.0
SWEEP_S = 5.0
# A stage's own new actor not placed by then: idle actors of other shapes are retired.
STARVED_S = 5.0

Shape = tuple[float, int | None, tuple[tuple[str, float], ...]]


def shape_of(resources: messages.Resources) -> Shape:
    return (resources.cpus, resources.memory, tuple(sorted(resources.custom.items())))


@dataclass
class _Idle:
    actor: Any
    since: float


class WarmPool:
    """Idle actors by shape; ``create`` makes one (Ray's ``.options(...).remote()``),
    ``retire`` kills one."""

    def __init__(
        self,
        create: Callable[[messages.Resources], Any],
        retire: Callable[[Any], None],
        warm: int,
        default: messages.Resources | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._create = create
        self._retire = retire
        self.warm = max(0, warm)
        self.per_shape = 2 * self.warm
        self.total = 4 * self.warm
        self.default = default
        self._default = None if default is None else shape_of(default)
        self._clock = clock
        self._idle: dict[Shape, list[_Idle]] = {}
        self._coming: dict[Shape, int] = {}  # being made, or being released after a stage
        self._tasks: set[asyncio.Task[None]] = set()
        self._arrived = asyncio.Event()
        self.made = 0  # actors made for the pool, ahead of demand (a count for tests)

    @property
    def enabled(self) -> bool:
        return self.warm > 0

    def idle(self, resources: messages.Resources | None = None) -> int:
        """Idle actors of ``resources``' shape, or of every shape."""
        if resources is not None:
            return len(self._idle.get(shape_of(resources), ()))
        return sum(len(idle) for idle in self._idle.values())

    def create(self, resources: messages.Resources) -> Any:
        """A new actor for one stage (cold)."""
        return self._create(resources)

    async def take(self, resources: messages.Resources) -> tuple[Any, bool]:
        """An actor for a stage of ``resources``, and whether it was warm."""
        shape = shape_of(resources)
        deadline = self._clock() + COMING_WAIT_S
        while self.enabled:
            idle = self._idle.get(shape)
            if idle:
                actor = idle.pop().actor
                self.fill(resources)  # another of its shape, ahead of the next stage
                return actor, True
            left = deadline - self._clock()
            if not self._coming.get(shape) or left <= 0:
                break
            arrived = self._arrived
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(arrived.wait(), left)
        return self.create(resources), False

    async def answer(self, ref: Any, resources: messages.Resources) -> Any:
        """A new actor's first answer (``ref``), however long Ray takes to place it; past
        ``STARVED_S`` idle actors of other shapes are retired, freeing what they hold."""
        future = asyncio.ensure_future(ref)
        done, _ = await asyncio.wait({future}, timeout=STARVED_S)
        if not done:
            self.evict_others(shape_of(resources))
        return await future

    def fill(self, resources: messages.Resources) -> None:
        """Make actors of ``resources``' shape until ``warm`` are idle or coming."""
        shape = shape_of(resources)
        missing = self.warm - len(self._idle.get(shape, ())) - self._coming.get(shape, 0)
        for _ in range(missing):
            if not self._room_for(shape):
                return
            self._coming[shape] = self._coming.get(shape, 0) + 1
            self._spawn(self._make(shape, resources))

    def give_back(
        self, resources: messages.Resources, actor: Any, release: Callable[[], Awaitable[bool]]
    ) -> None:
        """After its stage: ``release`` the actor (whether it is clean), then keep it idle
        or retire it."""
        if not self.enabled:
            self._retire(actor)
            return
        shape = shape_of(resources)
        self._coming[shape] = self._coming.get(shape, 0) + 1
        self._spawn(self._back(shape, actor, release))

    def evict_others(self, shape: Shape | None) -> None:
        """Retire every idle actor not of ``shape`` (None: every one)."""
        for other in [s for s in self._idle if s != shape]:
            for idle in self._idle.pop(other):
                self._retire(idle.actor)

    def clear(self) -> None:
        """Retire every idle actor (the cluster was said down: they may be gone)."""
        self.evict_others(None)

    def shrink(self) -> None:
        """Retire actors idle past ``IDLE_S``, oldest first; the default shape keeps
        its newest ``warm``."""
        now = self._clock()
        for shape, idle in self._idle.items():
            standing = self.warm if shape == self._default else 0
            for entry in idle[: max(0, len(idle) - standing)]:
                if now - entry.since >= IDLE_S:
                    idle.remove(entry)
                    self._retire(entry.actor)

    async def keep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            self.shrink()

    # --- inside ----------------------------------------------------------------------

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _room_for(self, shape: Shape, coming: bool = True) -> bool:
        """Whether one more idle actor of ``shape`` stays within the bounds (with those
        coming, before one is made; without, when one arrives)."""
        mine, every = len(self._idle.get(shape, ())), self.idle()
        if coming:
            mine += self._coming.get(shape, 0)
            every += sum(self._coming.values())
        return mine < self.per_shape and every < self.total

    async def _make(self, shape: Shape, resources: messages.Resources) -> None:
        actor = None
        try:
            actor = self._create(resources)
            answer = await asyncio.wait_for(asyncio.ensure_future(actor.ready.remote()),
                                            FILL_WAIT_S)  # fmt: skip
            messages.decode(answer, messages.Ready)
        except Exception:
            # Not placed in time, lost, or of another Sloop: a stage finds out its own way.
            self._arrive(shape, None)
            if actor is not None:
                self._retire(actor)
            return
        self.made += 1
        self._arrive(shape, actor)

    async def _back(self, shape: Shape, actor: Any, release: Callable[[], Awaitable[bool]]) -> None:
        try:
            clean = await release()
        except Exception:
            clean = False
        self._arrive(shape, actor if clean else None)
        if not clean:
            self._retire(actor)

    def _arrive(self, shape: Shape, actor: Any) -> None:
        """One coming actor of ``shape`` arrived (None: it did not): kept idle when the
        bounds leave room, else retired; waiting stages are woken."""
        self._coming[shape] -= 1
        if actor is not None:
            if self._room_for(shape, coming=False):
                self._idle.setdefault(shape, []).append(_Idle(actor, self._clock()))
            else:
                self._retire(actor)
        arrived, self._arrived = self._arrived, asyncio.Event()
        arrived.set()
