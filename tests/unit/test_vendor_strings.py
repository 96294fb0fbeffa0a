"""The classifier against the vendors' own words: every failure string the three CLIs print.

``tests/unit/vendor_strings/<cli>.json`` holds the strings harvested from the
installed CLI bundles and from real runs against the API stand-ins, each with
the class it must get.  Adding a string there is how a newly seen wording becomes a
test; a class of null marks a line that is no failure by itself (retry chatter).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sloopd.vendor import classify

TABLES = Path(__file__).parent / "vendor_strings"
NOW_MS = 1_796_131_200_000


def cases() -> list[Any]:
    found = []
    for table in sorted(TABLES.glob("*.json")):
        document = json.loads(table.read_text(encoding="utf-8"))
        for entry in document.get("strings") or document.get("cases") or []:
            wanted = entry.get("class")
            lines = entry.get("lines") or [entry.get("text")]
            if not all(isinstance(line, str) for line in lines):
                continue
            found.append(pytest.param(lines, wanted, id=f"{table.stem}:{lines[-1][:60]}"))
    return found


@pytest.mark.parametrize(("lines", "wanted"), cases())
def test_each_vendor_string_gets_its_class(lines: list[str], wanted: str | None) -> None:
    """A case is one line, or the lines a CLI prints for one failure (the last decides)."""
    text = "\n".join(lines)
    diagnosis = classify(lines, NOW_MS)
    got = diagnosis.classification
    if wanted is None:
        assert got == "unknown", f"{text!r} is no failure but was classified {got}"
    else:
        assert got == wanted, f"{text!r}: got {got}, want {wanted}"
