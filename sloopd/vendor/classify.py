"""Vendor diagnostics: why did the agent fail, and when may we try again?

When an agent exits non-zero, the run driver hands its last output lines to
:func:`classify`.  The answer decides what Sloop does next: a rate or usage
limit closes the gate until the vendor's reset time (DESIGN "Vendor
diagnostics") instead of burning the ticket's retry budget on an agent that
cannot work; everything else is an ordinary failure with a readable reason.

Choices that follow from that:

* **The last matching line wins.**  Agents print transient errors, retry, and
  recover; only the error nearest the end explains the exit.  Lines are
  scanned backwards, so the common case stops early.  One exception: the CLI's
  last structured error event (``sloopd.vendor.structured``), when a pattern knows
  its message, wins over the lines printed after it (a stack dump of the same
  error, whose ``status: 429`` says less than the vendor's sentence).
* **One ordered table** (:data:`DEFAULT_PATTERNS`, kept with the rules for
  writing it in ``sloopd.vendor.patterns``).  On a single line the earliest
  pattern wins, so the table runs from the most specific diagnosis to the
  least, and its generic patterns insist on error wording: a false
  ``usage_limit`` would pause the whole repository.
* **Never raise.**  This runs on the failure path of a run; a surprise in the
  text must degrade to ``unknown`` or "no reset time", not crash the driver.
* **Bounded work.**  It runs on the daemon's event loop, so it reads only the
  bounded tail of the output (``sloopd.vendor.tail``: the last 500 lines, at
  most 256 Ki characters, each line clipped to 16 Ki), and every regex it runs
  is linear in the line (tests/unit/test_vendor_bounds.py feeds them hostile
  lines): a huge output costs a few milliseconds, never seconds.

Standard library only, besides the configuration's error base (``sloopd.util.validate``):
the daemon wires it into the run driver and the gate.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import tzinfo
from typing import Any, Final

from sloopd.util.validate import ConfigError
from sloopd.vendor.patterns import CLASSES, DEFAULT_PATTERNS, Pattern
from sloopd.vendor.prefilter import Prefilter
from sloopd.vendor.reset import clean_line, parse_reset
from sloopd.vendor.retry_hint import RetryHint
from sloopd.vendor.structured import Statement, is_content, json_event, statement_of
from sloopd.vendor.tail import bounded

LIMIT_CLASSES: Final = frozenset({"rate_limited", "usage_limit"})
"""Classes that close the gate, and so the only ones whose reset time is read."""

EVIDENCE_MAX: Final = 500
RESET_LOOKAHEAD_LINES: Final = 5
"""Lines after the evidence searched for a reset time when the evidence names none.

Multi-line errors (Gemini's pretty-printed JSON with ``"retryDelay"``, a limit
notice followed by "Please retry in 57s.") put the time on a later line.
"""


class VendorConfigError(ConfigError):
    """A ``[[vendor.patterns]]`` entry that does not validate; names key and reason."""


@dataclass(frozen=True)
class Diagnosis:
    """What :func:`classify` concluded, with the line that shows why."""

    classification: str
    evidence: str | None
    vendor: str | None
    reset_at_ms: int | None
    # A limit's last retry delay the CLI relayed (sloopd.vendor.retry_hint) when
    # nothing names its reset: a floor for the gate's probe, not a reset time.
    retry_after_ms: int | None = None

    def as_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "classification": self.classification,
            "evidence": self.evidence,
            "vendor": self.vendor,
            "reset_at_ms": self.reset_at_ms,
        }
        if self.retry_after_ms is not None:
            found["retry_after_ms"] = self.retry_after_ms
        return found


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


# How far above a generic status line a CLI's own wording is looked for.
SPECIFIC_LOOKBACK_LINES = 8
# A retry hint this close marks a quota error as a rate limit (see _throttled).
SHORT_RETRY_MS = 10 * 60_000


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
    Only the bounded tail of ``lines`` is read (``sloopd.vendor.tail``).
    """
    flat: list[str] = []
    statements: list[Statement] = []
    stated_at: int | None = None  # where in ``flat`` the last error event's message is
    hint = RetryHint()
    for line in bounded(lines):
        event = json_event(line)
        if event is not None:
            hint.observe(event)
        if event is not None and is_content(event):
            # Read by its structure, not by the words its raw text holds: retry
            # chatter names the error it retries, an assistant event quotes what
            # the agent read.  Neither is the failure.
            continue
        statement = None if event is None else statement_of(event)
        if statement is not None:
            statements.append(statement)
        if statement is not None and statement.message:
            # The error event's own message, unescaped and on one line (so a reset
            # on its next line is read with it), instead of its escaped JSON.
            stated_at = len(flat)
            flat.append(statement.message)
        else:
            flat.extend(line.splitlines())
    prefilter = Prefilter(patterns)
    found = _last_match(flat, len(flat) - 1, 0, prefilter, patterns)
    if found is not None and stated_at is not None and found[0] > stated_at:
        # What a CLI prints after its last error event (Gemini's Node stack dump of the
        # same error, ending "status: 429") does not outrank the event's own words.
        found = _last_match(flat, stated_at, stated_at, prefilter, patterns) or found
    if found is None:
        return _with_hint(_from_fields(statements, now_ms, tz), hint)
    index, line, pattern, match = found
    if pattern.vendor is None:
        # A generic status line ("status: 429") printed after the CLI's own, more
        # specific wording ("You have exhausted your daily quota") does not decide.
        earlier = _last_match(
            flat, index - 1, max(0, index - SPECIFIC_LOOKBACK_LINES), prefilter, patterns, True
        )
        if earlier is not None:
            index, line, pattern, match = earlier
    reset = None
    classification = pattern.classification
    if classification in LIMIT_CLASSES:
        following = flat[index + 1 : index + 1 + RESET_LOOKAHEAD_LINES]
        reset = _reset_near(line, following, now_ms, tz)
        classification = _throttled(classification, line, reset, now_ms)
    return _with_hint(
        Diagnosis(classification, _evidence(line, match), pattern.vendor, reset), hint
    )


