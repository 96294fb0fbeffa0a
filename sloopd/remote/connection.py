"""The Ray driver's link to its cluster: connected, probed, and said up or down.

``ClusterLink.keep`` connects and then asks the cluster for its nodes every
``HEALTH_SECONDS``, one question at a time, each in a thread (Ray's calls block).
A question the cluster does not answer within ``PROBE_SECONDS`` (``CONNECT_SECONDS``
for the first connection, which starts Ray's client) is the first sign that it is
gone, and says ``down`` at once: Ray itself would wait 60 s before it gave up and
ended the driver, while the gate stayed open.  A question that fails says ``down``
too; the first one answered after ``down`` says ``up``.

A stage lost mid-run may have been lost with the whole cluster: ``verdict`` waits
for the answer to a fresh question, so the driver says ``down`` before it reports
such a stage lost, and the daemon knows which losses were the cluster's.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import threading
from collections.abc import Callable
from typing import Any

from sloopd.remote import messages

HEALTH_SECONDS = 2.0
RECONNECT_SECONDS = 3.0
# How long the cluster may take to answer before it is said down: generous against a
# loaded host (a question takes milliseconds), far below Ray's own 60 s.
PROBE_SECONDS = 10.0
CONNECT_SECONDS = 30.0

Emit = Callable[[messages.Event], None]


class ClusterLink:
    def __init__(self, address: str, namespace: str, emit: Emit) -> None:
        self.address = address
        self.namespace = namespace
        self._emit = emit
        self.connected = False
        self.up = asyncio.Event()
        self.ray: Any = None
        self.actor_class: Any = None
        self._ever = False  # connected once: later questions get PROBE_SECONDS
        self._pending: asyncio.Future[int] | None = None  # the question in its thread
        self._waiters: list[asyncio.Future[str | None]] = []
        self._wake = asyncio.Event()

    def _connect(self) -> int:
        import ray

        from sloopd.remote.node import StageRoom

        if not ray.is_initialized():
            ray.init(
                address=self.address,
                namespace=self.namespace,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
        self.ray = ray
        self.actor_class = ray.remote(StageRoom)
        nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
        return sum(1 for node in nodes if node.get("Alive"))

    def report_down(self, reason: str) -> None:
        """Said at every sign: the daemon keeps its gate closed while they come."""
        self._emit(messages.Down(reason))
        self.connected = False
        self.up.clear()

    async def keep(self) -> None:
        # Importing Ray takes seconds on a loaded host: not the cluster's time.
        with contextlib.suppress(Exception):  # an import that fails fails each question
            await asyncio.to_thread(importlib.import_module, "ray")
        while True:
            waiters, self._waiters = self._waiters, []
            verdict = await self._ask()
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(verdict)
            pause = HEALTH_SECONDS if verdict is None else RECONNECT_SECONDS
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), pause)
            self._wake.clear()

    async def verdict(self) -> str | None:
        """Whether the cluster answers a question asked from now: None, or why not."""
        waiter: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._wake.set()
        try:
            # Bounded though the keeper answers within CONNECT_SECONDS: a loss is
            # reported, whatever became of the question.
            return await asyncio.wait_for(waiter, 2 * CONNECT_SECONDS)
        except TimeoutError:
            return "no answer to the driver's question"

    async def _ask(self) -> str | None:
        if self._pending is None or self._pending.done():
            # One question at a time: one the cluster left unanswered is waited on
            # again, never joined by another thread blocked the same way.
            self._pending = _in_thread(self._connect)
        limit = PROBE_SECONDS if self._ever else CONNECT_SECONDS
        done, _ = await asyncio.wait({self._pending}, timeout=limit)
        if not done:
            reason = f"the cluster did not answer within {limit:.0f} s"
            self.report_down(reason)
            return reason
        try:
            nodes = self._pending.result()
        except Exception as exc:
            reason = short(exc)
            self.report_down(reason)
            with contextlib.suppress(Exception):
                if self.ray is not None:
                    self.ray.shutdown()
            return reason
        if not self.connected:
            self._emit(messages.Up(nodes))
        self.connected = self._ever = True
        self.up.set()
        return None


def _in_thread(question: Callable[[], int]) -> asyncio.Future[int]:
    """``question()`` in a daemon thread of its own: one the cluster leaves unanswered
    never holds up the driver's exit (a pool's threads are joined at exit)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()

    def settle(result: int | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            assert result is not None
            future.set_result(result)

    def ask() -> None:
        try:
            answer = question()
        except BaseException as exc:  # handed to the loop, which says it down
            outcome: tuple[int | None, BaseException | None] = (None, exc)
        else:
            outcome = (answer, None)
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=ask, name="ray-question", daemon=True).start()
    return future


def short(exc: BaseException) -> str:
    """An exception in a line: a failure inside an actor arrives wrapped with its remote
    traceback, so its cause is said instead."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        exc = cause
    text = " ".join(str(exc).split())
    name = type(exc).__name__
    return f"{name}: {text[:600]}" if text else name
