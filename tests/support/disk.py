"""A small filesystem under a bench's state directory, and a way to fill it.

The full-disk tests mount a tmpfs of a few MiB on the state directory (the store
and the runs' checkouts then share it, as they share one filesystem on a CI host)
and fill it with a ballast file until the kernel refuses a byte.  Mounting needs
root: where it is refused the test is skipped, saying why.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.agents import Bench


@contextmanager
def small_tmpfs(bench: Bench, size_bytes: int, inodes: int | None = None) -> Iterator[Path]:
    """The bench's state directory on a tmpfs of ``size_bytes`` (and at most ``inodes``
    files); unmounted at the end."""
    state = bench.state_dir
    state.mkdir(parents=True, exist_ok=True)
    options = f"size={size_bytes},mode=0700" + (f",nr_inodes={inodes}" if inodes else "")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "sloop-test", str(state)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): needs root")
    try:
        yield state
    finally:
        bench.stop()
        subprocess.run(["umount", "-l", str(state)], check=False)


def fill(path: Path) -> None:
    """Write until the filesystem refuses: the disk is full."""
    with open(path, "ab", buffering=0) as ballast:
        for chunk in (b"\0" * (64 * 1024), b"\0" * 512):
            try:
                while True:
                    ballast.write(chunk)
            except OSError:
                pass


def use_up_inodes(folder: Path) -> int:
    """Create empty files in ``folder`` until the filesystem has no inode left: every
    new file is refused (ENOSPC) while bytes stay free.  How many were made."""
    folder.mkdir()
    made = 0
    try:
        while True:
            (folder / str(made)).touch()
            made += 1
    except OSError:
        return made


def all_records(bench: Bench, run: str) -> list[dict[str, Any]]:
    """Every log record of ``run``, paged through ``logs`` as a client reads them."""
    records: list[dict[str, Any]] = []
    after = None
    while True:
        args: dict[str, Any] = {"run": run}
        if after is not None:
            args["after"] = after
        page = bench.ok("logs", args)
        records += page["records"]
        if page["complete"]:
            return records
        after = page["next_cursor"]


def leave_free(ballast: Path, free_bytes: int) -> None:
    """Shrink a ballast that filled its filesystem so about ``free_bytes`` are free again:
    a disk still short of room, on which the store's small writes succeed."""
    size = ballast.stat().st_size
    with open(ballast, "r+b") as handle:
        handle.truncate(max(0, size - free_bytes))
