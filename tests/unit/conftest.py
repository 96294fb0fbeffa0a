"""Fixtures the unit tests share."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sloopd.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A fresh store of the current schema in the test's own directory."""
    opened = Store.open(tmp_path / "state")
    try:
        yield opened
    finally:
        opened.close()
