"""Every test here needs the session's Ray cluster (tests/conftest.py: ray_cluster)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/ray/" in str(item.fspath):
            item.add_marker(pytest.mark.ray)
            item.add_marker(pytest.mark.usefixtures("ray_cluster"))
