"""Named queries, loaded once from queries.sql (``-- name: <query>`` blocks)."""

from __future__ import annotations

import re
from importlib import resources
from typing import Final


def _load() -> dict[str, str]:
    text = resources.files("sloopd.store").joinpath("queries.sql").read_text(encoding="utf-8")
    queries: dict[str, str] = {}
    for block in re.split(r"^-- name: ", text, flags=re.MULTILINE)[1:]:
        name, _, body = block.partition("\n")
        lines = [ln for ln in body.splitlines() if not ln.lstrip().startswith("--")]
        queries[name.strip()] = "\n".join(lines).strip()
    return queries


QUERIES: Final = _load()
