"""Names and text an agent chose, quoted in bounded space.

An agent decides how many files it leaves behind, how long their names are and
what they contain; a reason quoting them is stored, shown in every dashboard row
of a recent run, carried by events and told to webhooks.  On 0.7.0 a reason listed
every path, and 3,000 untracked files with 4,000-character names made every
dashboard ``show`` 11.7 MB.  So what quotes agent-chosen names quotes the first
few, each cut to a readable length, and counts the rest ("… and 2,997 more"); what
lists them for a program lists a bounded number; and a reason is cut as a whole.

The rules are constants here so that the docs can state them (docs/protocol.md,
"Stage row"; docs/operator-guide.md) and the tests can check them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

# A reason names this many paths (or tool names), each cut to this many characters.
QUOTED_NAMES: Final = 3
QUOTED_NAME_CHARS: Final = 160
# A ``paths`` list (a stage's, a discarded entry's) holds at most this many paths and
# this many characters of them in all; the rest is counted, not listed.
LISTED_PATHS: Final = 100
LISTED_PATH_CHARS: Final = 64 * 1024
# A run's reason, as stored and as every run row carries it.
REASON_CHARS: Final = 1000
# A reported verdict's reason (a stage worker's, a panel seat's), as stored and as every
# stage row shows it: an agent writes it, up to a whole request line (1 MiB) otherwise.
VERDICT_REASON_CHARS: Final = 4096

ELLIPSIS: Final = "…"
REPLACEMENT: Final = "\ufffd"

# Line breaks and other whitespace controls: a quoted name or a one-line text shows
# them as one space, so nothing an agent named can start a line of its own.
_BREAKS: Final = re.compile("[\t\n\v\f\r\x1c-\x1e\x85\u2028\u2029]+")
# Every other control character (C0, DEL, C1) and every bidi override or isolate
# (which reorders what a reader sees): shown as U+FFFD, so that something was there
# stays visible (sloopctl's terminal rule, sloopctl/safe_text.py, does the same).
_UNSAFE: Final = re.compile("[\x00-\x08\x0e-\x1b\x1f\x7f-\x84\x86-\x9f\u202a-\u202e\u2066-\u2069]")


# Terminal escape sequences (CSI, OSC, and the two-character ones): removed whole from
# an agent's output that is quoted to another agent or a person, so nothing of them
# is interpreted where the text is shown.
_ESCAPES: Final = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?")


def without_escapes(text: str) -> str:
    """``text`` with its terminal escape sequences removed, then as ``one_line``."""
    return one_line(_ESCAPES.sub("", text))


def one_line(text: str) -> str:
    """``text`` as one line of plain characters: breaks become a space, controls U+FFFD."""
    return _UNSAFE.sub(REPLACEMENT, _BREAKS.sub(" ", text))


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, ending in "…" when it was cut."""
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


def clip_middle(text: str, limit: int = QUOTED_NAME_CHARS) -> str:
    """``text`` cut to ``limit`` characters in its middle: a path keeps its start and its
    file name, which is what a reader looks for."""
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    tail = limit - 1 - head
    return text[:head] + ELLIPSIS + text[len(text) - tail :]


def quote_names(names: Sequence[str], shown: int = QUOTED_NAMES) -> str:
    """``a, b, c … and 2,997 more``: the first ``shown`` names, one line each, cut."""
    quoted = ", ".join(clip_middle(one_line(name)) for name in names[:shown])
    rest = len(names) - shown
    return quoted + (f" {ELLIPSIS} and {rest:,} more" if rest > 0 else "")


def listed_paths(paths: Sequence[str]) -> tuple[tuple[str, ...], int]:
    """The paths a ``paths`` field lists (whole, in order) and how many it leaves out.

    At most ``LISTED_PATHS`` of them and ``LISTED_PATH_CHARS`` characters in all,
    so a field stays a few kilobytes to a few dozen whatever an agent left.
    """
    kept: list[str] = []
    used = 0
    for path in paths[:LISTED_PATHS]:
        used += len(path)
        if used > LISTED_PATH_CHARS:
            break
        kept.append(path)
    return tuple(kept), len(paths) - len(kept)
