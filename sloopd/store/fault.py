"""The store's fault: the last write it refused, kept until one commits (dashboard, doctor).

Its own module so that ``db`` stays the connections and the transactions; the
writer keeps one of these while writes are refused, and so does a log sink that
finds no room on the store's filesystem before it even tries (sloopd.core.logwrite).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


@dataclass
class StoreFault:
    """The last failed write, kept until a write succeeds again (dashboard, doctor)."""

    reason: str
    detail: str
    since_ms: int
    failures: int = 1

    def row(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "detail": self.detail,
            "since_ms": self.since_ms,
            "failures": self.failures,
        }


def one_more(fault: StoreFault | None, reason: str, detail: str) -> StoreFault:
    """``fault`` after one more refusal: the latest reason, since the first."""
    if fault is None:
        return StoreFault(reason, detail, int(time.time() * 1000))
    fault.reason, fault.detail = reason, detail
    fault.failures += 1
    return fault
