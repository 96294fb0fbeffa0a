"""When does a vendor's limit lift?  Reset times read from an agent's message.

CLIs name the reset in many shapes: epoch seconds or milliseconds, ISO
timestamps, clock times in the host's zone ("resets 3pm"), relative spans
("try again in 2h 5m", "retryDelay": "57s"), and ``Retry-After`` seconds.
Anything implausible reads as "no reset time", so the caller's configured
default applies instead of a misreading closing the gate.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Final
from zoneinfo import ZoneInfo

_SECOND_MS: Final = 1000
_MINUTE_MS: Final = 60 * _SECOND_MS
_HOUR_MS: Final = 60 * _MINUTE_MS
_DAY_MS: Final = 24 * _HOUR_MS
_PAST_SLACK_MS: Final = _DAY_MS
"""A reset at most this far in the past is still reported (it has simply passed)."""
_MAX_AHEAD_MS: Final = 32 * _DAY_MS
"""A reset further ahead than any vendor's monthly window is a misreading.

A wrong number must not close the gate for years; the caller falls back to its
configured default instead.
"""
_CLOCK_GRACE: Final = timedelta(hours=1)
"""A clock time this recently passed means "now", not "tomorrow".

CLIs print the reset rounded ("resets 3pm") in a clock that may differ from
ours by a little; reading 3pm at 3:05pm as tomorrow would pause the repository
for a day when the limit has already lifted.
"""


_PIPE_EPOCH: Final = re.compile(r"\|\s*(\d{13}|\d{10})(?!\d)")
_RESET_EPOCH: Final = re.compile(
    # Bounded runs, not \w* and \s*[:=]?\s*: on "resetresetreset…" or "reset" and
    # 16 Ki spaces those backtrack quadratically (seconds on one line).
    r"reset\w{0,24}[\"']?\s{0,8}[:=]?\s{0,8}(?:(?:at|on)\s{1,8})?(\d{13}|\d{10})(?!\d)",
    re.IGNORECASE,
)
_ISO: Final = re.compile(
    r"\b(?:reset\w*|until|at|after)[\"']?\W{0,4}"
    r"(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})?)(?![\d:])",
    re.IGNORECASE,
)
_MONTHS: Final = tuple(
    ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
)
_WEEKDAYS: Final = tuple(["mon", "tue", "wed", "thu", "fri", "sat", "sun"])
_CLOCK: Final = re.compile(
    r"""
    \b(?:resets?|at|until)\s+
    (?:(?P<wday>mon|tue|wed|thu|fri|sat|sun)[a-z]*\.?,?\s+)?
    (?:(?P<mon>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+
       (?P<day>\d{1,2})(?:st|nd|rd|th)?,?\s+(?:(?P<year>\d{4}),?\s+)?(?:at\s+)?)?
    (?<!\d)(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?(?::(?P<second>\d{2}))?
    (?:\s*(?P<ampm>[ap])\.?m\b\.?)?(?![\d:])
    (?:\s*\((?P<zone>[^()]{1,64})\)|\s+(?P<bare>UTC|GMT)\b)?
    """,
    re.IGNORECASE | re.VERBOSE,
)
_UNIT: Final = (
    r"(?:milliseconds?|msecs?|ms|days?|d|hours?|hrs?|h|minutes?|mins?|m"
    r"|seconds?|secs?|s|weeks?|w)(?![a-z])"
)
_AMOUNT: Final = r"\d{1,9}(?:\.\d{1,12})?"
_RELATIVE: Final = re.compile(
    rf"(?<!retrying )(?<![\w-])(?:(?:in|after|resets?)\s+|retry_?delay[\"':=\s]{{1,5}})"
    rf"(?P<span>(?:{_AMOUNT}\s*{_UNIT}[\s,]*(?:and\s+)?)+)",
    re.IGNORECASE,
)
_PART: Final = re.compile(rf"({_AMOUNT})\s*({_UNIT})", re.IGNORECASE)
_RETRY_AFTER: Final = re.compile(r"retry[-_ ]after\W{1,3}(\d{1,9})(?![\d.]|\s*[a-z])", re.I)
_UNIT_MS: Final = {"ms": 1, "d": _DAY_MS, "h": _HOUR_MS, "m": _MINUTE_MS, "s": _SECOND_MS}
_ZONE_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_+-]*(?:/[A-Za-z0-9_+-]+)*")

_ANSI: Final = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean_line(line: str) -> str:
    """The line as a person would read it: no colour codes or control characters."""
    return _CONTROL.sub("", _ANSI.sub("", line)).strip()


_Reader = Callable[[str, int, tzinfo], int | None]


def parse_reset(line: str, now_ms: int, tz: tzinfo | None = None) -> int | None:
    """When the line says the limit lifts, in epoch milliseconds; None if it does not say.

    Understands, in this order: epoch seconds or milliseconds after a pipe
    (``limit reached|1767225600``) or after "reset" (``"resetsAt":1767225600``),
    an ISO timestamp after "reset/until/at", a clock time ("resets 3pm",
    "at 17:30", "try again at Dec 29th, 2025 10:15 PM", optionally followed by a
    zone in parentheses) taken as its next occurrence, and a relative delay
    ("in 20s", "try again in 2 days 3 hours", "after 1h30m", "Retry-After: 30").
    ``tz`` is the zone for clock times that name none or name an unknown one
    (UTC when None).  A clock time passed less than an hour ago is returned as
    is: the limit has lifted already.  Answers more than a day in the past or
    more than 32 days ahead are treated as misreadings.  Never raises.
    """
    zone = tz if tz is not None else UTC
    text = clean_line(line)
    readers: tuple[_Reader, ...] = (
        _read_pipe_epoch,
        _read_reset_epoch,
        _read_iso,
        _read_clock,
        _read_relative,
        _read_retry_after,
    )
    for reader in readers:
        try:
            value = reader(text, now_ms, zone)
        except (ValueError, OverflowError, OSError, KeyError):
            value = None
        if value is not None and now_ms - _PAST_SLACK_MS <= value <= now_ms + _MAX_AHEAD_MS:
            return value
    return None


def _epoch_ms(digits: str) -> int:
    value = int(digits)
    return value if len(digits) == 13 else value * 1000


def _first_plausible(values: Iterable[int], now_ms: int) -> int | None:
    for value in values:
        if now_ms - _PAST_SLACK_MS <= value <= now_ms + _MAX_AHEAD_MS:
            return value
    return None


def _read_pipe_epoch(text: str, now_ms: int, zone: tzinfo) -> int | None:
    return _first_plausible((_epoch_ms(m[1]) for m in _PIPE_EPOCH.finditer(text)), now_ms)


def _read_reset_epoch(text: str, now_ms: int, zone: tzinfo) -> int | None:
    return _first_plausible((_epoch_ms(m[1]) for m in _RESET_EPOCH.finditer(text)), now_ms)


def _read_iso(text: str, now_ms: int, zone: tzinfo) -> int | None:
    for match in _ISO.finditer(text):
        try:
            moment = datetime.fromisoformat(match[1])
        except ValueError:
            continue
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=zone)
        return round(moment.timestamp() * 1000)
    return None


def _read_clock(text: str, now_ms: int, zone: tzinfo) -> int | None:
    for match in _CLOCK.finditer(text):
        moment = _clock_time(match)
        if moment is None:
            continue
        where = _zone(match["zone"] or match["bare"], zone)
        now = datetime.fromtimestamp(now_ms / 1000, where)
        at = _next_at(match, moment, now)
        if match["minute"] is not None and match["second"] is None:
            # "resets 8:01am" is printed to the minute: the limit lasts to the end of
            # it.  Read as 8:01:00, the gate reopened early, and once that minute
            # had begun the reset looked past and the default cooldown applied.
            at += timedelta(minutes=1)
        return round(at.timestamp() * 1000)
    return None


def _clock_time(match: re.Match[str]) -> time | None:
    """The time of day a clock match names; None when it is not one ("at 5 places")."""
    hour = int(match["hour"])
    minute = int(match["minute"] or 0)
    second = int(match["second"] or 0)
    ampm = (match["ampm"] or "").lower()
    if not ampm and match["minute"] is None:
        return None
    if ampm:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if ampm == "p" else 0)
    if hour > 23 or minute > 59 or second > 59:
        return None
    return time(hour, minute, second)


def _next_at(match: re.Match[str], moment: time, now: datetime) -> datetime:
    """The first date-and-time the match names that is not (much) in the past."""
    earliest = now - _CLOCK_GRACE
    zone = now.tzinfo
    if match["mon"]:
        month = _MONTHS.index(match["mon"].lower()[:3]) + 1
        day = int(match["day"])
        if match["year"]:
            return datetime.combine(date(int(match["year"]), month, day), moment, zone)
        candidate = datetime.combine(date(now.year, month, day), moment, zone)
        if candidate < earliest:
            candidate = datetime.combine(date(now.year + 1, month, day), moment, zone)
        return candidate
    step = timedelta(days=1)
    first = now.date()
    if match["wday"]:
        step = timedelta(days=7)
        first += timedelta(days=(_WEEKDAYS.index(match["wday"].lower()) - now.weekday()) % 7)
    candidate = datetime.combine(first, moment, zone)
    if candidate < earliest:
        candidate = datetime.combine(first + step, moment, zone)
    return candidate


def _zone(name: str | None, fallback: tzinfo) -> tzinfo:
    """The named IANA zone; the fallback when there is none or we do not know it."""
    if not name:
        return fallback
    name = name.strip()
    if name.upper() in ("UTC", "GMT", "Z"):
        return UTC
    if not _ZONE_NAME.fullmatch(name):
        return fallback
    try:
        return ZoneInfo(name)
    except (KeyError, ValueError, OSError):
        return fallback


def _read_relative(text: str, now_ms: int, zone: tzinfo) -> int | None:
    for match in _RELATIVE.finditer(text):
        total = 0.0
        for amount, unit in _PART.findall(match["span"]):
            total += float(amount) * _unit_ms(unit)
        return now_ms + round(total)
    return None


def _unit_ms(unit: str) -> int:
    unit = unit.lower()
    if unit.startswith(("ms", "msec", "milli")):
        return 1
    if unit.startswith("w"):
        return 7 * _DAY_MS
    return _UNIT_MS[unit[0]]


def _read_retry_after(text: str, now_ms: int, zone: tzinfo) -> int | None:
    match = _RETRY_AFTER.search(text)
    return None if match is None else now_ms + int(match[1]) * _SECOND_MS
