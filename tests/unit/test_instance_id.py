"""The daemon's instance id (the key of its caches on Ray nodes): made once, kept."""

from __future__ import annotations

import stat
from pathlib import Path

from sloopd.core.instance import FILE_NAME, instance_id


def test_the_id_is_made_once_and_kept_private(tmp_path: Path) -> None:
    first = instance_id(tmp_path)
    assert len(first) == 32
    assert instance_id(tmp_path) == first  # a restart keeps it
    mode = stat.S_IMODE((tmp_path / FILE_NAME).stat().st_mode)
    assert mode == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [FILE_NAME]  # no staging file left


def test_two_state_directories_have_two_ids(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    assert instance_id(one) != instance_id(two)


def test_a_malformed_id_is_replaced(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text("not an id\n")
    made = instance_id(tmp_path)
    assert len(made) == 32
    assert (tmp_path / FILE_NAME).read_text().strip() == made
    assert instance_id(tmp_path) == made
