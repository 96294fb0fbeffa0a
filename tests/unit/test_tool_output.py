"""What a tool prints is kept in bounded space, whoever runs it (issue 34, item 1).

Each stream keeps its first and its last part and counts what it dropped between
them, as it is read: ``sloopd.util.headtail`` on its own, then through the async and
the blocking runner with tools that print far more than is kept.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from sloopd.git import runner
from sloopd.util import subproc
from sloopd.util.headtail import STDERR_HEAD, STDERR_TAIL, HeadTail, omission
from tests.support.agents import processes_with

MiB = 1024 * 1024
# Prints 20,000 numbered lines of ~1 KiB on standard error (20 MiB), then "the end".
FLOOD = (
    'i=0; line=$(head -c 1000 /dev/zero | tr "\\0" x); '
    'while [ $i -lt 20000 ]; do echo "error: $i $line"; i=$((i+1)); done >&2; '
    "echo 'fatal: the end' >&2"
)


def test_a_short_stream_is_kept_whole() -> None:
    kept = HeadTail(8, 8)
    for chunk in (b"abc", b"def\n"):
        kept.add(chunk)
    assert kept.value() == b"abcdef\n"
    assert (kept.dropped, kept.dropped_lines, len(kept)) == (0, 0, 7)


def test_a_long_stream_keeps_both_ends_and_counts_the_middle() -> None:
    kept = HeadTail(10, 10)
    lines = [f"line {n:03d}\n".encode() for n in range(100)]  # 9 bytes each
    for line in lines:
        kept.add(line)
    whole = b"".join(lines)
    assert kept.head == whole[:10]
    assert kept.tail == whole[-10:]
    assert kept.dropped == len(whole) - 20
    assert kept.dropped_lines == whole[10:-10].count(b"\n")
    assert len(kept) == len(whole)
    text = kept.text()
    assert text.startswith("line 000\nl\n… ")
    assert text.endswith(" omitted …\nline 099\n")  # the tail starts with a line end
    assert omission(kept.dropped, kept.dropped_lines) in text


def test_one_huge_chunk_is_cut_as_it_comes() -> None:
    kept = HeadTail(4, 4)
    kept.add(b"0123" + b"\n" * 1000 + b"wxyz")
    assert kept.value() == b"0123\n" + omission(1000, 1000).encode() + b"\nwxyz"


def test_the_omission_reads_in_units_and_thousands() -> None:
    assert omission(96 * MiB, 25_222) == "… 96.0 MiB (25,222 lines) omitted …"
    assert omission(10, 1) == "… 10 B (1 line) omitted …"
    assert omission(10, 0) == "… 10 B omitted …"


def test_a_tools_standard_error_is_bounded_without_a_stdout_limit() -> None:
    done = asyncio.run(subproc.run(["sh", "-c", FLOOD], timeout=120))
    assert done.returncode == 0
    assert len(done.stderr) < STDERR_HEAD + STDERR_TAIL + 200
    assert done.stderr.startswith("error: 0 x")
    assert done.stderr.rstrip().endswith("fatal: the end")
    assert " omitted …" in done.stderr
    assert "lines) omitted" in done.stderr


def test_a_tools_standard_output_is_bounded_too() -> None:
    argv = ["sh", "-c", f"head -c {subproc.STDOUT_HEAD + 4 * MiB} /dev/zero; echo; echo last"]
    done = asyncio.run(subproc.run(argv, timeout=120))
    assert done.returncode == 0
    assert done.truncated is False  # kept whole is not what it says: nothing was killed
    assert len(done.stdout) < subproc.STDOUT_HEAD + subproc.STDOUT_TAIL + 200
    assert done.stdout.endswith("\nlast\n")
    # Zeros dropped, no line end among them: both line ends are in the tail.
    assert omission(4 * MiB + len("\nlast\n") - subproc.STDOUT_TAIL, 0) in done.stdout


def test_the_blocking_runner_keeps_the_same_bounds() -> None:
    done = subproc.run_blocking(["sh", "-c", f"{FLOOD}; echo out"], timeout=120)
    assert (done.returncode, done.stdout) == (0, "out\n")
    assert len(done.stderr) < STDERR_HEAD + STDERR_TAIL + 200
    assert done.stderr.rstrip().endswith("fatal: the end")


def test_the_blocking_runner_kills_what_outlives_its_deadline(tmp_path: Path) -> None:
    tag = f"SLOOP_TEST_TAG={os.urandom(6).hex()}"
    env = {**os.environ, tag.split("=")[0]: tag.split("=")[1]}
    started = time.monotonic()
    with pytest.raises(subproc.TimedOut):
        # The shell's child sleeps on: it is killed with the shell.
        subproc.run_blocking(["sh", "-c", "sleep 300 & wait"], timeout=0.5, env=env)
    assert time.monotonic() - started < 30
    deadline = time.monotonic() + 10
    while processes_with(tag) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(tag) == []


def test_the_git_runner_blocking_call_is_bounded(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        runner.run_blocking(["/nonexistent/git"], cwd=tmp_path)
    done = runner.run_blocking(runner.git(tmp_path, "rev-parse", "--git-dir"))
    assert done.returncode != 0
    assert "not a git repository" in done.stderr
