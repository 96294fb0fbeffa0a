"""Webhook delivery: signed POSTs off the event loop's critical path, retried, bounded.

Each target has its own lane: a bounded queue and, while it holds work, one
task that posts its deliveries in order.  A receiver that refuses, errs or
never answers holds up only its own lane: nothing here is awaited by a run,
a verb or another target.  A lane holds at most ``QUEUE_LIMIT`` deliveries;
one more is dropped (and reported), so a dead receiver costs bounded memory.

Every attempt is reported through one callback (``Report``), which records
it as an event; a delivery ends exactly once, ``delivered``, ``failed`` (its
attempts spent, or an answer retrying cannot change) or ``dropped`` (a full
queue, or the daemon stopping).

Signing (docs/operator-guide.md shows a receiver that verifies): with a
secret, each attempt carries ``X-Sloop-Timestamp`` (Unix seconds) and
``X-Sloop-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>." + body)>``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import hmac
import logging
import os
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from sloopd.ops.webhook_targets import BACKOFF_CAP_MS, Target
from sloopd.wire import api

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger(__name__)

QUEUE_LIMIT: Final = 100
USER_AGENT: Final = f"sloopd/{api.SOFTWARE_VERSION}"
DELIVERED, FAILED, DROPPED = "delivered", "failed", "dropped"
OUTCOMES: Final = (DELIVERED, FAILED, DROPPED)
# Answers worth another attempt: the receiver is overloaded or briefly away.
_RETRY_STATUSES: Final = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class Delivery:
    """One body for one target; ``id`` is the same on every attempt (receivers dedupe)."""

    id: str
    target: Target
    on: str
    event: str  # the cursor of the event it tells of
    ticket: str | None
    run: str | None
    body: bytes


@dataclass(frozen=True, slots=True)
class Outcome:
    """One attempt's result, or a drop; ``final`` says how the delivery ended, if it did."""

    delivery: Delivery
    attempt: int
    status: int | None = None
    error: str | None = None
    retry_in_ms: int | None = None
    final: str | None = None
    elapsed_ms: int = 0

    @property
    def kind(self) -> str:
        return "notify_delivered" if self.final == DELIVERED else "notify_failed"

    def data(self) -> dict[str, Any]:
        """The event's data: the target's host, never its URL (the path may be a secret)."""
        row: dict[str, Any] = {
            "target": self.delivery.target.index,
            "host": self.delivery.target.host,
            "on": self.delivery.on,
            "event": self.delivery.event,
            "delivery": self.delivery.id,
            "attempt": self.attempt,
            "status": self.status,
            "ms": self.elapsed_ms,
        }
        if self.final != DELIVERED:
            row |= {
                "error": self.error,
                "retry_in_ms": self.retry_in_ms,
                "dropped": self.final == DROPPED,
            }
        return row


Report = Callable[[Outcome], None]


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def headers_for(delivery: Delivery, timestamp: int) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Sloop-Delivery": delivery.id,
        "X-Sloop-Event": delivery.on,
    }
    secret = delivery.target.secret
    if secret is not None:
        headers["X-Sloop-Timestamp"] = str(timestamp)
        headers["X-Sloop-Signature"] = signature(secret, timestamp, delivery.body)
    return headers


def describe(exc: BaseException, timeout_ms: int) -> str:
    """A short cause that names no URL (aiohttp's own messages may)."""
    import aiohttp

    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout_ms} ms"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"TLS certificate refused: {exc.certificate_error.__class__.__name__}"
    if isinstance(exc, aiohttp.ClientConnectorSSLError | ssl.SSLError):
        return "TLS handshake failed"
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return "host name not resolved"
    if isinstance(exc, aiohttp.ClientConnectorError):
        code = exc.os_error.errno
        return "connect failed: " + (os.strerror(code) if code else exc.os_error.__class__.__name__)
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the receiver closed the connection without an answer"
    if isinstance(exc, aiohttp.ClientOSError) and exc.errno:
        return os.strerror(exc.errno)
    if isinstance(exc, OSError) and exc.errno in (errno.ECONNRESET, errno.EPIPE):
        return os.strerror(exc.errno)
    return exc.__class__.__name__


def _retry_after_ms(value: str | None) -> int | None:
    """A ``Retry-After`` of whole seconds (the date form is ignored), capped."""
    if value is None or not value.strip().isdigit():
        return None
    return min(BACKOFF_CAP_MS, int(value.strip()) * 1000)


@dataclass
class _Lane:
    pending: deque[Delivery] = field(default_factory=deque)
    task: asyncio.Task[None] | None = None
    attempts_made: int = 0  # of pending[0], the delivery in flight


