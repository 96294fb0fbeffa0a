"""Fixtures: a short-path sandbox, a git repository in it, a running daemon."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.agents import Bench, kill_leftovers
from tests.support.daemon import DaemonProcess, make_repo, new_daemon, short_tmpdir

# pytest-xdist's workers run with COLUMNS=80 and LINES=24 in their environment, which
# every CLI a test starts inherits and obeys before its terminal's real size (as
# shutil.get_terminal_size does): a live view on a 40-column pty drew 80-column
# lines.  A test sees the terminal it made, as a user's shell (which does not export
# them) does.
for _size in ("COLUMNS", "LINES"):
    os.environ.pop(_size, None)


@pytest.fixture
def sandbox() -> Iterator[Path]:
    root = short_tmpdir()
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def repo(sandbox: Path) -> Path:
    return make_repo(sandbox)


@pytest.fixture
def daemon(sandbox: Path, repo: Path) -> Iterator[DaemonProcess]:
    process = new_daemon(sandbox, repo).start()
    try:
        yield process
    finally:
        code = process.stop()
        assert code == 0, process.log()


@pytest.fixture
def bench(sandbox: Path, repo: Path) -> Iterator[Bench]:
    """A daemon driver for run tests; at the end no process may be left in a worktree."""
    bench = Bench.create(sandbox, repo)
    try:
        yield bench
    finally:
        code = bench.stop()
        leftovers = kill_leftovers(bench.state_dir)
        assert code == 0, bench.log()
        assert leftovers == [], "the daemon left processes running in its worktrees"
