"""systemd notifications through sdnotify, a no-op without NOTIFY_SOCKET."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable

from sloopd.store import StoreUnavailable
from sloopd.util import quoting

log = logging.getLogger(__name__)


class Notifier:
    def __init__(self) -> None:
        address = os.environ.get("NOTIFY_SOCKET")
        self.enabled = bool(address)
        self._notifier = None
        self._failing = False
        # The STATUS= systemd was last told: a status loop says only what changed.
        self.last_status = ""
        if self.enabled:
            import sdnotify

            # debug=True makes sdnotify raise instead of swallowing errors; we log
            # them, so a broken notify socket is visible, not silent.  It is never
            # fatal: a daemon systemd cannot hear still serves its clients (and
            # systemd, if it is listening at all, reports the missing READY=1).
            try:
                self._notifier = sdnotify.SystemdNotifier(debug=True)
            except Exception as exc:
                self.enabled = False
                log.warning(
                    "NOTIFY_SOCKET=%r cannot be used (%s); not notifying systemd", address, exc
                )

    def send(self, message: str) -> None:
        if self._notifier is None:
            return
        try:
            self._notifier.notify(message)
        except Exception as exc:
            # Once per outage, not at every watchdog ping.
            level = logging.DEBUG if self._failing else logging.WARNING
            self._failing = True
            log.log(level, "systemd notify %r failed: %s", message.split("=")[0], exc)
        else:
            self._failing = False

    def ready(self, status: str) -> None:
        self.last_status = status
        self.send(f"READY=1\nSTATUS={quoting.one_line(status)}")

    def status(self, status: str) -> None:
        self.last_status = status
        # A message is one assignment a line: a line break in the status (a repository
        # path, a store's refusal) would make the rest another assignment systemd obeys.
        self.send(f"STATUS={quoting.one_line(status)}")

    async def keep_informed(self, status: Callable[[], str], every_s: float) -> None:
        """WATCHDOG=1 at half WatchdogSec from the loop itself (a stuck loop trips
        it), and a STATUS= line kept current; a busy store says nothing new."""
        usec = int(os.environ.get("WATCHDOG_USEC", "0") or 0)
        interval = usec / 2_000_000 if usec > 0 else every_s
        while True:
            if usec > 0:
                self.send("WATCHDOG=1")
            try:
                now = status()
            except StoreUnavailable:
                now = self.last_status
            if now != self.last_status:
                self.status(now)
            await asyncio.sleep(min(interval, every_s))

    def reloading(self) -> None:
        self.send(f"RELOADING=1\nMONOTONIC_USEC={time.monotonic_ns() // 1000}")

    def stopping(self) -> None:
        self.send("STOPPING=1")
