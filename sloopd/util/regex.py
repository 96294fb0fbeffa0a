"""Case-insensitive searches in linear time: the one user of RE2.

A pattern comes from a client, so it is compiled by RE2 (``google-re2``),
whose automata match in time linear in the text, never by Python's
backtracking ``re``: ``(a+)+$`` costs what ``a+$`` costs.  The syntax is
RE2's: no backreferences, no lookaround; a counted repetition goes up to
1000.
"""

from __future__ import annotations

import re
from typing import Any, Final, Protocol, cast

import re2

# RE2 refuses {1001}, but reads a count too long for its parser ({4294967296})
# as literal text; both are refused here, alike.
MAX_REPEAT: Final = 1000
_COUNTED: Final = re.compile(r"\{([0-9]+)(?:,([0-9]*))?\}")


class PatternError(ValueError):
    """A pattern RE2 cannot (or will not) compile; the message says why."""


class _Compiled(Protocol):
    def search(self, text: str) -> Any: ...


class Pattern:
    """A compiled, case-insensitive pattern; ``search`` only says whether it matches."""

    __slots__ = ("_compiled",)

    def __init__(self, compiled: _Compiled) -> None:
        self._compiled = compiled

    def search(self, text: str) -> bool:
        return self._compiled.search(text) is not None


def _options(literal: bool) -> Any:
    options = re2.Options()
    options.case_sensitive = False
    options.literal = literal
    options.never_capture = True  # capture groups would push RE2 off its DFA
    options.log_errors = False  # a client's typo is not the daemon's log line
    return options


def compile_pattern(text: str, literal: bool = False) -> Pattern:
    """``text`` as a regular expression, or as plain text when ``literal``."""
    if not literal:
        oversized = _oversized_repeat(text)
        if oversized is not None:
            raise PatternError(f"invalid repetition size: {oversized} (at most {MAX_REPEAT})")
    try:
        compiled = re2.compile(text, options=_options(literal))
    except re2.error as exc:
        raise PatternError(_reason(exc)) from exc
    except ValueError as exc:  # text RE2 cannot take as UTF-8
        raise PatternError(str(exc)) from exc
    return Pattern(cast(_Compiled, compiled))


def _reason(exc: Exception) -> str:
    first = exc.args[0] if exc.args else "invalid pattern"
    return first.decode("utf-8", "replace") if isinstance(first, bytes) else str(first)


def _oversized_repeat(text: str) -> str | None:
    """The first ``{n}``, ``{n,}`` or ``{n,m}`` counting past MAX_REPEAT, outside
    escapes, ``\\Q…\\E`` and character classes (where braces are literal)."""
    i, in_class = 0, False
    while i < len(text):
        if text.startswith("\\Q", i):
            end = text.find("\\E", i + 2)
            i = len(text) if end < 0 else end + 2
            continue
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            if text.startswith("[:", i):
                end = text.find(":]", i + 2)
                i = i + 1 if end < 0 else end + 2
                continue
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            i += 1
            i += text.startswith("^", i)
            i += text.startswith("]", i)  # a leading ']' is a member, not the end
            continue
        elif ch == "{" and (found := _COUNTED.match(text, i)) is not None:
            counts = [c for c in found.groups() if c]
            if any(len(c.lstrip("0")) > 4 or int(c) > MAX_REPEAT for c in counts):
                return found.group(0)
        i += 1
    return None
