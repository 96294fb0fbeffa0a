"""docs/architecture.md's layer table and each layer's docstring say what ``LAYERS`` enforces.

``LAYERS`` (tests/unit/test_architecture.py) is the rule; the table a newcomer reads
and the ``May import:`` sentence of each ``sloopd/<layer>/__init__.py`` are its two
descriptions.  Both are read here in one parseable form, so a change to ``LAYERS``
fails until they say the same:

* the table's "may import" cell: backticked layer names (`` `wire`, `util` ``), or
  ``nothing of `sloopd` ``; a clause after ``;`` is commentary (``never `runs` ``);
* a docstring: ``May import: ``wire`` and ``util``.`` (``sloopd.`` prefixes allowed,
  parentheses are commentary), or ``May import: nothing of ``sloopd``.``
"""

from __future__ import annotations

import ast
import re

import pytest

from tests.unit.test_architecture import LAYERS, ROOT

ARCHITECTURE = ROOT / "docs" / "architecture.md"
TABLE_HEADER = "| layer | owns | may import |"
ROOT_ROW = "root"
ROOT_MAY_IMPORT = "every layer"

# Layers whose packages other work is restructuring now: their docstrings get their
# ``May import:`` sentence with it.  Strict: the marker must go once they have one.
DOCSTRING_PENDING: dict[str, str] = {}


def table_rows(text: str) -> dict[str, str]:
    """The layer table's "may import" cell by its first cell (``wire`` for `` `wire/` ``)."""
    lines = text.splitlines()
    start = lines.index(TABLE_HEADER)
    rows: dict[str, str] = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        # A `|` inside a cell is escaped (`\|`), as GitHub needs it even in code.
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
        assert len(cells) == 3, f"a row of the layer table has {len(cells)} cells: {line[:80]}"
        first = cells[0]
        name = first.strip("`").removesuffix("/") if first.startswith("`") else first
        rows[name] = cells[2]
    return rows


def cell_layers(cell: str) -> frozenset[str]:
    """The layers a table cell names before any ``;`` commentary."""
    said = cell.split(";")[0].strip()
    if said.startswith("nothing"):
        assert said == "nothing of `sloopd`", said
        return frozenset()
    return frozenset(re.findall(r"`(\w+)`", said))


_MAY_IMPORT = re.compile(r"May import:((?:``[^`]*``|[^`.;])*)")


def docstring_layers(doc: str) -> frozenset[str] | None:
    """The layers a docstring's ``May import:`` sentence names; None without one."""
    found = _MAY_IMPORT.search(" ".join(doc.split()))
    if found is None:
        return None
    said = re.sub(r"\([^)]*\)", "", found.group(1)).strip()
    if said.startswith("nothing"):
        assert said == "nothing of ``sloopd``", said
        return frozenset()
    return frozenset(re.findall(r"``(?:sloopd\.)?(\w+)``", said))


def layer_docstring(layer: str) -> str:
    source = (ROOT / "sloopd" / layer / "__init__.py").read_text(encoding="utf-8")
    return ast.get_docstring(ast.parse(source)) or ""


def test_the_table_has_a_row_for_every_layer_and_the_root() -> None:
    assert set(table_rows(ARCHITECTURE.read_text(encoding="utf-8"))) == {*LAYERS, ROOT_ROW}


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_the_tables_may_import_is_the_enforced_rule(layer: str) -> None:
    cell = table_rows(ARCHITECTURE.read_text(encoding="utf-8"))[layer]
    assert cell_layers(cell) == LAYERS[layer], cell


def test_the_table_says_the_root_may_import_every_layer() -> None:
    cell = table_rows(ARCHITECTURE.read_text(encoding="utf-8"))[ROOT_ROW]
    assert cell == ROOT_MAY_IMPORT


@pytest.mark.parametrize(
    "layer",
    [
        pytest.param(layer, marks=pytest.mark.xfail(strict=True, reason=DOCSTRING_PENDING[layer]))
        if layer in DOCSTRING_PENDING
        else layer
        for layer in sorted(LAYERS)
    ],
)
def test_each_layers_docstring_says_what_it_may_import(layer: str) -> None:
    said = docstring_layers(layer_docstring(layer))
    assert said is not None, f"sloopd/{layer}/__init__.py needs a 'May import:' sentence"
    assert said == LAYERS[layer]


# --- the readers themselves --------------------------------------------------------------


def test_a_cell_reads_names_before_its_commentary() -> None:
    assert cell_layers("`wire`, `util` and `git`; never `runs`") == {"wire", "util", "git"}
    assert cell_layers("nothing of `sloopd`") == frozenset()


def test_a_docstring_reads_names_without_prefixes_or_parentheses() -> None:
    doc = "Owns x.\n\nMay import: ``sloopd.util`` and ``proc`` (for ``sloopd.git.runner``).\n"
    assert docstring_layers(doc) == frozenset({"util", "proc"})
    assert docstring_layers("May import: nothing of ``sloopd``; all import it.") == frozenset()
    assert docstring_layers("It imports what it likes.") is None
