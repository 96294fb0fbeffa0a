"""systemd notifications through sdnotify, a no-op without NOTIFY_SOCKET."""

from __future__ import annotations

import logging
import os
import time

log = logging.getLogger(__name__)


class Notifier:
    def __init__(self) -> None:
        self.enabled = bool(os.environ.get("NOTIFY_SOCKET"))
        self._notifier = None
        if self.enabled:
            import sdnotify

            # debug=True makes sdnotify raise instead of swallowing errors;
            # we log them, so a broken notify socket is visible, not silent.
            self._notifier = sdnotify.SystemdNotifier(debug=True)

    def send(self, message: str) -> None:
        if self._notifier is None:
            return
        try:
            self._notifier.notify(message)
        except Exception as exc:
            log.warning("systemd notify %r failed: %s", message.split("=")[0], exc)

    def ready(self, status: str) -> None:
        self.send(f"READY=1\nSTATUS={status}")

    def status(self, status: str) -> None:
        self.send(f"STATUS={status}")

    def reloading(self) -> None:
        self.send(f"RELOADING=1\nMONOTONIC_USEC={time.monotonic_ns() // 1000}")

    def stopping(self) -> None:
        self.send("STOPPING=1")