class Deliveries:
    """Every target's lane, and the one HTTP client session they share."""

    def __init__(self, report: Report, queue_limit: int = QUEUE_LIMIT) -> None:
        self.report = report
        self.queue_limit = queue_limit
        self._lanes: dict[Target, _Lane] = {}
        self._session: aiohttp.ClientSession | None = None
        self.closing = False

    def pending(self) -> int:
        return sum(len(lane.pending) for lane in self._lanes.values())

    def submit(self, delivery: Delivery) -> None:
        """Queue ``delivery`` on its target's lane; never waits."""
        if self.closing:
            self._drop(delivery, 0, "the daemon is stopping")
            return
        lane = self._lanes.setdefault(delivery.target, _Lane())
        if len(lane.pending) >= self.queue_limit:
            self._drop(delivery, 0, f"queue full ({self.queue_limit} deliveries wait)")
            return
        lane.pending.append(delivery)
        if lane.task is None:
            lane.task = asyncio.get_running_loop().create_task(self._drain(delivery.target, lane))

    async def close(self, grace_s: float) -> int:
        """Give pending deliveries ``grace_s`` to finish, then drop the rest; how many."""
        self.closing = True
        tasks = [lane.task for lane in self._lanes.values() if lane.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)
        dropped = 0
        for lane in list(self._lanes.values()):
            task = lane.task
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            made = lane.attempts_made
            while lane.pending:
                self._drop(lane.pending.popleft(), made, "the daemon stopped")
                made, dropped = 0, dropped + 1
        self._lanes.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None
        return dropped

    def _drop(self, delivery: Delivery, attempts: int, why: str) -> None:
        log.warning("notification to %s dropped: %s", delivery.target.host, why)
        self.report(Outcome(delivery, attempts, error=why, final=DROPPED))

    async def _drain(self, target: Target, lane: _Lane) -> None:
        try:
            while lane.pending:
                lane.attempts_made = 0
                await self._deliver(lane.pending[0], lane)
                lane.pending.popleft()
        finally:
            lane.task = None
            if not lane.pending and self._lanes.get(target) is lane:
                del self._lanes[target]

    async def _deliver(self, delivery: Delivery, lane: _Lane) -> None:
        target = delivery.target
        for attempt in range(1, target.attempts + 1):
            lane.attempts_made = attempt
            started = time.monotonic()
            status, error, retry_after = await self._attempt(delivery)
            elapsed = int((time.monotonic() - started) * 1000)
            if status is not None and 200 <= status < 300:
                self.report(Outcome(delivery, attempt, status, final=DELIVERED, elapsed_ms=elapsed))
                return
            retryable = status is None or status in _RETRY_STATUSES
            if attempt == target.attempts or not retryable:
                self.report(
                    Outcome(delivery, attempt, status, error, final=FAILED, elapsed_ms=elapsed)
                )
                log.warning("notification to %s failed: %s", target.host, error)
                return
            wait = max(target.retry_delay_ms(attempt), retry_after or 0)
            self.report(Outcome(delivery, attempt, status, error, wait, elapsed_ms=elapsed))
            await asyncio.sleep(wait / 1000)

    async def _attempt(self, delivery: Delivery) -> tuple[int | None, str | None, int | None]:
        """(status, error, Retry-After ms) of one POST; the body is never read."""
        import aiohttp  # here, not at the top: a daemon without [[notify]] never loads it

        target = delivery.target
        headers = headers_for(delivery, int(time.time()))
        # Redirects are not followed: a receiver cannot bounce the daemon's POST (and
        # its signature) to another host.
        timeout = aiohttp.ClientTimeout(total=target.timeout_ms / 1000)
        try:
            async with self.session().post(
                target.url,
                data=delivery.body,
                headers=headers,
                allow_redirects=False,
                timeout=timeout,
            ) as response:
                status = response.status
                retry_after = _retry_after_ms(response.headers.get("Retry-After"))
        except (TimeoutError, aiohttp.ClientError, OSError, ssl.SSLError) as exc:
            return None, describe(exc, target.timeout_ms), None
        if 200 <= status < 300:
            return status, None, None
        if 300 <= status < 400:
            return status, f"HTTP {status}: redirects are not followed", None
        return status, f"HTTP {status}", retry_after

    def session(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._session is None:
            # A fresh connection per delivery (force_close): nothing half-read lingers,
            # and a receiver's keep-alive quirks cannot wedge a lane.  No proxy or
            # netrc from the environment (trust_env=False): the URL says where it goes.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True, limit=16),
                headers={"User-Agent": USER_AGENT},
                trust_env=False,
            )
        return self._session
