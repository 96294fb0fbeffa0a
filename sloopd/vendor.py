"""Vendor diagnostics: why did the agent fail, and when may we try again?

When an agent exits non-zero, the run driver hands its last output lines to
:func:`classify`.  The answer decides what Sloop does next: a rate or usage
limit closes the gate until the vendor's reset time (DESIGN "Vendor
diagnostics") instead of burning the ticket's retry budget on an agent that
cannot work; everything else is an ordinary failure with a readable reason.

Choices that follow from that:

* **The last matching line wins.**  Agents print transient errors, retry, and
  recover; only the error nearest the end explains the exit.  Lines are
  scanned backwards, so the common case stops early.
* **One ordered table** (:data:`DEFAULT_PATTERNS`, kept with the rules for
  writing it in ``sloopd.vendor_patterns``).  On a single line the earliest
  pattern wins, so the table runs from the most specific diagnosis to the
  least, and its generic patterns insist on error wording: a false
  ``usage_limit`` would pause the whole repository.
* **Never raise.**  This runs on the failure path of a run; a surprise in the
  text must degrade to ``unknown`` or "no reset time", not crash the driver.

Standard library only: the daemon wires it into the run driver and the gate.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any, Final
from zoneinfo import ZoneInfo

# Re-exported: callers import the table and its vocabulary from this module.
from sloopd.vendor_patterns import CLASSES as CLASSES
from sloopd.vendor_patterns import DEFAULT_PATTERNS as DEFAULT_PATTERNS
from sloopd.vendor_patterns import VENDORS as VENDORS
from sloopd.vendor_patterns import Pattern as Pattern

LIMIT_CLASSES: Final = frozenset({"rate_limited", "usage_limit"})
"""Classes that close the gate, and so the only ones whose reset time is read."""

EVIDENCE_MAX: Final = 500
RESET_LOOKAHEAD_LINES: Final = 5
"""Lines after the evidence searched for a reset time when the evidence names none.

