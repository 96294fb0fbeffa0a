"""Classification does bounded, linear work whatever the agent printed (issue 13).

Classification runs on the daemon's event loop.  Before 0.6.0 it read up to 2000
lines of 64 KiB each (128 MiB) and one reset regex was quadratic in a line: a
flooding agent stalled every request for seconds.  These tests pin the bounds:
the tail kept is bounded when it is collected, and every regex the classifier
and the reset reader run takes linear time on hostile lines, built from the very
words the patterns look for, repeated to the longest line classification reads.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Iterable
from functools import partial

import pytest

from sloopd.vendor import DEFAULT_PATTERNS, classify, parse_reset, reset
from sloopd.vendor.prefilter import _needles
from sloopd.vendor.tail import LINE_CHARS, TAIL_CHARS, TAIL_LINES, OutputTail, bounded, clip
from tests.support.scaling import FACTOR, Growth, cpu_seconds, growth

NOW_MS = 1_768_478_400_000  # 2026-01-15 12:00 UTC

# Everything the pattern table and the reset readers key on, and the characters
# their quantifiers run over.
_WORDS = (
    "reset",
    "resets",
    "reset ",
    "reset: ",
    "reset=",
    "in 1",
    "in 1s ",
    "1",
    "1.",
    " ",
    "-",
    ",",
    ":",
    "1:",
    "at ",
    "until ",
    "after ",
    "retry after ",
    "retry_delay ",
    "status ",
    "error ",
    "code ",
    "http/1.1 ",
    "429",
    "quota ",
    "per minute",
    "model is ",
    "overloaded ",
    "error: overloaded ",
    "\x1b[",
    "\x1b]",
    "\x1b[0",
    "|",
    "| 1",
    "'",
    '"',
    "rate limit ",
    "api key ",
    "jan 1 ",
)


def _fragments() -> list[str]:
    found = set(_WORDS)
    for pattern in DEFAULT_PATTERNS:
        found.update(_needles(pattern.regex) or ())
    return sorted(found)


def _hostile_lines(length: int) -> list[str]:
    lines = []
    for fragment in _fragments():
        lines.append((fragment * (length // len(fragment) + 1))[:length])
        # A keyword followed by a long run of what its quantifiers accept.
        for filler in (" ", "1"):
            lines.append((fragment + filler * length)[:length])
    lines.append(("".join(_fragments()) * (length // 100 + 1))[:length])
    return lines


# Half the longest line classification reads keeps this test quick; a quadratic
# regex still takes seconds on one such line, a linear one a few milliseconds.
HOSTILE = _hostile_lines(LINE_CHARS // 2)
# How many of the lines a search is slowest on are checked for how it grows.
SLOWEST = 5

REGEXES: list[tuple[str, re.Pattern[str]]] = [
    (p.regex.pattern[:60], p.regex) for p in DEFAULT_PATTERNS
] + [
    (f"reset.{name}", getattr(reset, name))
    for name in dir(reset)
    if isinstance(getattr(reset, name), re.Pattern)
]


def _search(regex: re.Pattern[str]) -> Callable[[str], object]:
    def search(line: str) -> object:
        return deque(regex.finditer(line), maxlen=0)

    return search


def _worst_growth(work: Callable[[str], object]) -> list[tuple[int, Growth]]:
    """How ``work`` grows from a quarter of HOSTILE's length to the whole, on the lines
    it is slowest on (a backtracking search shows there): (line, growth).

    A property, not a wall-clock bound: "under 250 ms a line" failed at 668 ms on a
    busy machine (issue 23), and passed a quadratic search on a fast one.  CPU time,
    fastest of several tries, as a ratio (tests/support/scaling.py): a linear search
    grows about 4 times, a quadratic one about 16.
    """
    quarter = len(HOSTILE[0]) // FACTOR
    short = _hostile_lines(quarter)
    costs = sorted((cpu_seconds(partial(work, line)), i) for i, line in enumerate(short))
    slowest = [i for _, i in costs[-SLOWEST:]]
    return [(i, growth(partial(_hostile_line, i), work, quarter)) for i in slowest]


def _hostile_line(index: int, length: int) -> str:
    return _hostile_lines(length)[index]


@pytest.mark.parametrize(("name", "regex"), REGEXES, ids=[n for n, _ in REGEXES])
def test_no_regex_backtracks_on_a_hostile_line(name: str, regex: re.Pattern[str]) -> None:
    for line, grew in _worst_growth(_search(regex)):
        assert grew.linear, f"{name} on {HOSTILE[line][:40]!r}…: {grew}"


def test_reading_reset_times_on_hostile_lines_is_linear() -> None:
    for line, grew in _worst_growth(lambda text: parse_reset(text, NOW_MS)):
        assert grew.linear, f"parse_reset on {HOSTILE[line][:40]!r}…: {grew}"


def test_the_growth_check_sees_a_quadratic_regex() -> None:
    """The check itself: the unbounded form reset.py warns of (``\\w*`` and ``\\s*``
    runs, quadratic on "resetreset…" or "reset" and spaces) fails it, at any speed of
    the machine; the bounded ``_RESET_EPOCH`` passes on the same lines."""
    quadratic = re.compile(r"reset\w*[\"']?\s*[:=]?\s*(\d{13}|\d{10})", re.IGNORECASE)
    lines = {"run": "reset" * 2000, "spaces": "reset" + " " * 10_000}

    def line_of(kind: str) -> Callable[[int], str]:
        return lambda n: (lines[kind] * (n // len(lines[kind]) + 1))[:n]

    for kind in lines:
        assert not growth(line_of(kind), _search(quadratic), 256, tries=3).linear, kind
        assert growth(line_of(kind), _search(reset._RESET_EPOCH), 1024).linear, kind


def test_the_tail_is_bounded_when_it_is_collected() -> None:
    tail = OutputTail()
    for i in range(10_000):
        tail.append(f"line {i}")
    assert len(tail) == TAIL_LINES
    assert list(tail)[-1] == "line 9999"
    for _ in range(100):
        tail.append("x" * 100_000)
    assert tail.chars <= TAIL_CHARS
    assert all(len(line) <= LINE_CHARS + 3 for line in tail)
    tail.append("the end")
    assert list(tail)[-1] == "the end"
    assert tail.chars <= TAIL_CHARS
    tail.clear()
    assert len(tail) == 0
    assert tail.chars == 0


def test_a_clipped_line_keeps_its_head_and_its_end() -> None:
    line = '{"type":"result"' + "x" * 100_000 + '"error":"usage limit reached"}'
    clipped = clip(line)
    assert len(clipped) <= LINE_CHARS + 3
    assert clipped.startswith('{"type":"result"')
    assert clipped.endswith('usage limit reached"}')
    assert classify([line], NOW_MS).classification == "usage_limit"


def _fastest(output: Iterable[str], repeats: int = 3) -> float:
    took = []
    for _ in range(repeats):
        started = time.perf_counter()
        classify(output, NOW_MS)
        took.append(time.perf_counter() - started)
    return min(took)


def test_classifying_a_huge_hostile_output_is_bounded_not_linear() -> None:
    """2000 lines of 64 KiB: what recent_output could hold before 0.6.0 (10 s to
    classify, most of it the substring prefilter on 128 MiB).  The property, not a
    wall-clock bound (a busy host would fail that): a hundred times the output costs
    nowhere near a hundred times the time, because only a bounded tail is read."""
    big = ("status error model is reset " * 3000)[: 64 * 1024]
    assert classify([big] * 2000, NOW_MS).classification == "unknown"
    small, huge = _fastest([big] * 20), _fastest([big] * 2000)
    assert huge < 10 * small + 0.05, f"20 lines {small:.4f} s, 2000 lines {huge:.4f} s"
    tail = bounded(HOSTILE * 10)
    assert _fastest(tail) < 10 * _fastest(bounded(HOSTILE)) + 0.05


def test_the_last_line_still_decides_after_a_flood() -> None:
    tail = OutputTail()
    for _ in range(5000):
        tail.append("y" * 70_000)
    tail.append("Claude AI usage limit reached|1768482000")
    diagnosis = classify(tail, NOW_MS)
    assert diagnosis.classification == "usage_limit"
    assert diagnosis.reset_at_ms == 1_768_482_000_000
