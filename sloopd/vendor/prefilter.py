"""Which patterns could match a line, judged by substring tests alone.

Python's regex engine costs a few microseconds per search even when nothing
matches, and classify() runs some 90 patterns over up to 2000 lines.  Most
lines contain none of the literal words the patterns need, so a substring test
rules a pattern out before its search.  The needles are derived from each
regex, so user patterns get the same treatment and the table stays the only
thing to maintain.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Final

from sloopd.vendor.patterns import Pattern

_QUANTIFIERS: Final = frozenset("*+?{")
_CLASS_ESCAPES: Final = frozenset("bBdDsSwWAZntrfva")
_CASE_TWINS: Final = {0x130: "i", 0x131: "i", 0x17F: "s", 0x212A: "k"}
"""The non-ASCII characters that re.IGNORECASE equates with an ASCII letter."""


def _fold(line: str) -> str:
    """The line as the needles see it: every character re.IGNORECASE equates with
    an ASCII letter becomes that lowercase letter."""
    return line.translate(_CASE_TWINS).lower()


class Prefilter:
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