Multi-line errors (Gemini's pretty-printed JSON with ``"retryDelay"``, a limit
notice followed by "Please retry in 57s.") put the time on a later line.
"""

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


class VendorConfigError(Exception):
    """A ``[[vendor.patterns]]`` entry that does not validate; names key and reason."""


@dataclass(frozen=True)
class Diagnosis:
    """What :func:`classify` concluded, with the line that shows why."""

    classification: str
    evidence: str | None
    vendor: str | None
    reset_at_ms: int | None

    def as_json(self) -> dict[str, Any]:
        return {
            "classification": self.classification,
            "evidence": self.evidence,
            "vendor": self.vendor,
            "reset_at_ms": self.reset_at_ms,
        }


UNKNOWN: Final = Diagnosis("unknown", None, None, None)


# --------------------------------------------------------------------------- config

_CONFIG_KEYS: Final = ("classification", "regex", "vendor")
_USABLE: Final = tuple(c for c in CLASSES if c != "unknown")


def patterns_from_config(section: Any) -> tuple[Pattern, ...]:
    """The site's own patterns from sloop.toml's ``[[vendor.patterns]]``, validated.

    The caller classifies with ``user + DEFAULT_PATTERNS``: user patterns are
    tried first so a site can override how a line is read (a proxy that words
    its 429 differently, a vendor we do not know).  ``section`` is the
    ``patterns`` array, or the ``[vendor]`` table holding it, or None; keys of
    ``[vendor]`` other than ``patterns`` belong to the caller.
    """
    if section is None:
        return ()
    if isinstance(section, dict):
        entries = section.get("patterns", [])
    elif isinstance(section, list):
        entries = section
    else:
        raise VendorConfigError("vendor: must be a table")
    if not isinstance(entries, list):
        raise VendorConfigError("vendor.patterns: must be an array of tables")
    return tuple(_config_pattern(entry, f"vendor.patterns[{i}]") for i, entry in enumerate(entries))


def _config_pattern(entry: Any, where: str) -> Pattern:
    if not isinstance(entry, dict):
        raise VendorConfigError(f"{where}: must be a table")
    for key in entry:
        if key not in _CONFIG_KEYS:
            known = ", ".join(_CONFIG_KEYS)
            raise VendorConfigError(f"{where}.{key}: unknown key (known: {known})")
    classification = entry.get("classification")
    if classification is None:
        raise VendorConfigError(f"{where}.classification: required")
    if not isinstance(classification, str) or classification not in _USABLE:
        raise VendorConfigError(
            f"{where}.classification: {classification!r} is not one of {', '.join(_USABLE)}"
        )
    regex = _config_regex(entry.get("regex"), f"{where}.regex")
    vendor = entry.get("vendor")
    if vendor is not None and (not isinstance(vendor, str) or not vendor.strip()):
        raise VendorConfigError(f"{where}.vendor: must be a non-empty string")
    return Pattern(classification, regex, vendor)


def _config_regex(source: Any, where: str) -> re.Pattern[str]:
    if source is None:
        raise VendorConfigError(f"{where}: required")
    if not isinstance(source, str) or not source:
        raise VendorConfigError(f"{where}: must be a non-empty string")
    try:
        compiled = re.compile(source, re.IGNORECASE)
    except (re.error, OverflowError, RecursionError, ValueError) as exc:
        raise VendorConfigError(f"{where}: not a valid regular expression: {exc}") from exc
    if compiled.search("") is not None:
        # It would match every line, so the last line of any output would win.
        raise VendorConfigError(f"{where}: matches the empty string, so it would match every line")
    return compiled


# --------------------------------------------------------------------------- classify

_ANSI: Final = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _clean(line: str) -> str:
    """The line as a person would read it: no colour codes or control characters."""
    return _CONTROL.sub("", _ANSI.sub("", line)).strip()


def classify(
    lines: Iterable[str],
    now_ms: int,
    patterns: Sequence[Pattern] = DEFAULT_PATTERNS,
    tz: tzinfo | None = None,
) -> Diagnosis:
    """Classify a failed agent's output (stdout and stderr lines, in order).

    The last line matching any pattern is the cause; on that line the earliest
    pattern in ``patterns`` decides.  Chunks holding several lines (or ``\\r``
    redraws of a terminal UI) are split first.  For a rate or usage limit,
    ``reset_at_ms`` is read from the evidence line, else from the few lines
    after it; ``tz`` is the zone of clock times that name none (default UTC).
    """
    flat = [part for line in lines for part in line.splitlines()]
    prefilter = _Prefilter(patterns)
    for index in range(len(flat) - 1, -1, -1):
        line = _clean(flat[index])
        if not line:
            continue
        for candidate in prefilter.candidates(line):
            pattern = patterns[candidate]
            match = pattern.regex.search(line)
            if match is None:
                continue
            reset = None
            if pattern.classification in LIMIT_CLASSES:
                following = flat[index + 1 : index + 1 + RESET_LOOKAHEAD_LINES]
                reset = _reset_near(line, following, now_ms, tz)
            return Diagnosis(pattern.classification, _evidence(line, match), pattern.vendor, reset)
    return UNKNOWN


def _reset_near(line: str, following: list[str], now_ms: int, tz: tzinfo | None) -> int | None:
    for candidate in (line, *following):
        reset = parse_reset(candidate, now_ms, tz)
        if reset is not None:
            return reset
    return None


# --------------------------------------------------------------------------- prefilter
#
# Python's regex engine costs a few microseconds per search even when nothing
# matches, and classify() runs some 90 patterns over up to 2000 lines on the
# daemon's event loop.  Most lines contain none of the literal words the
# patterns need, so a substring test rules a pattern out before its search.
# The needles are derived from each regex, so user patterns get the same
# treatment and the table stays the only thing to maintain.

_QUANTIFIERS: Final = frozenset("*+?{")
_CLASS_ESCAPES: Final = frozenset("bBdDsSwWAZntrfva")
_CASE_TWINS: Final = {0x130: "i", 0x131: "i", 0x17F: "s", 0x212A: "k"}
"""The non-ASCII characters that re.IGNORECASE equates with an ASCII letter."""


def _fold(line: str) -> str:
    """The line as the needles see it: every character re.IGNORECASE equates with
    an ASCII letter becomes that lowercase letter."""
    return line.translate(_CASE_TWINS).lower()


class _Prefilter:
    """Which patterns could match a line, judged by substring tests alone."""

    def __init__(self, patterns: Sequence[Pattern]) -> None:
        by_needle: dict[str, list[int]] = {}
        self._always: list[int] = []
        for index, pattern in enumerate(patterns):
            needles = _needles(pattern.regex)
            if needles is None:
                self._always.append(index)
                continue
            for needle in needles:
                by_needle.setdefault(needle, []).append(index)
        self._by_needle = list(by_needle.items())

    def candidates(self, line: str) -> list[int]:
        """Indices of the patterns worth a search, in table order."""
        folded = _fold(line)
        found = set(self._always)
        for needle, indices in self._by_needle:
            if needle in folded:
                found.update(indices)
        return sorted(found)


@functools.lru_cache(maxsize=1024)
def _needles(regex: re.Pattern[str]) -> tuple[str, ...] | None:
    """Lowercase ASCII strings one of which occurs in every match; None when unsure.

    Each top-level alternative contributes its longest run of literal characters
    that no quantifier, class or group interrupts: every match of that
    alternative contains the run.  Anything the scan does not understand
    (verbose mode, ``\x41`` escapes, unbalanced text) means "always search".
    """
    if regex.flags & re.VERBOSE:
        return None
    branches = _split_branches(regex.pattern)
    if branches is None:
        return None
    needles = []
    for branch in branches:
        run = _longest_run(branch)
        if run is None or len(run) < 2:
            return None
        needles.append(run.lower())
    return tuple(needles)


def _split_branches(source: str) -> list[str] | None:
    branches: list[str] = []
    start = index = 0
    while index < len(source):
        char = source[index]
        if char == "\\":
            index += 2
            continue
        if char == "[":
            end = _class_end(source, index)
            if end is None:
                return None
            index = end
            continue
        if char == "(":
            end = _group_end(source, index)
            if end is None:
                return None
            index = end
            continue
        if char == "|":
            branches.append(source[start:index])
            start = index + 1
        index += 1
    branches.append(source[start:])
    return branches


def _class_end(source: str, index: int) -> int | None:
    """The index just past the ``[...]`` class opening at ``index``."""
    index += 1
    if source[index : index + 1] == "^":
        index += 1
    if source[index : index + 1] == "]":
        index += 1
    while index < len(source):
        if source[index] == "\\":
            index += 2
        elif source[index] == "]":
            return index + 1
        else:
            index += 1
    return None


def _group_end(source: str, index: int) -> int | None:
    """The index just past the group opening at ``index``."""
    depth = 0
    while index < len(source):
        char = source[index]
        if char == "\\":
            index += 2
            continue
        if char == "[":
            end = _class_end(source, index)
            if end is None:
                return None
            index = end
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    return None


def _element(branch: str, index: int) -> tuple[str | None, int] | None:
    """The literal character at ``index`` (None for anything else) and the index after it."""
    char = branch[index]
    if char == "\\":
        escaped = branch[index + 1 : index + 2]
        if not escaped:
            return None
        if escaped.isalnum():
            # \d, \b and friends match no fixed text; \x41, \1, \N{...} are not parsed.
            return (None, index + 2) if escaped in _CLASS_ESCAPES else None
        return (escaped if escaped.isascii() else None), index + 2
    if char == "[":
        end = _class_end(branch, index)
        return None if end is None else (None, end)
    if char == "(":
        end = _group_end(branch, index)
        return None if end is None else (None, end)
    if char in _QUANTIFIERS or char in ")|":
        return None
    if char in ".^$" or not char.isascii():
        return None, index + 1
    return char, index + 1


def _skip_quantifier(branch: str, index: int) -> int | None:
    """The index past a quantifier at ``index`` (and its lazy/possessive mark)."""
    if branch[index] == "{":
        end = branch.find("}", index)
        if end < 0:
            return None
        index = end + 1
    else:
        index += 1
    if branch[index : index + 1] in ("?", "+"):
        index += 1
    return index


def _longest_run(branch: str) -> str | None:
    best = run = ""
    index = 0
    while index < len(branch):
        found = _element(branch, index)
        if found is None:
            return None
        literal, index = found
        if index < len(branch) and branch[index] in _QUANTIFIERS:
            literal = None  # optional or repeated: not a fixed part of every match
            skipped = _skip_quantifier(branch, index)
            if skipped is None:
                return None
            index = skipped
        if literal is None:
            best = max(best, run, key=len)
            run = ""
        else:
            run += literal
    return max(best, run, key=len)


def _evidence(line: str, match: re.Match[str]) -> str:
    """The line, or the 500-character window of it that shows the match.

    Stream-JSON lines run to kilobytes and the error may sit deep inside; the
    first 500 characters would show the envelope and hide the reason.
    """
    if len(line) <= EVIDENCE_MAX:
        return line
    start = max(0, min(match.start() - 80, len(line) - EVIDENCE_MAX))
    head = "\u2026" if start > 0 else ""
    end = start + EVIDENCE_MAX - len(head)
    tail = ""
    if end < len(line):
        tail = "\u2026"
        end -= 1
    return head + line[start:end] + tail


# --------------------------------------------------------------------------- reset time

_PIPE_EPOCH: Final = re.compile(r"\|\s*(\d{13}|\d{10})(?!\d)")
_RESET_EPOCH: Final = re.compile(
    r"reset\w*[\"']?\s*[:=]?\s*(?:(?:at|on)\s+)?(\d{13}|\d{10})(?!\d)", re.IGNORECASE
)
_ISO: Final = re.compile(
    r"\b(?:reset\w*|until|at|after)[\"']?\W{0,4}"
    r"(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})?)(?![\d:])",
    re.IGNORECASE,
)
_MONTHS: Final = tuple("jan feb mar apr may jun jul aug sep oct nov dec".split())
_WEEKDAYS: Final = tuple("mon tue wed thu fri sat sun".split())
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
    text = _clean(line)
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
        return round(_next_at(match, moment, now).timestamp() * 1000)
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
