"""The sweep of set-aside checkouts stops with the daemon.

After a long drain the trash can hold thousands of checkouts; the daemon's stop waits
for the threads it started, so a sweep that went on to the end held the stop until
SIGKILL. Once ``Trash.stop`` is called the sweep deletes no further entry.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sloopd.util import trees
from sloopd.util.trash import Trash


def test_a_stop_ends_the_sweep_after_the_entry_it_is_deleting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trash = tmp_path / "trash"
    for n in range(5):
        (trash / f"checkout-{n}").mkdir(parents=True)
    sweeper = Trash(trash)
    removed: list[str] = []

    def remove(path: Path) -> None:
        removed.append(path.name)
        path.rmdir()
        sweeper.stop()  # the daemon stops while the first entry is being deleted

    monkeypatch.setattr(trees, "remove_blocking", remove)
    sweeper.sweep()
    assert len(removed) == 1
    assert len(list(trash.iterdir())) == 4  # left for the next daemon's sweep


def test_without_a_stop_the_sweep_deletes_every_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trash = tmp_path / "trash"
    for n in range(5):
        (trash / f"checkout-{n}").mkdir(parents=True)
    monkeypatch.setattr(trees, "remove_blocking", lambda path: path.rmdir())
    Trash(trash).sweep()
    assert list(trash.iterdir()) == []
