"""The gateway's followers against both kinds of daemon: one that holds a request
(long-poll) and one from before long-poll (which refuses ``wait_ms``/``since``).

The peer is a scripted operator socket, so both contracts can be checked whatever
the daemon of this build does; the browser tests run them against the real one.
What is asserted is what matters to the daemon and the browser: an update arrives
promptly either way, a holding daemon is not polled, an old one is polled at the
fallback's pace, and one follower serves every subscriber.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from sloopctl.web import feeds
from sloopctl.web.feeds import Feeds, Subscription
from sloopctl.web.link import Link
from tests.support.daemon import short_tmpdir


@dataclass
class ScriptedDaemon:
    """An operator socket answering ``show`` and ``logs`` like either kind of daemon."""

    long_poll: bool
    records: list[dict[str, Any]] = field(default_factory=list)
    epoch: int = 1
    calls: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)
    # (when the request that carried them was received, the texts it answered with)
    deliveries: list[tuple[float, list[str]]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, text: str) -> None:
        cursor = str(len(self.records) + 1)
        self.records.append({"cursor": cursor, "stream": "stdout", "text": text})
        self.epoch += 1
        self.changed.set()
        self.changed = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while line := await reader.readline():
                request = orjson.loads(line)
                asked = time.monotonic()
                self.calls.append((asked, request["verb"], request["args"]))
                reply = await self.answer(request["verb"], request["args"])
                texts = [r["text"] for r in reply.get("data", {}).get("records", [])]
                if texts:
                    self.deliveries.append((asked, texts))
                writer.write(orjson.dumps({"id": request["id"], **reply}) + b"\n")
                await writer.drain()
        writer.close()

    async def answer(self, verb: str, args: dict[str, Any]) -> dict[str, Any]:
        held = {"wait_ms", "since"} & set(args)
        if held and not self.long_poll:
            name = sorted(held)[-1]
            error = {"code": "invalid_arguments", "message": "unknown", "details": {"field": name}}
            return {"ok": False, "error": error}
        if verb == "show":
            if "since" in args and self.epoch <= args["since"]:
                await self.hold(args["wait_ms"])
            data: dict[str, Any] = {"kind": "dashboard", "runs": [], "count": len(self.records)}
            if self.long_poll:
                data["epoch"] = self.epoch
            return {"ok": True, "data": data}
        after = int(args.get("after") or 0)
        if "wait_ms" in args and len(self.records) <= after:
            await self.hold(args["wait_ms"])
        page = self.records[after:]
        cursor = str(len(self.records))
        data = {"records": page, "next_cursor": cursor, "complete": True, "terminal": False}
        return {"ok": True, "data": data}

    async def hold(self, wait_ms: int) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.changed.wait(), wait_ms / 1000)


def decoded(item: bytes) -> tuple[str, Any]:
    head, _, rest = item.partition(b"\n")
    return head.decode().removeprefix("event: "), orjson.loads(rest.strip().removeprefix(b"data: "))


async def next_of(sub: Subscription, name: str, timeout: float = 5.0) -> Any:
    while True:
        event, data = decoded(await asyncio.wait_for(sub.queue.get(), timeout))
        if event == name:
            return data


async def with_daemon(long_poll: bool, scenario: Any) -> ScriptedDaemon:
    folder = short_tmpdir()
    socket = Path(folder) / "op.sock"
    daemon = ScriptedDaemon(long_poll)
    server = await asyncio.start_unix_server(daemon.handle, str(socket))
    registry = Feeds(Link(socket))
    try:
        await scenario(daemon, registry)
    finally:
        await registry.close()
        server.close()
        await server.wait_closed()
        socket.unlink(missing_ok=True)
        Path(folder).rmdir()
    return daemon


def logs_calls(daemon: ScriptedDaemon, since: float) -> list[dict[str, Any]]:
    return [args for at, verb, args in daemon.calls if verb == "logs" and at >= since]


def test_a_holding_daemon_is_long_polled_and_never_polled() -> None:
    async def scenario(daemon: ScriptedDaemon, registry: Feeds) -> None:
        feed = registry.logs("R1", None)
        first, second = feed.subscribe(), feed.subscribe()
        for sub in (first, second):  # what each is sent on joining: the buffer, empty
            assert (await next_of(sub, "records"))["records"] == []
        await asyncio.sleep(0.3)
        quiet_since = time.monotonic()
        await asyncio.sleep(1.5)  # nothing new: the follower waits inside one held request
        assert len(logs_calls(daemon, quiet_since)) <= 1
        daemon.add("hello")
        added = time.monotonic()
        for sub in (first, second):
            assert [r["text"] for r in (await next_of(sub, "records"))["records"]] == ["hello"]
        # Pushed when it happened, not at a poll: the request that carried it was
        # already held when the line was added (an order, not a clock bound).
        assert [asked < added for asked, texts in daemon.deliveries if "hello" in texts] == [True]
        assert all("wait_ms" in args for args in logs_calls(daemon, quiet_since))
        assert feed.mode == "long_poll"
        assert registry.polls.refused == set()
        assert [(f["key"], f["subscribers"]) for f in registry.describe()] == [("logs:R1:", 2)]

    asyncio.run(with_daemon(True, scenario))


def test_a_daemon_without_long_poll_is_polled_at_the_fallback_pace() -> None:
    async def scenario(daemon: ScriptedDaemon, registry: Feeds) -> None:
        feed = registry.logs("R1", None)
        sub = feed.subscribe()
        await next_of(sub, "records")
        await asyncio.sleep(1.2)
        assert registry.polls.refused == {"logs"}  # learned once
        counted_since = time.monotonic()
        await asyncio.sleep(2.0)
        polls = logs_calls(daemon, counted_since)
        assert 1 <= len(polls) <= 3  # about one a second: POLL_S
        assert not any("wait_ms" in args for args in polls)  # never asked again
        daemon.add("hello")
        data = await next_of(sub, "records", timeout=feeds.POLL_S + 2)
        assert [r["text"] for r in data["records"]] == ["hello"]
        assert feed.mode == "polling"

    asyncio.run(with_daemon(False, scenario))


def test_show_waits_on_the_epoch_or_falls_back_without_one() -> None:
    async def holding(daemon: ScriptedDaemon, registry: Feeds) -> None:
        sub = registry.show(None).subscribe()
        assert (await next_of(sub, "show"))["count"] == 0
        await asyncio.sleep(0.5)
        daemon.add("x")
        assert (await next_of(sub, "show", timeout=1.0))["count"] == 1
        shows = [args for _, verb, args in daemon.calls if verb == "show"]
        assert shows[0] == {}
        assert all(a.get("since") for a in shows[1:])

    asyncio.run(with_daemon(True, holding))

    async def polled(daemon: ScriptedDaemon, registry: Feeds) -> None:
        sub = registry.show(None).subscribe()
        assert (await next_of(sub, "show"))["count"] == 0
        daemon.add("x")
        assert (await next_of(sub, "show", timeout=feeds.POLL_S + 2))["count"] == 1
        assert "show" in registry.polls.refused
        shows = [args for _, verb, args in daemon.calls if verb == "show"]
        assert all("since" not in a for a in shows)  # no epoch: never asked to hold

    asyncio.run(with_daemon(False, polled))
