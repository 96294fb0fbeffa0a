"""Harvest the failure wording a pinned agent CLI ships, for tests/unit/vendor_strings.

A CLI's error messages are literals in its bundle: JavaScript for Gemini CLI, the JS
embedded in Claude Code's native binary, Rust literals run together in Codex's. When
a pin changes (tests/support/agent_clis.py), the classifier must learn the new
wording before a run meets it, so this lists every message-like literal near an
error path (429, rate limit, quota, usage limit, spend, overloaded, capacity, timeout,
ECONNREFUSED, auth, API key, …) that the CLI's table does not hold yet, with the class
Sloop gives it today::

    .venv/bin/python -m tests.support.vendor_harvest claude > /tmp/claude-candidates.jsonl

A person reads the candidates and adds the failures among them to the table with the
class each must get (null for a line that is no failure); the test over the tables
(tests/unit/test_vendor_strings.py) then holds the classifier to them.  Most
candidates are no failure at all (settings help, UI labels): the harvest finds, the
person judges.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final

from sloopd.vendor import classify
from tests.support.agent_clis import PINNED, cache_dir

TABLES: Final = Path(__file__).resolve().parents[1] / "unit" / "vendor_strings"
NOW_MS: Final = 1_796_131_200_000

# Words of an error path; a literal without one is not a failure message.
ERROR_WORDS: Final = re.compile(
    r"429|rate.?limit|quota|usage limit|spend|overloaded|capacity|timed? ?out|timeout"
    r"|ECONN|network|auth|api.?key|credit|billing|organi[sz]ation|monthly|reconnect"
    r"|unavailable|exceeded|exhausted",
    re.IGNORECASE,
)
# A quoted literal of a JS bundle (template parts ${…} left as they are).
_QUOTED: Final = re.compile(r'"([^"\\\n]{12,300})"|`([^`\n]{12,300})`|\'([^\'\\\n]{12,300})\'')
# Rust literals run together: a sentence starts at a capital after a lower-case letter
# or a full stop.
_SENTENCE: Final = re.compile(r"[A-Z][a-z'\u2019]+(?: [^\x00-\x1f]{1,200}?)[.!](?=[A-Z\s]|$)")
_TEMPLATE_PART: Final = re.compile(r"\$\{[^{}]{0,80}\}")
_CODE: Final = re.compile(r"[{};=]|=>|\(\)|\bfunction\b|\bthis\.|\\[nu]")


def printable_runs(data: bytes, least: int = 12) -> Iterator[str]:
    """What ``strings -n least`` prints: runs of printable UTF-8 text."""
    for run in re.finditer(rb"[\x20-\x7e\xc2-\xf4\x80-\xbf\t]{%d,}" % least, data):
        yield run.group().decode("utf-8", "replace")


def message_like(text: str) -> bool:
    """A sentence for a person, not code, a flag or an identifier.

    A template's parts (``${…}``) are what the CLI fills in at run time: judged
    without them, so ``${cu}: Usage credits ran out …`` counts.
    """
    stripped = _TEMPLATE_PART.sub("", text).strip(" :\u00b7")
    return (
        stripped.count(" ") >= 2
        and stripped[:1].isupper()
        and _CODE.search(stripped) is None
        and ERROR_WORDS.search(stripped) is not None
    )


def candidates(runs: Iterable[str]) -> Iterator[str]:
    """The message-like literals of a bundle's text, each once, in bundle order."""
    seen: set[str] = set()
    for run in runs:
        found = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(run)]
        found += [m.group() for m in _SENTENCE.finditer(run)] if not found else []
        for text in found:
            if text not in seen and message_like(text):
                seen.add(text)
                yield text.strip()


def bundle_files(name: str) -> list[Path]:
    """The files of an installed pinned CLI that hold its messages."""
    root = cache_dir() / PINNED[name].replace("/", "+") / "node_modules"
    scripts = [p for p in root.rglob("*.js") if p.is_file()]
    natives = [p for p in root.rglob("*") if p.is_file() and p.name in ("claude", "codex")]
    return sorted(scripts + [p for p in natives if p.stat().st_size > 1 << 20])


def known(name: str) -> set[str]:
    document = json.loads((TABLES / f"{name}.json").read_text(encoding="utf-8"))
    rows = document.get("strings") or document.get("cases") or []
    return {line for row in rows for line in (row.get("lines") or [row.get("text")]) if line}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in PINNED:
        print(f"usage: python -m tests.support.vendor_harvest {{{','.join(PINNED)}}}")
        return 2
    name = argv[0]
    have = known(name)
    for path in bundle_files(name):
        for text in candidates(printable_runs(path.read_bytes())):
            if text not in have:
                found = classify([text], NOW_MS).classification
                print(json.dumps({"text": text, "sloop_today": found, "file": path.name}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
