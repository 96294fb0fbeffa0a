"""A ``sync`` conflict's hunks: the regions git marked in the conflicted files, bounded.

The stage a conflicting ``sync`` sends back is told what conflicted (sloopd.views.feedback),
and the paths alone say little: the agent needs both sides of the lines it must
reconcile.  Both modes are computed in the scratch repository (sloopd.git.scratch), so
a conflict is read from the tree ``merge-tree`` wrote (each conflicted file with its
markers): the merge's, or the replay's of the first commit a rebase could not replay.
The result's shape: per file a
``--- <path>`` line, then each ``<<<<<<<`` … ``>>>>>>>`` region with ``CONTEXT`` lines
around it, ``…`` between regions that are not adjacent.

The marker lines are relabelled with which side is which (``the run's work``, ``main``)
instead of git's labels (shas).
Both sides are text an agent or a person wrote: it is bounded (``HUNK_LINES``,
``HUNK_BYTES``, ``LINE_CHARS`` a line), stripped of terminal escapes, and only ever
shown as data.

Imports: ``sloopd.util.quoting`` only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from sloopd.util import quoting

HUNK_LINES: Final = 120
HUNK_BYTES: Final = 8 * 1024
LINE_CHARS: Final = 500
# Lines kept before and after each marked region.
CONTEXT: Final = 3
# At most this many conflicted files are read, and this much of each (git is stopped there).
FILES_READ: Final = 20
FILE_BYTES: Final = 1024 * 1024

OURS: Final = "<<<<<<<"
BASE: Final = "|||||||"
SPLIT: Final = "======="
THEIRS: Final = ">>>>>>>"
GAP: Final = quoting.ELLIPSIS


@dataclass(frozen=True, slots=True)
class Hunks:
    """The bounded lines shown, and whether some were left out."""

    lines: tuple[str, ...] = ()
    clipped: bool = False


def _marker(line: str, marker: str) -> bool:
    return line.startswith(marker) and (len(line) == len(marker) or line[len(marker)] in " \t")


def regions(lines: Sequence[str], ours: str, theirs: str) -> list[str]:
    """The marked regions of a file's ``lines`` with ``CONTEXT`` lines around each,
    markers relabelled ``ours``/``base``/``theirs``; ``GAP`` between distant regions.

    A ``=======`` outside a region (a Markdown heading's underline) is a plain line."""
    keep: list[bool] = [False] * len(lines)
    shown: list[str] = list(lines)
    start: int | None = None
    for i, line in enumerate(lines):
        if _marker(line, OURS):
            start = i
            shown[i] = f"{OURS} {ours}"
        elif start is not None and _marker(line, BASE):
            shown[i] = f"{BASE} base"
        elif start is not None and line == SPLIT:
            shown[i] = SPLIT
        elif start is not None and _marker(line, THEIRS):
            shown[i] = f"{THEIRS} {theirs}"
            for j in range(max(0, start - CONTEXT), min(len(lines), i + CONTEXT + 1)):
                keep[j] = True
            start = None
    found: list[str] = []
    last = -1
    for i, kept in enumerate(keep):
        if not kept:
            continue
        if found and i != last + 1:
            found.append(GAP)
        found.append(shown[i])
        last = i
    return found


def of_file(path: str, text: str, ours: str, theirs: str) -> list[str]:
    """``--- path`` and the file's marked regions; nothing when it has none (a binary
    file, a modify/delete conflict: its path is listed all the same)."""
    found = regions(text.splitlines(), ours, theirs)
    return [f"--- {path}", *found] if found else []


def bounded(lines: Iterable[str], clipped: bool = False) -> Hunks:
    """At most ``HUNK_LINES`` lines and ``HUNK_BYTES`` bytes of ``lines``, each cut to
    ``LINE_CHARS`` with its terminal escapes removed (tabs kept; other controls shown
    as U+FFFD, a break as a space, so no line of it can become two)."""
    kept: list[str] = []
    size = 0
    for raw in lines:
        line = quoting.clip("\t".join(map(quoting.without_escapes, raw.split("\t"))), LINE_CHARS)
        size += len(line.encode()) + 1
        if len(kept) >= HUNK_LINES or size > HUNK_BYTES:
            return Hunks(tuple(kept), True)
        kept.append(line)
    return Hunks(tuple(kept), clipped)
