"""WHEN arguments of ``--at``, and the one reading of a duration (``20m``) in Sloop.

The daemon only knows epoch milliseconds (``trigger.at_ms``); the client does
the conversion so the wire stays free of time-zone and calendar questions.

``parse_duration_ms`` is the grammar of every duration an operator writes: a WHEN
here, and each duration key of ``sloop.toml`` (``stall_after = "20m"``), which the
daemon reads through ``sloopd.util.durations``.  It lives in the client because the
two sides can share a module only this way round: ``sloopctl`` may import nothing of
the daemon but the schema module ``sloopd.wire.api`` (which is about the wire, where
every duration is already milliseconds, and is at its size limit), while ``sloopd``
and ``sloopctl`` ship in one distribution, so the daemon can import this module,
which imports nothing but the standard library.  One grammar, so a duration that
works in ``sloop.toml`` works after ``--at`` too.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Final

_UNIT_MS: Final = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1_000, "ms": 1}
# Number-unit parts, largest unit first, each at most once, any case: 1d, 1h30m, 45s,
# 500ms.  (``m(?!s)``: the minutes of ``1m30s``, not the start of ``500ms``.)
_DURATION_RE: Final = re.compile(
    r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+)s)?(?:(\d+)ms)?", re.IGNORECASE
)
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


def parse_duration_ms(text: str) -> int:
    """Milliseconds of a duration like ``1h30m``; ValueError naming ``text`` when it is
    not one.  Spaces between the parts are ignored (``sloop.toml``'s ``"1h 30m"``)."""
    compact = "".join(text.split())
    if not compact:
        raise ValueError("empty duration")
    match = _DURATION_RE.fullmatch(compact)
    if match is None:
        raise ValueError(f"'{text}' is not a duration like 30s, 20m, 2h or 1h30m")
    return sum(
        int(value) * unit
        for value, unit in zip(match.groups(), _UNIT_MS.values(), strict=True)
        if value is not None
    )


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
            duration = parse_duration_ms(text)
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
