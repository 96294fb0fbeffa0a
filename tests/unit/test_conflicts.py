"""``sloopd.git.conflicts``: a ``sync`` conflict's hunks, relabelled and bounded, and
their trip through the stage row (issue 33: the agent sent back sees the hunks).

The hunks are text an agent and a person wrote: each line's terminal escapes go, no
line can become two, and the whole is capped whatever the files held.  The row keys
are additive: a row written before 0.9.0 (no ``hunks``) replays as before.
"""

from __future__ import annotations

import orjson

from sloopd.flows.results import StageResult
from sloopd.git import conflicts
from sloopd.git.conflicts import GAP, HUNK_BYTES, HUNK_LINES, LINE_CHARS, Hunks
from tests.unit.test_walk import Log

MERGED = """\
# Title
=======

one
two
three
<<<<<<< 0123456789abcdef
the agent's line
=======
main's line
>>>>>>> fedcba9876543210
four
five
six
seven
eight
nine
ten
<<<<<<< 0123456789abcdef
x
||||||| merged common ancestors
y
=======
z
>>>>>>> fedcba9876543210
end
"""


# What ``git diff`` prints for the same file conflicted in a rebase (``diff --cc``).
def test_a_merged_file_shows_its_regions_with_context_relabelled() -> None:
    found = conflicts.of_file("README.md", MERGED, "the run's work", "main")
    assert found == [
        "--- README.md",
        "one",
        "two",
        "three",
        "<<<<<<< the run's work",
        "the agent's line",
        "=======",
        "main's line",
        ">>>>>>> main",
        "four",
        "five",
        "six",
        GAP,
        "eight",
        "nine",
        "ten",
        "<<<<<<< the run's work",
        "x",
        "||||||| base",
        "y",
        "=======",
        "z",
        ">>>>>>> main",
        "end",
    ]
    # The heading's underline is outside every region: neither shown nor a marker.
    assert "# Title" not in found


def test_a_file_without_markers_gives_nothing() -> None:
    assert conflicts.of_file("a.bin", "no markers\n=======\n", "ours", "theirs") == []


def test_hunks_are_bounded_stripped_and_one_line_each() -> None:
    hostile = [
        "\x1b[31mred\x1b[0m and \x1b]0;title\x07",
        "a\rb\nc",
        "tab\tkept",
        "y" * 10_000_000,
    ]
    hunks = conflicts.bounded(hostile)
    assert hunks.lines[:3] == ("red and ", "a b c", "tab\tkept")
    assert len(hunks.lines[3]) == LINE_CHARS
    assert not hunks.clipped
    many = conflicts.bounded(f"line {n}" for n in range(10_000))
    assert len(many.lines) == HUNK_LINES
    assert many.clipped
    wide = conflicts.bounded(["z" * LINE_CHARS] * 100)
    assert sum(len(line) + 1 for line in wide.lines) <= HUNK_BYTES
    assert wide.clipped
    assert conflicts.bounded([], clipped=True) == Hunks((), True)


def test_the_row_carries_the_hunks_only_when_there_are_some() -> None:
    plain = StageResult.checked("git", False, "conflict").but(paths=("a",))
    assert "hunks" not in plain.to_row()
    assert "hunks_clipped" not in plain.to_row()
    told = plain.but(hunks=("--- a", "<<<<<<< main"), hunks_clipped=True)
    row = orjson.loads(orjson.dumps(told.to_row()))
    assert row["hunks"] == ["--- a", "<<<<<<< main"]
    assert row["hunks_clipped"] is True


def test_a_row_with_hunks_replays_them_and_one_without_replays_as_before() -> None:
    log = Log()
    for stage in ("implement", "test", "lint"):
        log.run(stage, exit_code=0)
    log.run("sync", passed=False, reason="conflict", paths=["a"], hunks=["--- a", "x"])
    state = log.replay()
    sync = state.executions[-1]
    assert (sync.hunks, sync.hunks_clipped, sync.paths) == (["--- a", "x"], False, ["a"])
    old = Log()
    for stage in ("implement", "test", "lint"):
        old.run(stage, exit_code=0)
    old.run("sync", passed=False, reason="conflict", paths=["a"])
    before = old.replay()
    assert (before.executions[-1].hunks, before.executions[-1].hunks_clipped) == ([], False)
    assert before.next == state.next
