"""Followers of one run's log, for benchmark 8: long-polling, polling, and idle waiters.

A follower is one connection asking ``logs {run, after}`` again and again from the
cursor of its last page, as ``sloopctl logs -f`` does: with ``wait_ms`` it asks once and
the daemon holds the request until a record arrives; without, it sleeps ``poll_s``
between pages.  The agent stamps every line it prints with the wall clock
(``tick <n> <time_ns>``); a follower subtracts that stamp from the wall clock when the
reply is in, so a latency covers the agent's write, the daemon's capture, storage and
wake-up, the reply and the follower's read.  Every follower runs in this process on one
uvloop, and ``Watch`` counts, per tick, how many followers have seen it.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from benchmarks.common import cpu_seconds, request_line

TICK_TIMEOUT_S = 5.0  # a tick no follower saw by then is missed
MAX_MISSED = 3  # then the phase stops: the daemon is not waking its followers
READ_LIMIT = 1 << 24  # a page of 100 long records fits
# sloopctl's pauses between polls before long-poll (0.6.0 sloopctl/polling.py): 0.2 s
# after news, growing to 0.5 s while nothing is new.
POLL_S = 0.2
POLL_IDLE_S = 0.5


def parse_tick(text: str) -> tuple[int, int] | None:
    """(tick number, the agent's wall clock in ns) from a ``tick <n> <ns>`` line."""
    parts = text.split()
    if len(parts) != 3 or parts[0] != "tick":
        return None
    return int(parts[1]), int(parts[2])


@dataclass
class Watch:
    """What the followers of one phase saw."""

    followers: int
    latencies: list[float] = field(default_factory=list)  # seconds, one per (tick, follower)
    printed: int = 0  # lines the agent was asked to print
    requests: int = 0
    empty_replies: int = 0  # pages without a tick
    early_empty: int = 0  # ... answered well before wait_ms with nothing new
    missed: int = 0
    seen: dict[int, int] = field(default_factory=dict)
    waiting: dict[int, asyncio.Event] = field(default_factory=dict)

    def expect(self, tick: int) -> asyncio.Event:
        event = self.waiting[tick] = asyncio.Event()
        return event

    def saw(self, tick: int, latency: float) -> None:
        self.latencies.append(latency)
        self.seen[tick] = self.seen.get(tick, 0) + 1
        event = self.waiting.get(tick)
        if event is not None and self.seen[tick] >= self.followers:
            event.set()


async def follow(
    path: Path, run: str, cursor: str, wait_ms: int | None, poll_s: float, watch: Watch
) -> None:
    """Follow the run's log from ``cursor`` until cancelled."""
    reader, writer = await asyncio.open_unix_connection(str(path), limit=READ_LIMIT)
    request_id = 0
    try:
        while True:
            args: dict[str, Any] = {"run": run, "after": cursor}
            if wait_ms is not None:
                args["wait_ms"] = wait_ms
            request_id += 1
            writer.write(request_line("logs", args, request_id))
            asked = time.monotonic()
            line = await reader.readline()
            received = time.time_ns()
            if not line:
                raise EOFError("the daemon closed a follower's connection")
            reply = orjson.loads(line)
            if not reply.get("ok"):
                raise RuntimeError(f"logs while following: {reply.get('error')}")
            data = reply["data"]
            watch.requests += 1
            ticks = 0
            for record in data["records"]:
                tick = parse_tick(record["text"])
                if tick is not None:
                    ticks += 1
                    watch.saw(tick[0], (received - tick[1]) / 1e9)
            if not ticks:
                watch.empty_replies += 1
                if wait_ms and time.monotonic() - asked < wait_ms / 2000:
                    watch.early_empty += 1
            cursor = data["next_cursor"]
            if data["complete"] and wait_ms is None:
                await asyncio.sleep(poll_s)
    finally:
        writer.close()


@dataclass(frozen=True)
class Phase:
    followers: int
    wait_ms: int | None  # None: poll every poll_s
    ticks: int
    gap: tuple[float, float]  # seconds between a tick seen by all and the next one
    poll_s: float = 0.0


async def run_phase(
    path: Path, run: str, cursor: str, fifo: int, first_tick: int, phase: Phase
) -> Watch:
    """Start the followers at ``cursor``, make the agent print ``phase.ticks`` lines one
    at a time (a byte into its fifo each), each once every follower saw the last."""
    watch = Watch(phase.followers)
    tasks = [
        asyncio.create_task(follow(path, run, cursor, phase.wait_ms, phase.poll_s, watch))
        for _ in range(phase.followers)
    ]
    try:
        await asyncio.sleep(0.3)  # connected, and (long-poll) their requests held
        for tick in range(first_tick, first_tick + phase.ticks):
            event = watch.expect(tick)
            os.write(fifo, b"t")
            watch.printed += 1
            try:
                await asyncio.wait_for(event.wait(), TICK_TIMEOUT_S)
            except TimeoutError:
                watch.missed += 1
                if watch.missed >= MAX_MISSED:
                    break
            for task in tasks:
                if task.done():
                    task.result()  # a follower that failed fails the phase
            # Long-poll: time for every follower to ask again (its next request held).
            # Polling: a random phase against the poll interval.
            await asyncio.sleep(random.uniform(*phase.gap))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return watch


@dataclass(frozen=True)
class IdleCost:
    cpu: float  # the daemon's CPU seconds inside the window
    seconds: float
    answered: int  # replies that came back inside the window (a held request has none)


async def _hold(path: Path, request: bytes, answered: list[int]) -> None:
    reader, writer = await asyncio.open_unix_connection(str(path), limit=READ_LIMIT)
    try:
        writer.write(request)
        while await reader.readline():
            answered[0] += 1
    finally:
        writer.close()


async def idle_cost(
    path: Path, run: str, cursor: str, pid: int, waiters: int, seconds: float, mode: str
) -> IdleCost:
    """The daemon's CPU while ``waiters`` connections follow a run that prints nothing.

    ``mode`` "wait": each holds one ``logs {wait_ms}`` request (longer than the window);
    "poll": each polls like a follower without long-poll; "none": no connection at all.
    """
    answered = [0]
    watch = Watch(waiters)
    tasks: list[asyncio.Task[None]] = []
    if mode == "wait":
        request = request_line("logs", {"run": run, "after": cursor, "wait_ms": 60_000})
        tasks = [asyncio.create_task(_hold(path, request, answered)) for _ in range(waiters)]
    elif mode == "poll":
        tasks = [
            asyncio.create_task(follow(path, run, cursor, None, POLL_IDLE_S, watch))
            for _ in range(waiters)
        ]
    try:
        await asyncio.sleep(1.0)  # connected and settled (pollers spread over their pace)
        answered[0], watch.requests = 0, 0
        cpu0 = cpu_seconds(pid)
        await asyncio.sleep(seconds)
        cpu = cpu_seconds(pid) - cpu0
        for task in tasks:
            if task.done():
                task.result()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return IdleCost(cpu, seconds, answered[0] + watch.requests)
