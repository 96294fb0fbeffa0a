"""The bounds on agent-chosen names and text (sloopd.util.quoting)."""

from __future__ import annotations

from sloopd.util import quoting


def test_a_reason_quotes_the_first_names_and_counts_the_rest() -> None:
    names = [f"file-{n}.txt" for n in range(3000)]
    assert quoting.quote_names(names) == "file-0.txt, file-1.txt, file-2.txt … and 2,997 more"
    assert quoting.quote_names(names[:2]) == "file-0.txt, file-1.txt"
    assert quoting.quote_names([]) == ""


def test_a_long_name_is_cut_in_its_middle_keeping_both_ends() -> None:
    path = "a/" * 1000 + "the-file.txt"
    quoted = quoting.quote_names([path])
    assert len(quoted) == quoting.QUOTED_NAME_CHARS
    assert quoted.startswith("a/a/")
    assert quoted.endswith("the-file.txt")
    assert "…" in quoted


def test_a_quoted_name_cannot_start_a_line_or_hide_a_control() -> None:
    quoted = quoting.quote_names(["x\n\n:white_check_mark: merged", "y\r\u2028z", "\x1b[2Jw\u202e"])
    assert quoted == "x :white_check_mark: merged, y z, \ufffd[2Jw\ufffd"
    assert quoted.splitlines() == [quoted]


def test_one_line_leaves_ordinary_text_alone() -> None:
    text = "stage 'test' failed on execution 1: exited with code 1 — naïve 日本"
    assert quoting.one_line(text) == text


def test_listed_paths_are_bounded_in_count_and_characters_and_kept_whole() -> None:
    short = [f"p{n}" for n in range(500)]
    kept, omitted = quoting.listed_paths(short)
    assert kept == tuple(short[: quoting.LISTED_PATHS])
    assert omitted == 500 - quoting.LISTED_PATHS
    long = ["x" * 4000 for _ in range(50)]
    kept, omitted = quoting.listed_paths(long)
    assert sum(map(len, kept)) <= quoting.LISTED_PATH_CHARS
    assert all(path == "x" * 4000 for path in kept)
    assert len(kept) + omitted == 50
    assert quoting.listed_paths(["a", "b"]) == (("a", "b"), 0)


def test_clip_ends_in_an_ellipsis_only_when_it_cut() -> None:
    assert quoting.clip("short", 10) == "short"
    assert quoting.clip("x" * 20, 10) == "x" * 9 + "…"
