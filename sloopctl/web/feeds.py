"""One follower per feed, fanned out to every browser watching it.

A feed is one view of the daemon a page keeps live: a ``show`` (the dashboard, a
ticket, a run), a run's log (optionally one ``stage#attempt``), or the activity
events. However many browsers watch it, the gateway follows it once, on one
connection of its own, and copies each update to every subscriber: the daemon's
load does not grow with the browsers, and no browser ever polls the socket.

**Long-poll, and the fallback.** A follower asks the daemon to hold the request
until something newer exists: ``logs``/``events`` with ``wait_ms``, ``show`` with
``since`` (the last reply's ``epoch``) and ``wait_ms``. A daemon from before those
arguments answers ``invalid_arguments`` naming ``wait_ms`` or ``since`` (and its
``show`` has no ``epoch``): the gateway learns that once per verb and polls that
verb every ``POLL_S`` instead. That fallback is the whole of it, and it is the
commands' own: the negotiation is ``sloopctl.longpoll``'s and the walk over a log's
or the events' pages ``sloopctl.feedwalk``'s, both free of I/O, so this module only
awaits its connection between their steps.

**Back-pressure.** A subscriber's queue is bounded; one that falls behind gets a
``resync`` message instead of an unbounded backlog, and its page reconnects (and
is sent the feed's buffer again). A feed nobody watches stops after ``LINGER_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from sloopctl.client import ClientError, Reply
from sloopctl.feedwalk import EVENTS, LOGS, FeedWalk, Step
from sloopctl.longpoll import LongPoll, epoch_of
from sloopctl.web.link import Connection, Link
from sloopctl.web.logfile import with_rendered
from sloopd.wire import api

log = logging.getLogger(__name__)

WAIT_MS: Final = 25_000  # how long a long-poll asks the daemon to hold (at most 60000)
POLL_S: Final = 1.0  # the fallback's interval, for a daemon without long-poll
MIN_GAP_S: Final = 0.05  # between two calls of one follower, whatever the daemon answers
LINGER_S: Final = 15.0  # a feed nobody watches is stopped after this
RETRY_MAX_S: Final = 5.0  # the longest wait between reconnects to a daemon that went away
BUFFER: Final = 500  # records (events) a log (event) feed keeps for pages that join late
QUEUE: Final = 256  # messages waiting for one subscriber before it must resync
LOG_TAIL: Final = BUFFER  # a log feed starts at the last BUFFER records of its selector
EVENT_TAIL: Final = 20
MAX_FEEDS: Final = 64
_HOLD_SLACK_S: Final = 10.0  # a held request's reply may come this late and still count


def message(event: str, data: Any) -> bytes:
    """One Server-Sent Event, encoded once for every subscriber (orjson has no newlines)."""
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


@dataclass(eq=False)
class Subscription:
    queue: asyncio.Queue[bytes] = field(default_factory=lambda: asyncio.Queue(QUEUE))
    closed: bool = False


class Stop(Exception):
    """The feed has nothing more to follow (a settled run's log, a refused reference)."""


class Feed:
    """A follower and its subscribers; subclasses say what to follow (``follow``)."""

    def __init__(self, key: str, link: Link, polls: LongPoll) -> None:
        self.key = key
        self.link = link
        self.polls = polls
        self.subscribers: set[Subscription] = set()
        self.mode = "starting"  # then long_poll or polling
        self.daemon_ok = True
        self.refused: bytes | None = None  # the daemon's error answer that stopped the feed
        self._task: asyncio.Task[None] | None = None
        self._linger: asyncio.TimerHandle | None = None
        self.on_idle: Callable[[Feed], None] | None = None

    # -- subscribers -------------------------------------------------------------------

    def subscribe(self) -> Subscription:
        sub = Subscription()
        for item in self.backlog():
            sub.queue.put_nowait(item)
        if self.refused is not None:
            sub.queue.put_nowait(self.refused)
        if not self.daemon_ok:
            sub.queue.put_nowait(message("daemon", {"ok": False}))
        self.subscribers.add(sub)
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self.subscribers.discard(sub)
        if not self.subscribers and self._linger is None:
            self._linger = asyncio.get_running_loop().call_later(LINGER_S, self._idle)

    def _idle(self) -> None:
        self._linger = None
        if not self.subscribers and self.on_idle is not None:
            self.on_idle(self)

    def publish(self, item: bytes) -> None:
        for sub in list(self.subscribers):
            try:
                sub.queue.put_nowait(item)
            except asyncio.QueueFull:
                # Too far behind: drop what waits, tell it to start over, let it go.
                while not sub.queue.empty():
                    sub.queue.get_nowait()
                sub.queue.put_nowait(message("resync", {}))
                sub.closed = True
                self.unsubscribe(sub)

    def backlog(self) -> list[bytes]:
        """What a subscriber that joins now is sent first."""
        return []

    # -- following ----------------------------------------------------------------------

    async def _run(self) -> None:
        connection = self.link.connection()
        delay = 0.5
        try:
            while True:
                try:
                    await self.follow(connection)
                    return
                except ClientError as exc:
                    await connection.close()
                    if self.daemon_ok:
                        log.warning("%s: %s", self.key, exc.message)
                        self.daemon_ok = False
                        self.publish(message("daemon", {"ok": False}))
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, RETRY_MAX_S)
                except Stop:
                    return
        finally:
            await connection.close()

    def answered(self) -> None:
        """A reply came: the daemon is back, if it had gone."""
        if not self.daemon_ok:
            self.daemon_ok = True
            # It may be another build now (an upgrade): learn what it holds afresh.
            self.polls.forget()
            self.publish(message("daemon", {"ok": True}))

    async def call(self, connection: Connection, verb: str, args: dict[str, Any]) -> Reply:
        """One call; a refusal of the long-poll arguments is learned and retried without."""
        held = "wait_ms" in args
        timeout = args["wait_ms"] / 1000 + _HOLD_SLACK_S if held else 30.0
        reply = await connection.call(verb, args, timeout)
        again = self.polls.retry(verb, args, reply)
        if again is not None:
            log.info("the daemon does not hold %s requests: polling every %s s", verb, POLL_S)
            reply = await connection.call(verb, again)
        self.answered()
        if not reply.ok and reply.error.get("code") == api.ErrorCode.DAEMON_UNAVAILABLE:
            # A daemon refusing its store, or one that cannot write now: wait it out.
            raise ClientError(reply.error.get("message", "unavailable"), self.link.socket_path)
        return reply

    async def follow(self, connection: Connection) -> None:
        raise NotImplementedError

    async def wait_between(self, verb: str) -> None:
        """The fallback's pause, or the short gap between held calls."""
        polling = not self.polls.supported(verb)
        self.mode = "polling" if polling else "long_poll"
        await asyncio.sleep(POLL_S if polling else MIN_GAP_S)

    def problem(self, reply: Reply) -> None:
        self.refused = message("problem", reply.error)
        self.publish(self.refused)
        raise Stop

    async def stop(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for sub in list(self.subscribers):
            sub.closed = True
            with contextlib.suppress(asyncio.QueueFull):
                sub.queue.put_nowait(message("resync", {}))


class ShowFeed(Feed):
    """``show`` of a reference (or the dashboard): the latest answer, replaced whole."""

    def __init__(self, key: str, link: Link, polls: LongPoll, ref: str | None) -> None:
        super().__init__(key, link, polls)
        self.ref = ref
        self.latest: bytes | None = None

    def backlog(self) -> list[bytes]:
        return [self.latest] if self.latest is not None else []

    async def follow(self, connection: Connection) -> None:
        base: dict[str, Any] = {} if self.ref is None else {"ref": self.ref}
        epoch: int | None = None
        while True:
            args = {**base, **self.polls.held("show", WAIT_MS, epoch)}
            reply = await self.call(connection, "show", args)
            if not reply.ok:
                self.problem(reply)
            data = reply.data
            epoch = epoch_of(data)
            if epoch is None:
                self.polls.refuse("show")  # no epoch: nothing to wait on
            if isinstance(data, dict) and data.get("kind") == "dashboard":
                await self._add_current_stages(connection, data)
            self._replace(message("show", data))
            await self.wait_between("show")

    def _replace(self, item: bytes) -> None:
        if item != self.latest:
            self.latest = item
            self.publish(item)

    async def _add_current_stages(self, connection: Connection, data: dict[str, Any]) -> None:
        """The dashboard's runs in flight with their running stage (``show`` of each run)."""
        runs = data.get("runs")
        for run in runs if isinstance(runs, list) else []:
            if not isinstance(run, dict) or not isinstance(run.get("id"), str):
                continue
            reply = await self.call(connection, "show", {"ref": run["id"]})
            value = reply.data.get("value") if reply.ok and isinstance(reply.data, dict) else None
            stages = value.get("stages") if isinstance(value, dict) else None
            running = [
                s for s in stages or [] if isinstance(s, dict) and s.get("state") == "running"
            ]
            run["current"] = running[-1] if running else None


class PagedFeed(Feed):
    """A feed read page after page (a log, the events): the commands' walk, awaited here."""

    def walk(self) -> FeedWalk:
        raise NotImplementedError

    def take(self, step: Step, page: dict[str, Any]) -> None:
        """Keep and publish what a page brought."""
        raise NotImplementedError

    def end(self) -> None:
        """The walk is over (a settled run's last page): say so, then stop."""
        self.mode = "ended"
        raise Stop

    async def follow(self, connection: Connection) -> None:
        walk = self.walk()
        while True:
            reply = await self.call(connection, walk.kind.verb, walk.request())
            if not reply.ok:
                self.problem(reply)
            page = reply.data if isinstance(reply.data, dict) else {}
            step = walk.take(page)
            self.take(step, page)
            if step.done:
                self.end()
            if step.caught_up:
                await self.wait_between(walk.kind.verb)


class LogFeed(PagedFeed):
    """A run's output (one stage selector, or all of it), appended as it comes.

    Each record goes out with ``rendered`` beside its raw ``text`` where an agent
    CLI's event stream says something (``sloopctl.streams``, as ``sloopctl logs``
    prints it), so the page shows what the terminal shows without a renderer of its
    own. The walk outlives a reconnect: after a daemon restart the feed reads on from
    its last cursor, where a new walk's tail would re-send (and re-count) the end.
    """

    def __init__(self, key: str, link: Link, polls: LongPoll, run: str, stage: str | None) -> None:
        super().__init__(key, link, polls)
        self.run = run
        self.stage = stage
        self.records: deque[dict[str, Any]] = deque(maxlen=BUFFER)
        self.ended: bytes | None = None
        self.elided = 0  # matching records before the first one the feed read
        self.rotated = 0  # records read, then pushed out of the buffer by newer ones
        self._walk: FeedWalk | None = None

    def before_buffer(self) -> int:
        """How many matching records come before the buffer's first: what a page lacks."""
        return self.elided + self.rotated

    def backlog(self) -> list[bytes]:
        records = list(self.records)
        first = message("records", {"records": records, "elided": self.before_buffer()})
        return [first] + ([self.ended] if self.ended is not None else [])

    def walk(self) -> FeedWalk:
        if self._walk is None:
            base: dict[str, Any] = {"run": self.run}
            if self.stage is not None:
                base["stage"] = self.stage
            self._walk = FeedWalk(LOGS, base, self.polls, WAIT_MS, tail=LOG_TAIL)
        return self._walk

    def take(self, step: Step, page: dict[str, Any]) -> None:
        if isinstance(page.get("elided"), int) and step.first:
            self.elided = page["elided"]
        if step.items:
            with_rendered(step.items)
            self.rotated += max(0, len(self.records) + len(step.items) - BUFFER)
            self.records.extend(step.items)
            data = {"records": step.items, "elided": self.before_buffer()}
            self.publish(message("records", data))

    def end(self) -> None:
        self.ended = message("end", {"run": self.run})
        self.publish(self.ended)
        super().end()


class EventFeed(PagedFeed):
    """The activity feed (all of it, or one scope's), appended as it comes."""

    def __init__(self, key: str, link: Link, polls: LongPoll, scope: str | None) -> None:
        super().__init__(key, link, polls)
        self.scope = scope
        self.events: deque[dict[str, Any]] = deque(maxlen=BUFFER)
        self._walk: FeedWalk | None = None

    def backlog(self) -> list[bytes]:
        return [message("events", {"events": list(self.events)})]

    def walk(self) -> FeedWalk:
        # As the log's: the walk outlives a reconnect, so a daemon restart reads on from
        # the last cursor instead of sending the tail again into the buffer.
        if self._walk is None:
            base: dict[str, Any] = {} if self.scope is None else {"scope": self.scope}
            self._walk = FeedWalk(EVENTS, base, self.polls, WAIT_MS, tail=EVENT_TAIL)
        return self._walk

    def take(self, step: Step, page: dict[str, Any]) -> None:
        if step.items:
            self.events.extend(step.items)
            self.publish(message("events", {"events": step.items}))


class FeedLimit(Exception):
    """More feeds than ``MAX_FEEDS`` would be followed at once."""


class Feeds:
    """The registry: a feed per key, created on the first subscriber, gone when idle."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.polls = LongPoll()
        self._feeds: dict[str, Feed] = {}
        self._stopping: set[asyncio.Future[None]] = set()

    def show(self, ref: str | None) -> Feed:
        return self._get(f"show:{ref or ''}", lambda key: ShowFeed(key, self.link, self.polls, ref))

    def logs(self, run: str, stage: str | None) -> Feed:
        key = f"logs:{run}:{stage or ''}"
        return self._get(key, lambda k: LogFeed(k, self.link, self.polls, run, stage))

    def events(self, scope: str | None) -> Feed:
        key = f"events:{scope or ''}"
        return self._get(key, lambda k: EventFeed(k, self.link, self.polls, scope))

    def _get(self, key: str, make: Callable[[str], Feed]) -> Feed:
        feed = self._feeds.get(key)
        if feed is None:
            if len(self._feeds) >= MAX_FEEDS:
                raise FeedLimit(f"{MAX_FEEDS} feeds are followed already")
            feed = make(key)
            feed.on_idle = self._forget
            self._feeds[key] = feed
        return feed

    def _forget(self, feed: Feed) -> None:
        if self._feeds.get(feed.key) is feed:
            del self._feeds[feed.key]
            stopping = asyncio.ensure_future(feed.stop())
            self._stopping.add(stopping)
            stopping.add_done_callback(self._stopping.discard)

    def describe(self) -> list[dict[str, Any]]:
        """Each feed followed now: its key, subscribers and whether it long-polls."""
        return [
            {"key": f.key, "subscribers": len(f.subscribers), "mode": f.mode}
            for f in self._feeds.values()
        ]

    async def close(self) -> None:
        feeds, self._feeds = list(self._feeds.values()), {}
        for feed in feeds:
            await feed.stop()
