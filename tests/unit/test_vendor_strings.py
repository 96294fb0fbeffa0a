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
from tests.support import vendor_harvest
from tests.support.agent_clis import PINNED

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


@pytest.mark.parametrize("name", sorted(PINNED))
def test_each_pinned_cli_has_a_table_harvested_from_its_version(name: str) -> None:
    """A new pin (tests/support/agent_clis.py) means new wording: its table names the
    version its strings were read from, and how, so a pin bump fails here until the
    strings are harvested again (tests/support/vendor_harvest.py)."""
    document = json.loads((TABLES / f"{name}.json").read_text(encoding="utf-8"))
    assert document["cli"].split(" ")[0] == PINNED[name]
    assert document.get("harvest"), f"{name}.json does not say how its bundle was harvested"
    rows = document.get("strings") or document.get("cases") or []
    assert any(row.get("source") in ("bundle", "binary") for row in rows)


def test_the_harvest_finds_message_literals_near_error_paths() -> None:
    """JS literals and Rust literals run together both yield their sentences; code,
    flags and sentences about nothing that fails do not."""
    js = (
        'let e="Request timed out. Check your internet connection";'
        "x=`${cu}: Usage credits ran out before the response was finished.`;"
        'y="--dangerously-skip-permissions";z="Create a new file in the checkout"'
    )
    rust = "invalid SETTINGS frameFlex capacity unavailable.Policy-restricted capacity is gone."
    found = list(vendor_harvest.candidates([js, rust]))
    assert "Request timed out. Check your internet connection" in found
    assert "${cu}: Usage credits ran out before the response was finished." in found
    assert "Flex capacity unavailable." in found
    assert not any("dangerously" in text or "Create a new" in text for text in found)