def _with_hint(diagnosis: Diagnosis, hint: RetryHint) -> Diagnosis:
    """A limit that names no reset keeps the retry delay its stream relayed, if any."""
    if (
        diagnosis.classification in LIMIT_CLASSES
        and diagnosis.reset_at_ms is None
        and hint.delay_ms is not None
    ):
        return replace(diagnosis, retry_after_ms=hint.delay_ms)
    return diagnosis


def _from_fields(statements: list[Statement], now_ms: int, tz: tzinfo | None) -> Diagnosis:
    """No wording matched: the class the last error event's own fields name, if any.

    Claude Code's ``api_error_type``/``api_error_status`` and Gemini CLI's error
    class name say what failed even when the message is a wording no pattern knows.
    When no field names a class either, the failure is ``unknown`` but not mute: the
    last error event's message is its evidence, so the stage's reason can quote what
    the CLI said instead of only its exit status.
    """
    for statement in reversed(statements):
        if statement.classification is None:
            continue
        evidence = _window(statement.message, 0) or f"{statement.vendor} error event"
        reset = None
        classification = statement.classification
        if classification in LIMIT_CLASSES:
            reset = parse_reset(statement.message, now_ms, tz)
            classification = _throttled(classification, statement.message, reset, now_ms)
        return Diagnosis(classification, evidence, statement.vendor, reset)
    said = next((s for s in reversed(statements) if s.message), None)
    if said is not None:
        return Diagnosis("unknown", _window(said.message, 0), said.vendor, None)
    return UNKNOWN


def _last_match(
    flat: list[str],
    start: int,
    stop: int,
    prefilter: Prefilter,
    patterns: Sequence[Pattern],
    vendor_only: bool = False,
) -> tuple[int, str, Pattern, re.Match[str]] | None:
    """The last line in ``flat[stop:start + 1]`` that a pattern matches, with it."""
    for index in range(start, stop - 1, -1):
        line = clean_line(flat[index])
        if not line:
            continue
        for candidate in prefilter.candidates(line):
            pattern = patterns[candidate]
            if vendor_only and pattern.vendor is None:
                continue
            match = pattern.regex.search(line)
            if match is not None:
                return index, line, pattern, match
    return None


def _throttled(classification: str, line: str, reset: int | None, now_ms: int) -> str:
    """A quota error that says to retry within minutes is throttling, not a spent plan.

    Gemini words its per-minute limit exactly like a spent quota ("You exceeded your
    current quota … Please retry in 20s"); only the short retry tells them apart.
    """
    if (
        classification == "usage_limit"
        and reset is not None
        and reset - now_ms <= SHORT_RETRY_MS
        and "quota" in line.lower()
    ):
        return "rate_limited"
    return classification


def _reset_near(line: str, following: list[str], now_ms: int, tz: tzinfo | None) -> int | None:
    for candidate in (line, *following):
        reset = parse_reset(candidate, now_ms, tz)
        if reset is not None:
            return reset
    return None


def _evidence(line: str, match: re.Match[str]) -> str:
    """The line, or the 500-character window of it that shows the match.

    Stream-JSON lines run to kilobytes and the error may sit deep inside; the
    first 500 characters would show the envelope and hide the reason.
    """
    if len(line) <= EVIDENCE_MAX:
        return line
    return _window(line, max(0, min(match.start() - 80, len(line) - EVIDENCE_MAX)))


# How far a window's edge moves to fall between words, at most.
WORD_SLACK: Final = 40


def _window(text: str, start: int) -> str:
    """At most EVIDENCE_MAX characters of ``text`` from about ``start``, cut between words.

    A person reads the evidence in a stage's reason: ``…I Error: You exceeded`` reads
    as a word that is not there.  Each cut edge moves to the nearest space within
    WORD_SLACK characters inward (a line with no space there is cut where it is), and
    is marked with an ellipsis.
    """
    if start == 0 and len(text) <= EVIDENCE_MAX:
        return text
    if start > 0 and not text[start - 1].isspace():
        space = text.find(" ", start, start + WORD_SLACK)
        if space != -1:
            start = space + 1
    head = "\u2026" if start > 0 else ""
    end = start + EVIDENCE_MAX - len(head)
    if end >= len(text):
        return head + text[start:]
    end -= 1  # room for the tail's ellipsis
    if not text[end].isspace():
        space = text.rfind(" ", end - WORD_SLACK, end)
        if space > start:
            end = space
    return head + text[start:end].rstrip() + "\u2026"
