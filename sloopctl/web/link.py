"""The gateway's calls to the operator socket, from its event loop.

The same envelope, the same reply checks and the same error classes as
``sloopctl.client`` (``decode_reply``; ``DaemonNotRunning``, ``DaemonHungUp``…),
over ``asyncio`` streams: a long-poll holds its connection for up to a minute,
and the gateway must serve every browser meanwhile.

A follower keeps one ``Connection`` for its feed (requests on one connection are
answered in order, so a held long-poll would hold anything queued behind it);
page reads and actions take a fresh one each, at most ``ONE_SHOT_LIMIT`` at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from pathlib import Path
from typing import Any, Final

import orjson

from sloopctl.client import (
    BUSY_BACKOFF_FIRST_S,
    BUSY_BACKOFF_MAX_S,
    BUSY_RETRY_S,
    LOG_FIX,
    DaemonBusy,
    DaemonHungUp,
    DaemonNotAnswering,
    DaemonNotRunning,
    Reply,
    decode_reply,
)
from sloopd.wire import api

# A reply holds a run's detail or a diff (at most 4 MiB of text, escaped): lines this
# long are expected; asyncio's default line limit is 64 KiB.
READ_LIMIT: Final = 64 * 1024 * 1024
CALL_TIMEOUT_S: Final = 30.0
ONE_SHOT_LIMIT: Final = 16


class Connection:
    """One connection to the operator socket; calls on it are answered in order."""

    def __init__(self, socket_path: Path, *, verbatim: bool = False) -> None:
        self.socket_path = socket_path
        self.verbatim = verbatim
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._next_id = 1

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._reader is not None and self._writer is not None:
            return self._reader, self._writer
        started = time.monotonic()
        delay = BUSY_BACKOFF_FIRST_S
        while True:
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_unix_connection(str(self.socket_path), limit=READ_LIMIT), 5.0
                )
            except BlockingIOError:
                # The daemon's listen backlog is full: nothing was sent, trying again is safe.
                if time.monotonic() - started > BUSY_RETRY_S:
                    raise DaemonBusy(self.socket_path, BUSY_RETRY_S) from None
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(delay * 2, BUSY_BACKOFF_MAX_S)
                continue
            except (FileNotFoundError, NotADirectoryError):
                raise DaemonNotRunning(self.socket_path) from None
            except ConnectionRefusedError:
                raise DaemonNotAnswering(self.socket_path, "connection refused") from None
            except TimeoutError:
                raise DaemonNotAnswering(self.socket_path, "connect timed out", LOG_FIX) from None
            except OSError as exc:
                reason = exc.strerror or str(exc)
                raise DaemonNotAnswering(self.socket_path, reason, LOG_FIX) from None
            self._reader, self._writer = reader, writer
            return reader, writer

    async def call(self, verb: str, args: dict[str, Any], timeout: float = CALL_TIMEOUT_S) -> Reply:
        """One request, one reply (error answers included); ``ClientError`` when none came."""
        request_id = str(self._next_id)
        self._next_id += 1
        line = orjson.dumps(api.request(verb, args, request_id)) + b"\n"
        reader, writer = await self._connect()
        try:
            writer.write(line)
            await writer.drain()
            raw = await asyncio.wait_for(reader.readline(), timeout)
        except TimeoutError:
            await self.close()
            raise DaemonNotAnswering(self.socket_path, "no reply in time", LOG_FIX) from None
        except (ConnectionError, asyncio.IncompleteReadError, ValueError) as exc:
            # ValueError: a line past READ_LIMIT; the stream is unusable after it.
            await self.close()
            raise DaemonHungUp(self.socket_path, str(exc).lower() or "connection lost") from None
        if not raw.endswith(b"\n"):
            await self.close()
            raise DaemonHungUp(self.socket_path, "closed before a reply")
        try:
            return decode_reply(raw[:-1], request_id, self.socket_path, verbatim=self.verbatim)
        except Exception:
            await self.close()
            raise

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()


class Link:
    """Where the daemon is, and the one-shot calls the pages make."""

    def __init__(self, socket_path: Path, *, verbatim: bool = False) -> None:
        self.socket_path = socket_path
        self.verbatim = verbatim
        self._one_shot = asyncio.Semaphore(ONE_SHOT_LIMIT)

    def connection(self) -> Connection:
        return Connection(self.socket_path, verbatim=self.verbatim)

    async def call(self, verb: str, args: dict[str, Any], timeout: float = CALL_TIMEOUT_S) -> Reply:
        async with self._one_shot:
            connection = self.connection()
            try:
                return await connection.call(verb, args, timeout)
            finally:
                await connection.close()
