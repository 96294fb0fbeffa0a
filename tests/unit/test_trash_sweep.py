"""The sweep of set-aside checkouts stops with the daemon.

After a long drain the trash can hold thousands of checkouts; the daemon's stop waits
for the threads it started, so a sweep that went on to the end held the stop until
SIGKILL. Once ``stop_sweeping`` is called the sweep deletes no further entry.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from sloopd.runs.branch import RunBranches
from sloopd.util import trees


def test_a_stop_ends_the_sweep_after_the_entry_it_is_deleting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trash = tmp_path / "trash"
    for n in range(5):
        (trash / f"checkout-{n}").mkdir(parents=True)
    stopping = threading.Event()
    removed: list[str] = []

    def remove(path: Path) -> None:
        removed.append(path.name)
        path.rmdir()
        stopping.set()  # the daemon stops while the first entry is being deleted

    monkeypatch.setattr(trees, "remove_blocking", remove)
    sweeper = cast(Any, SimpleNamespace(trash=trash, _stopping=stopping))
    RunBranches._sweep(sweeper)
    assert len(removed) == 1
    assert len(list(trash.iterdir())) == 4  # left for the next daemon's sweep


def test_without_a_stop_the_sweep_deletes_every_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trash = tmp_path / "trash"
    for n in range(5):
        (trash / f"checkout-{n}").mkdir(parents=True)
    monkeypatch.setattr(trees, "remove_blocking", lambda path: path.rmdir())
    sweeper = cast(Any, SimpleNamespace(trash=trash, _stopping=threading.Event()))
    RunBranches._sweep(sweeper)
    assert list(trash.iterdir()) == []
