"""What the daemon says when its Ray cluster cannot be reached: the cause first, bounded.

A driver that exits leaves only its standard error behind, and Ray writes there
first what it says at every start (``SIGTERM handler is not set``, ``Failed to
determine local IP``) and last why it gave up (``Failed to connect to GCS within 60
seconds``).  The gate's reason shows in one line of ``sloopctl status`` and is
cut in short views: it leads with the cause, and start-up warnings are dropped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

# The most characters of a cause kept in a reason (Ray's end of a GCS connection alone
# is ~350, with a link).
MAX_CAUSE: Final = 240
# Ray's C++ log line: "[2026-12-06 08:01:31,666 E 28457 28678] rpc_client.h:204: text"
_NATIVE = re.compile(r"^\[[^\]]*\s([DIWEFC])\s\d+\s\d+\]\s+\S+:\d+:\s*(.*)$")
# Ray's Python log line: "2026-12-06 08:00:24,006\tERROR worker.py:1681 -- text"
_PYTHON = re.compile(r"^\S+ \S+\s+(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\S+ -- (.*)$")
# The last line of a Python traceback: "ConnectionError: text"
_RAISED = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit): .+$")
_GRAVE = frozenset({"E", "F", "C", "ERROR", "CRITICAL"})


def cause_of(lines: Sequence[str]) -> str | None:
    """The last error Ray (or Python) printed in ``lines``, without its log prefix;
    None when there is none (warnings and notes are not a cause)."""
    for line in reversed(lines):
        text = line.strip()
        for pattern in (_NATIVE, _PYTHON):
            match = pattern.match(text)
            if match is not None:
                if match[1] in _GRAVE and match[2].strip():
                    return bounded(match[2])
                break
        else:
            if _RAISED.match(text):
                return bounded(text)
    return None


def driver_exited(code: int | None, stderr: Sequence[str]) -> str:
    """Why the cluster is said unreachable when the driver exits: its cause, then the exit."""
    exited = f"the Ray driver exited with code {code}"
    cause = cause_of(stderr)
    return f"{cause} ({exited})" if cause else exited


def bounded(text: str, limit: int = MAX_CAUSE) -> str:
    """``text`` on one line, at most ``limit`` characters (an ellipsis says it was cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"
