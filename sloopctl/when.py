"""WHEN arguments of ``--at``: a duration from now (``20m``) or an RFC 3339 time.

The daemon only knows epoch milliseconds (``trigger.at_ms``); the client does
the conversion so the wire stays free of time-zone and calendar questions.

A duration here is ``sloopd.wire.api.parse_duration_ms``: the one grammar of every
duration an operator writes, ``sloop.toml``'s keys (``stall_after = "20m"``) too, so a
duration that works in one works in the other.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Final

from sloopd.wire.api import parse_duration_ms

# RFC 3339 date-time; seconds may be left out, and an offset is required
# because a naive time would silently mean different things on different hosts.
_RFC3339_RE: Final = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))$"
)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)

HELP: Final = (
    "WHEN is a duration from now (30s, 10m, 2h, 1d, 1h30m) "
    "or an RFC 3339 time (2026-12-01T09:00Z, 2026-12-01T09:00:00+01:00)."
)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def parse_rfc3339_ms(text: str) -> int | None:
    """Epoch milliseconds of an RFC 3339 time; None when it is not one.

    Raises ValueError for a well-formed string naming an impossible date, so the
    message can say which.
    """
    match = _RFC3339_RE.match(text.strip())
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
    if zulu:
        tz = UTC
    else:
        offset = timedelta(hours=int(off_h), minutes=int(off_m))
        if offset >= timedelta(hours=24):
            raise ValueError(f"time zone offset out of range in {text!r}")
        tz = timezone(-offset if sign == "-" else offset)
    micros = int((fraction or "0").ljust(6, "0")[:6])
    moment = datetime(
        int(year), int(month), int(day), int(hour), int(minute), int(second or 0), micros, tz
    )
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def parse_when(text: str, now: int | None = None) -> int:
    """Epoch milliseconds for a WHEN argument; ValueError with a readable reason."""
    # A WHEN is one word on the command line: "1h 30m" is a mistake, not a duration.
    if not any(c.isspace() for c in text.strip()):
        try:
            duration = parse_duration_ms(text, largest_first=True)
        except ValueError:
            pass
        else:
            return (now_ms() if now is None else now) + duration
    try:
        at = parse_rfc3339_ms(text)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a valid time: {exc}") from None
    if at is None:
        raise ValueError(f"{text!r} is neither a duration nor an RFC 3339 time. {HELP}")
    if at < 0:
        raise ValueError(f"{text!r} is before 1970")
    return at
